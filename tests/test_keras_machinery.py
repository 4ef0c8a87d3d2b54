"""`MultiHeadPositional` stands on Keras's `EinsumDense`/`Dense`: LoRA,
int8 quantization and 0.1 files, each with a save/reload round trip."""

import os

import keras
import numpy as np
import pytest

import keras_attn
from tests.backend import to_numpy, training

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(9)
X = RNG.normal(size=(4, 6, 8)).astype("float32")
Y = RNG.normal(size=(4, 6, 8)).astype("float32")


def model(feed_forward="concat"):
    keras.utils.set_random_seed(1)
    x = keras.Input((6, 8))
    layer = keras_attn.MultiHeadPositional(
        2, 4, feed_forward=feed_forward, name="mhp"
    )
    return keras.Model(x, layer(x)), layer


def test_a_keras_file_written_by_0_1_loads_with_the_same_outputs():
    data = np.load(os.path.join(HERE, "data", "mhp_0.1.npz"))
    loaded = keras.models.load_model(
        os.path.join(HERE, "data", "mhp_0.1.keras")
    )
    got = loaded.predict(data["x"], verbose=0)
    np.testing.assert_allclose(got, data["y"], atol=1e-5)


def test_projections_are_keras_sublayers_named_like_keras_mha():
    _, layer = model()
    names = [sub.name for sub in layer._denses()]
    assert names[:4] == ["query", "key", "value", "attention_output"]
    assert all(
        isinstance(sub, (keras.layers.EinsumDense, keras.layers.Dense))
        for sub in layer._denses()
    )


def test_key_dim_one_with_as_many_steps_as_heads():
    """A `(heads, 1)` bias on `(B, T, heads, 1)` with `T == heads`: Keras
    3.15's TensorFlow `ops.add` put it on the time axis."""
    x = RNG.normal(size=(1, 2, 4)).astype("float32")
    layer = keras_attn.MultiHeadPositional(
        2, 1, position=None, bias_initializer="random_normal"
    )
    layer(x, x)
    dense = layer._value_dense
    want = np.einsum("btd,dhk->bthk", x, to_numpy(dense.kernel))
    want += to_numpy(dense.bias)
    np.testing.assert_allclose(to_numpy(dense(x)), want, atol=1e-5)


def test_lora_trains_only_the_adapters_and_round_trips(tmp_path):
    net, layer = model()
    before = net.predict(X, verbose=0)
    layer.enable_lora(2)
    np.testing.assert_allclose(net.predict(X, verbose=0), before, atol=1e-6)
    paths = [v.path for v in net.trainable_weights]
    assert {p.split("/")[-2] for p in paths} == {"query", "value"}
    assert sum("lora" in p for p in paths) == 4  # A and B of each
    frozen = [to_numpy(v) for v in net.non_trainable_weights]
    net.compile(keras.optimizers.SGD(0.1), "mse")
    with training():
        net.fit(X, Y, epochs=3, verbose=0)
    after = net.predict(X, verbose=0)
    assert np.abs(after - before).max() > 1e-4  # the adapters learned
    for old, var in zip(frozen, net.non_trainable_weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(var))
    net.save(tmp_path / "lora.keras")  # LoRA merged into the kernels
    again = keras.models.load_model(tmp_path / "lora.keras")
    np.testing.assert_allclose(again.predict(X, verbose=0), after, atol=1e-5)


@pytest.mark.parametrize("feed_forward", [None, "per_head"])
def test_int8_quantization_round_trips_and_stays_close(tmp_path, feed_forward):
    net, layer = model(feed_forward)
    want = net.predict(X, verbose=0)
    net.quantize("int8")
    assert all("int8" in str(sub.dtype_policy.name) for sub in layer._denses())
    got = net.predict(X, verbose=0)
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 0.05 * scale
    net.save(tmp_path / "int8.keras")
    again = keras.models.load_model(tmp_path / "int8.keras")
    np.testing.assert_allclose(again.predict(X, verbose=0), got, atol=1e-5)
    if keras.backend.backend() == "tensorflow":  # and it exports
        import tensorflow as tf

        from keras_attn import export

        export.export_saved_model(again, str(tmp_path / "sm"))
        serve = tf.saved_model.load(str(tmp_path / "sm")).signatures[
            "serving_default"
        ]
        (out,) = serve(tf.constant(X)).values()
        np.testing.assert_allclose(out.numpy(), got, atol=1e-5)
