import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The offline copy of IMDB that CI and developers have beside the repo.
_SHARED = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "..",
    "shared",
    "data",
    "tensorflow_datasets",
)
if "TFDS_DATA_DIR" not in os.environ and os.path.isdir(_SHARED):
    os.environ["TFDS_DATA_DIR"] = os.path.abspath(_SHARED)

if os.environ["KERAS_BACKEND"] == "torch":
    # Outputs are compared as NumPy arrays, which a tensor that requires
    # grad refuses; `backend.gradients` and `backend.training` turn
    # autograd back on where gradients are taken (`fit` included).
    import torch

    torch.set_grad_enabled(False)

# Property tests are reproducible: the default profile derandomizes
# hypothesis (the same examples on every run, no example database), so a
# red CI run is red again on a developer's machine.
# `HYPOTHESIS_PROFILE=explore` searches anew (CI runs it without blocking).
from hypothesis import settings  # noqa: E402

# Every profile is registered here, before one is loaded: a profile a
# test module registered would not exist yet when this line runs.
# `thorough`: the layer properties at 500 cases each.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.register_profile(
    "thorough", derandomize=False, max_examples=500, deadline=None
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Weights are drawn from Keras's global seed: each test starts from the
# same one, so its layers are initialized the same on every run and in
# any order of tests.
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _same_weights_every_run():
    import keras

    keras.utils.set_random_seed(1234)
