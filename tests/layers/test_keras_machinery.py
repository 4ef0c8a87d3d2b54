"""`MultiHeadPositional` stands on Keras's `EinsumDense`/`Dense`: LoRA,
int8 quantization and 0.1 files, each with a save/reload round trip."""

import os

import keras
import numpy as np
import pytest

import keras_attn
from tests import upstream
from tests.backend import to_numpy, training
from tests.paths import DATA

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
    data = np.load(os.path.join(DATA, "mhp_0.1.npz"))
    loaded = keras.models.load_model(os.path.join(DATA, "mhp_0.1.keras"))
    got = loaded.predict(data["x"], verbose=0)
    np.testing.assert_allclose(got, data["y"], atol=1e-5)


def test_0_3_file_with_rotary_alibi_grouped_heads_loads_the_same():
    # Written by MultiHeadPositional before it became one class (no
    # position sublayers then): rotary with grouped heads and g, ALiBi with a
    # gate and per-head g, a learned table.
    data = np.load(os.path.join(DATA, "mhp_0.3.npz"))
    loaded = keras.models.load_model(os.path.join(DATA, "mhp_0.3.keras"))
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


@pytest.mark.xfail(
    upstream.EINSUM_BIAS_ON_TIME_AXIS,
    reason="Keras < 3.16's TensorFlow `ops.add` (the bias of `EinsumDense`, "
    "inherited from MultiHeadAttention) puts a `(heads, 1)` bias on the "
    "time axis when T == heads; keras.layers.MultiHeadAttention has it too",
    strict=True,
)
def test_key_dim_one_with_as_many_steps_as_heads():
    """A `(heads, 1)` bias on `(B, T, heads, 1)` with `T == heads`."""
    x = RNG.normal(size=(1, 2, 4)).astype("float32")
    layer = keras_attn.MultiHeadPositional(
        2, 1, position=None, bias_initializer="random_normal"
    )
    layer(x, x)
    dense = layer._value_dense
    want = np.einsum("btd,dhk->bthk", x, to_numpy(dense.kernel))
    want += to_numpy(dense.bias)
    np.testing.assert_allclose(to_numpy(dense(x)), want, atol=1e-5)


@pytest.mark.slow
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


@pytest.mark.slow
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


# `StructuredSelfAttention` and `Attention` (general, low-rank, additive)
# hold their projections as Keras `Dense` sublayers too.


def attention_model():
    keras.utils.set_random_seed(4)
    x = keras.Input((6, 8))
    ssa = keras_attn.StructuredSelfAttention(5, 3, use_bias=True, name="ssa")
    h = ssa(x)  # (B, 3, 8)
    outs, layers = [keras.layers.Flatten()(h)], [ssa]
    for score in ("general", "low_rank", "additive"):
        layer = keras_attn.Attention(score=score, units=4, rank=3, name=score)
        outs.append(keras.layers.Flatten()(layer(h, x)))
        layers.append(layer)
    return keras.Model(x, keras.layers.Concatenate()(outs)), layers


def test_attention_and_ssa_files_from_before_the_sublayers_load():
    """Written by keras_attn at 31b3cba (raw weights, the 0.1 layout): SSA
    with a bias, general/low-rank with a learned scale, additive with a
    bias."""
    data = np.load(os.path.join(DATA, "attention_ssa_pre_sublayers.npz"))
    loaded = keras.models.load_model(
        os.path.join(DATA, "attention_ssa_pre_sublayers.keras")
    )
    got = loaded.predict(data["x"], verbose=0)
    np.testing.assert_allclose(got, data["y"], atol=1e-5)
    scale = loaded.get_layer("general").scale
    assert float(to_numpy(scale)) == pytest.approx(1.7)


def test_attention_and_ssa_projections_are_keras_layers():
    _, (ssa, general, low_rank, additive) = attention_model()
    assert [d.name for d in ssa._denses()] == ["hidden", "hops"]
    assert [d.name for d in general._denses()] == ["query"]
    assert [d.name for d in additive._denses()] == ["query", "key"]
    assert all(type(d) is keras.layers.Dense for d in ssa._denses())
    for layer in (general, low_rank, additive):  # float64 on PyTorch
        assert all(type(d) is keras.layers.EinsumDense for d in layer._denses())
    assert keras_attn.Attention(score="dot")._denses() == []


@pytest.mark.slow
def test_attention_and_ssa_int8_quantization_round_trips(tmp_path):
    net, layers = attention_model()
    want = net.predict(X, verbose=0)
    net.quantize("int8")
    for layer in layers:
        assert all(
            d.dtype_policy.name.startswith("int8") for d in layer._denses()
        )
    got = net.predict(X, verbose=0)
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
    assert np.abs(got - want).max() > 0  # it did quantize
    net.save(tmp_path / "int8.keras")
    again = keras.models.load_model(tmp_path / "int8.keras")
    for layer in layers:  # rebuilt quantized from the dtype-policy map
        reloaded = again.get_layer(layer.name)
        assert all(d.quantization_mode == "int8" for d in reloaded._denses())
    np.testing.assert_allclose(again.predict(X, verbose=0), got, atol=1e-5)
    if keras.backend.backend() == "tensorflow":  # and it exports
        import tensorflow as tf

        from keras_attn import export

        export.export_saved_model(again, str(tmp_path / "sm"))
        serve = tf.saved_model.load(str(tmp_path / "sm"))
        (out,) = serve.signatures["serving_default"](tf.constant(X)).values()
        np.testing.assert_allclose(out.numpy(), got, atol=1e-5)


def test_attention_and_ssa_lora_trains_only_adapters(tmp_path):
    net, layers = attention_model()
    before = net.predict(X, verbose=0)
    for layer in layers:
        layer.enable_lora(2)
    np.testing.assert_allclose(net.predict(X, verbose=0), before, atol=1e-6)
    trainable = [v.path for v in net.trainable_weights]
    # Keras's Dense.enable_lora keeps the bias trainable.
    assert {p.split("/")[-1] for p in trainable} == {
        "lora_kernel_a",
        "lora_kernel_b",
        "bias",
    }, trainable
    assert sum("lora" in p for p in trainable) == 2 * 7  # A and B of each
    frozen = [to_numpy(v) for v in net.non_trainable_weights]
    target = RNG.normal(size=before.shape).astype("float32")
    net.compile(keras.optimizers.SGD(0.1), "mse")
    with training():
        net.fit(X, target, epochs=3, verbose=0)
    after = net.predict(X, verbose=0)
    assert np.abs(after - before).max() > 1e-4
    for old, var in zip(frozen, net.non_trainable_weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(var))
    net.save(tmp_path / "lora.keras")
    again = keras.models.load_model(tmp_path / "lora.keras")
    np.testing.assert_allclose(again.predict(X, verbose=0), after, atol=1e-5)


def test_lora_targets_are_checked():
    _, (ssa, general, _, _) = attention_model()
    with pytest.raises(ValueError, match=r"received targets=\('key',\)"):
        general.enable_lora(2, targets=("key",))
    with pytest.raises(ValueError, match="'hidden', 'hops'"):
        ssa.enable_lora(2, targets=("query",))
    dot = keras_attn.Attention(score="dot")
    dot(X, X)
    with pytest.raises(ValueError, match="no projection"):
        dot.enable_lora(2)


def test_flash_attention_follows_keras_config():
    # 0.2.0 ignored `keras.config.disable_flash_attention()` (Keras's
    # global switch: `None` lets the backend decide, `False` turns it off).
    keras.config.disable_flash_attention()
    try:
        layer = keras_attn.MultiHeadPositional(2, 4)
    finally:
        keras.config.enable_flash_attention()
    assert layer.flash_attention is False
    assert keras_attn.MultiHeadPositional(2, 4).flash_attention is None
