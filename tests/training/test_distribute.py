"""`keras_attn.training.distribute` and `recipes/imdb_distributed.py`.

The fast tests check the custom step against `model.fit` on one device and
the argument errors. The slow tests start real processes: two
`MultiWorkerMirroredStrategy` workers on loopback, two logical devices
under `MirroredStrategy`, and two JAX host devices under `DataParallel`
and `ModelParallel`; each compares its losses with one device's.
"""

import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_attn
from keras_attn.training import distribute
from tests.paths import ROOT

EXAMPLE = os.path.join(ROOT, "recipes", "imdb_distributed.py")
TINY = ["--limit", "290", "--length", "64", "--batch-size", "16"]
TINY += ["--no-dropout"]


def small_model():
    keras.utils.set_random_seed(3)
    tokens = keras.Input((10,), dtype="int32")
    x = keras.layers.Embedding(40, 8, mask_zero=True)(tokens)
    x = keras_attn.MultiHeadPositional(2, 4, feed_forward="concat")(x)
    m = keras_attn.StructuredSelfAttention(6, 3, penalty_coefficient=0.5)(x)
    out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Flatten()(m))
    model = keras.Model(tokens, out)
    model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy")
    return model


def small_data():
    rng = np.random.default_rng(0)
    x = rng.integers(1, 40, size=(96, 10)).astype("int32")
    x[:48, 7:] = 0  # padding
    return x, (x[:, 0] > 20).astype("float32")


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.distribute"
)
def test_custom_step_equals_model_fit_on_one_device():
    """Same per-step losses and weights as `model.fit`, penalty included."""
    import tensorflow as tf

    x, y = small_data()

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.running = []

        def on_train_batch_end(self, batch, logs=None):
            self.running.append(logs["loss"])

    reference, steps = small_model(), Steps()
    reference.fit(
        x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[steps]
    )
    ours = small_model()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    history = distribute.fit(ours, data, epochs=1, verbose=0)
    running = np.cumsum(history["step_loss"]) / np.arange(1, 7)
    assert len(history["step_loss"]) == 6
    assert history["step_loss"][0] > 0.5  # the penalty is in the loss
    np.testing.assert_allclose(running, steps.running, rtol=1e-6)
    for a, b in zip(reference.get_weights(), ours.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.distribute"
)
def test_custom_step_takes_a_dataset_function_and_sample_weights():
    import tensorflow as tf

    x, y = small_data()
    w = np.where(np.arange(96) % 2, 1.0, 0.0).astype("float32")

    def make(context):
        assert context.num_input_pipelines == 1
        batch = context.get_per_replica_batch_size(16)
        return tf.data.Dataset.from_tensor_slices((x, y, w)).batch(batch)

    weighted = distribute.fit(small_model(), make, epochs=2, verbose=0)
    plain = distribute.fit(
        small_model(),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16),
        epochs=2,
        verbose=0,
    )
    assert len(weighted["loss"]) == 2 and len(weighted["step_loss"]) == 12
    assert weighted["step_loss"][0] != pytest.approx(plain["step_loss"][0])


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="workers=\\['nohost'\\]"):
        distribute.tf_config(["nohost"], 0)
    with pytest.raises(ValueError, match="index=2"):
        distribute.tf_config(["a:1", "b:2"], 2)
    config = json.loads(distribute.tf_config(["a:1", "b:2"], 1))
    assert config == {
        "cluster": {"worker": ["a:1", "b:2"]},
        "task": {"type": "worker", "index": 1},
    }
    uncompiled = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(ValueError, match="compiled"):
            distribute.fit(uncompiled, None)
        with pytest.raises(ValueError, match="received 0"):
            distribute.fit(small_model(), None, epochs=0)
        with pytest.raises(ValueError, match="received list"):
            distribute.fit(small_model(), [1, 2])
    else:
        with pytest.raises(ValueError, match="TensorFlow backend"):
            distribute.fit(uncompiled, None)


def test_multi_worker_strategy_needs_tf_config(monkeypatch):
    pytest.importorskip("tensorflow")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG .* not set"):
        distribute.multi_worker_strategy()
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    with pytest.raises(ValueError, match="received TF_CONFIG="):
        distribute.multi_worker_strategy()


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="Keras 3.15's keras.distribution has no PyTorch implementation",
)
def test_layout_map_shards_heads_of_multi_head_positional():
    devices = keras.distribution.list_devices()[:1] * 2
    mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"), devices)
    layouts = distribute.layout_map(mesh)
    layer = keras_attn.MultiHeadPositional(
        4, 8, feed_forward="concat", use_gate=True
    )
    layer(np.ones((2, 5, 16), "float32"))
    axes = {v.path: layouts[v.path] for v in layer.weights}
    want = {
        "query/kernel": (None, "model", None),
        "gate/bias": ("model", None),
        "attention_output/kernel": ("model", None, None),
        "feed_forward_1/kernel": (None, "model"),
        "feed_forward_2/kernel": ("model", None),
    }
    for suffix, expected in want.items():
        (path,) = [p for p in axes if p.endswith(suffix)]
        assert tuple(axes[path].axes) == expected, path
    assert (
        axes[[p for p in axes if p.endswith("attention_output/bias")][0]]
        is None
    )
    # Every sharded axis of every weight divides by the mesh's 2 devices.
    for v in layer.weights:
        if axes[v.path] is not None:
            for size, axis in zip(v.shape, axes[v.path].axes, strict=True):
                assert axis is None or size % 2 == 0, v.path
    with pytest.raises(ValueError, match="model_parallel_dim_name"):
        distribute.layout_map(mesh, model_parallel_dim_name="heads")


def test_initialize_jax_checks_its_arguments(monkeypatch):
    if keras.backend.backend() != "jax":
        with pytest.raises(ValueError, match="needs the JAX backend"):
            distribute.initialize_jax("localhost:1234", 2, 0)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    cases = [
        (("localhost", 2, 0), "`coordinator` must be a 'host:port'"),
        (("localhost:1", 0, 0), "`num_processes` must be a positive"),
        (("localhost:1", 2, 2), r"`process_id` must be an integer in \[0, 2\)"),
        (("localhost:1", 2, -1), "received process_id=-1"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            distribute.initialize_jax(*args)


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def example(args, tmp_path, name, env=None, wait=True):
    path = str(tmp_path / f"{name}.json")
    proc = subprocess.Popen(
        [sys.executable, EXAMPLE, *args, *TINY, "--losses", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": ROOT,
            "TF_CPP_MIN_LOG_LEVEL": "3",
            **(env or {}),
        },
    )
    if wait:
        return finish(proc, path)
    return proc, path


def finish(proc, path):
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, out[-3000:]
    with open(path) as f:
        return json.load(f)


def assert_close_in_ulps(a, b, ulps=2):
    a, b = np.float32(a), np.float32(b)
    assert a.shape == b.shape and a.size > 0
    tolerance = ulps * np.spacing(np.maximum(np.abs(a), np.abs(b)))
    assert np.all(np.abs(a - b) <= tolerance), np.abs(a - b).max()


@pytest.mark.slow
def test_two_workers_on_loopback_match_one_device(tmp_path):
    env = {"KERAS_BACKEND": "tensorflow"}
    one = example(["--strategy", "one-device"], tmp_path, "one", env)
    workers = [f"localhost:{p}" for p in free_ports(2)]
    procs = [
        example(
            ["--strategy", "multi-worker"],
            tmp_path,
            f"worker{i}",
            {**env, "TF_CONFIG": distribute.tf_config(workers, i)},
            wait=False,
        )
        for i in range(2)
    ]
    results = [finish(*p) for p in procs]
    assert len(one["step_loss"]) == 16  # 261 reviews, 16 per step
    for result in results:  # both workers saw the same global losses
        assert_close_in_ulps(result["step_loss"], one["step_loss"])


@pytest.mark.slow
def test_mirrored_strategy_on_two_devices_matches_one_device(tmp_path):
    env = {"KERAS_BACKEND": "tensorflow"}
    one = example(["--strategy", "one-device"], tmp_path, "one", env)
    two = example(["--strategy", "mirrored"], tmp_path, "two", env)
    assert_close_in_ulps(two["step_loss"], one["step_loss"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, strategy", [("ssa", "data-parallel"), ("mhp", "model-parallel")]
)
def test_two_jax_processes_on_loopback_match_one_device(
    tmp_path, model, strategy
):
    # One JAX job over two processes, one CPU device each, joined through
    # keras_attn.training.distribute.initialize_jax (Gloo collectives).
    pytest.importorskip("jax")
    env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": ""}
    args = ["--model", model]
    one = example([*args, "--strategy", "one-device"], tmp_path, "one", env)
    coordinator = f"localhost:{free_ports(1)[0]}"
    procs = [
        example(
            [*args, "--strategy", strategy, "--processes", "2"]
            + ["--process-id", str(i), "--coordinator", coordinator],
            tmp_path,
            f"process{i}",
            env,
            wait=False,
        )
        for i in range(2)
    ]
    results = [finish(*p) for p in procs]
    assert len(one["running_loss"]) == 16
    for result in results:
        assert result["devices"] == 2 and result["processes"] == 2
        np.testing.assert_allclose(
            result["running_loss"], one["running_loss"], rtol=1e-6
        )
        if strategy == "model-parallel":  # each process holds 2 of 4 heads
            assert list(result["shards"].values()) == [[[128, 2, 32]]] * 2


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ssa", "mhp"])
def test_jax_data_and_model_parallel_match_one_device(tmp_path, model):
    pytest.importorskip("jax")
    env = {
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    args = ["--model", model]
    one = example([*args, "--strategy", "one-device"], tmp_path, "one", env)
    assert one["devices"] == 1
    for strategy in ("data-parallel", "model-parallel"):
        two = example([*args, "--strategy", strategy], tmp_path, strategy, env)
        assert two["devices"] == 2
        np.testing.assert_allclose(
            two["running_loss"], one["running_loss"], rtol=1e-6
        )
        if strategy == "model-parallel" and model == "mhp":
            sharded = [s for p, s in two["shards"].items() if "positional" in p]
            assert len(sharded) == 2  # two blocks
            # (d, heads, key_dim) = (128, 4, 32): two heads on each device.
            assert sharded == [[[128, 2, 32]] * 2] * 2, two["shards"]
