"""The model files that need TensorFlow and Keras.

`keras_attn_runtime.opener.open(path)` (here as `open`) opens every model
file: it owns the kinds, the order a folder is read in and the LiteRT and
ONNX artifacts. This module registers with it, when imported, the
loaders of the two kinds that need TensorFlow: a SavedModel (checked
against the op allowlist before it loads, `keras_attn.loading.trust`)
and a `.keras` raw-text model (or a `keras_attn.models.TextGenerator`'s
folder). Each has the
artifact's `path`, `kind`, `signatures` and `run`."""

import os

import numpy as np

from keras_attn_runtime import opener
from keras_attn_runtime.generator import ServedFolder
from keras_attn_runtime.opener import (  # noqa: F401, A004
    ModelError,
    PromptTooLong,
    find,
    found,
    open,
)
from keras_attn_runtime.signature import Signature


def load_saved_model(path, allow_unsafe=False):
    """Load a SavedModel after checking its files and its ops."""
    import tensorflow as tf

    from keras_attn.loading import trust

    if not opener.is_saved_model(path):
        raise ValueError(f"No saved_model.pb in {path!r}.")
    if not allow_unsafe:
        trust.check_saved_model(path)
    if not os.path.isfile(os.path.join(path, "variables", "variables.index")):
        raise ValueError(
            f"Not a complete SavedModel: {path!r} has no "
            "variables/variables.index"
        )
    try:
        return tf.saved_model.load(path)
    except Exception as err:
        first = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ValueError(
            f"Could not load the SavedModel {path!r}: {first}"
        ) from None


def load_keras_model(path):
    """Load a `.keras` file (or a folder holding `model.keras`) on the
    TensorFlow backend, which raw-text models need."""
    import keras

    import keras_attn  # noqa: F401  (registers the layers)

    if os.path.isdir(path):
        path = os.path.join(path, "model.keras")
    if not os.path.isfile(path):
        raise ValueError(f"No such model file. Received: path={path!r}")
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "Raw-text .keras models run on the TensorFlow backend (their "
            "TextVectorization layer is TensorFlow's): set "
            "KERAS_BACKEND=tensorflow, or use the model's .tflite or .onnx "
            f"export. Received: KERAS_BACKEND={keras.backend.backend()} for "
            f"{path!r}"
        )
    try:
        return keras.models.load_model(path)
    except Exception as err:
        raise ValueError(
            f"Could not load a Keras model from {path!r}: {err}"
        ) from err


def _spec(spec):
    shape = None if spec.shape.rank is None else spec.shape.as_list()
    return spec.dtype.name, shape


class SavedModelArtifact:
    """A SavedModel's signatures, loaded after the op allowlist check."""

    kind = "saved_model"

    def __init__(self, path, allow_unsafe=False):
        self.path = path
        self.loaded = load_saved_model(path, allow_unsafe)
        self.functions = dict(self.loaded.signatures)
        self.signatures = {}
        for name, function in self.functions.items():
            _, inputs = function.structured_input_signature
            self.signatures[name] = Signature(
                {k: _spec(v) for k, v in inputs.items()},
                {k: _spec(v) for k, v in function.structured_outputs.items()},
            )

    def run(self, signature, inputs):
        import tensorflow as tf

        function = self.functions[signature]
        try:
            out = function(**{k: tf.constant(v) for k, v in inputs.items()})
        except tf.errors.OpError as err:
            raise ModelError(err.message or str(err)) from None
        return {k: v.numpy() for k, v in out.items()}


class KerasArtifact:
    """A `.keras` raw-text model: one string input, a dict of outputs."""

    kind = "keras"

    def __init__(self, path):
        self.path = path
        self.model = load_keras_model(path)
        (tensor,) = self.model.inputs
        self.input = tensor.name
        outputs = self.model.outputs
        names = getattr(self.model, "output_names", None) or [
            f"output_{i}" for i in range(len(outputs))
        ]
        self.signatures = {
            opener.DEFAULT_SIGNATURE: Signature(
                {self.input: (str(tensor.dtype), list(tensor.shape))},
                {
                    n: (str(t.dtype), list(t.shape))
                    for n, t in zip(names, outputs, strict=True)
                },
            )
        }
        self.names = names

    def run(self, signature, inputs):
        import tensorflow as tf

        out = self.model(tf.constant(inputs[self.input]), training=False)
        if not isinstance(out, dict):
            out = dict(zip(self.names, [out], strict=True))
        return {k: np.asarray(v) for k, v in out.items()}


class TextGeneratorArtifact(ServedFolder):
    """A `keras_attn.models.TextGenerator` folder served from its Keras
    model (`ServedFolder`: `text` in, its `completion` out, greedy, as
    LiteRT-LM runs the folder's bundle); `stream` yields a completion's
    pieces as its tokens are decided."""

    kind = "keras"
    # `keras_attn_runtime.opener.StreamingArtifact`: one stream a call
    # on the model's executor, which does not say how many it holds.
    concurrent_streams = False
    stream_capacity = None
    sampling = True  # `stream(..., sampling={...})`

    def __init__(self, folder):
        from keras_attn.models import TextGenerator

        self.path = folder
        self.generator = TextGenerator.load(folder)
        self.tokenizer = self.generator.tokenizer
        self.context_length = self.generator.context_length
        super().__init__()

    def prompt_length(self, text):
        return len(self.generator.prompt_ids(text, check=False))

    def completions(self, texts):
        try:
            return self.generator.generate(texts)
        except ValueError as err:
            raise ModelError(str(err)) from None

    def stream(self, text, stop=None, sampling=None):
        """The completion's pieces; `sampling` (`{"temperature", "top_k",
        "top_p", "seed"}`) samples them (`keras_attn.models.Sampling`)."""
        from keras_attn.models import Sampling

        if sampling is not None:
            sampling = Sampling(**sampling)
        return self.generator.stream(text, stop, sampling)


def open_tensorflow_kind(kind, path, allow_unsafe=False):
    """The artifact of a SavedModel folder (its ops checked unless
    `allow_unsafe`) or a `.keras` file: the loaders this module registers
    with `keras_attn_runtime.opener` (whose `open` is also this module's)."""
    from keras_attn.models.text_generator import is_text_generator

    if kind == "saved_model":
        return SavedModelArtifact(path, allow_unsafe)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if is_text_generator(folder):
        return TextGeneratorArtifact(folder)
    return KerasArtifact(path)


for _kind in opener.TENSORFLOW_KINDS:
    opener.register(
        _kind,
        lambda path, allow_unsafe, kind=_kind: open_tensorflow_kind(
            kind, path, allow_unsafe
        ),
    )


def check_classifier(model, path):
    """A `ValueError` naming `path` unless `model` is a raw-text
    classifier: one string input, a dict output with `probability`."""
    inputs = getattr(model, "inputs", None) or []
    if len(inputs) != 1 or inputs[0].dtype != "string":
        raise ValueError(
            "Expected a text model: one string input. Received: "
            f"{path!r} with inputs "
            f"{[(tuple(t.shape), str(t.dtype)) for t in inputs]}"
        )
    outputs = model.output
    if not isinstance(outputs, dict) or "probability" not in outputs:
        names = sorted(outputs) if isinstance(outputs, dict) else "a tensor"
        raise ValueError(
            "Expected a model whose outputs are a dict with 'probability'. "
            f"Received: {path!r} with outputs {names}"
        )


def signature_of(loaded, path, key, needs):
    """The `key` signature of a loaded SavedModel, or a `ValueError`
    saying the file at `path` is not `needs` (what the caller runs)."""
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if key not in signatures:
        raise ValueError(
            f"Expected {needs} (a {key!r} signature). Received: {path!r} "
            f"with signatures {sorted(signatures)}"
        )
    return signatures[key]


def saved_classifier(loaded, path):
    """The `serving_default` function of a loaded text-classifier
    SavedModel (from `path`), checked."""
    import tensorflow as tf

    needs = "a text classifier SavedModel (`keras-attn translate` runs a "
    needs += "translator)"
    fn = signature_of(loaded, path, opener.DEFAULT_SIGNATURE, needs)
    specs = list(fn.structured_input_signature[1].values())
    if len(specs) != 1 or specs[0].dtype != tf.string:
        raise ValueError(
            "Expected a SavedModel whose serving_default takes one batch "
            f"of strings. Received: {path!r} with inputs {specs}"
        )
    if "probability" not in fn.structured_outputs:
        hint = ""
        if "translate" in loaded.signatures:
            hint = " (a translator: run it with `keras-attn translate`)"
        raise ValueError(
            "Expected a SavedModel whose serving_default returns "
            f"'probability'. Received: {path!r} with outputs "
            f"{sorted(fn.structured_outputs)}{hint}"
        )
    return fn
