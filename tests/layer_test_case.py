"""Checks every layer test reuses: config, saving, gradients, training."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np

from tests.backend import gradients, to_numpy, training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_config_round_trip(layer):
    """`from_config(get_config())` gives an equal config."""
    config = layer.get_config()
    json.dumps(keras.saving.serialize_keras_object(layer))  # JSON-able
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config


def assert_model_round_trips(model, inputs, tmp_path, fresh_process=True):
    """`.keras` (same and fresh process) and weights files keep predictions.

    The fresh process imports `keras_attn` (which registers the classes) and
    calls `keras.models.load_model` without `custom_objects`.
    """
    expected = _as_list(model.predict(inputs, verbose=0))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    for want, got in zip(
        expected, _as_list(loaded.predict(inputs, verbose=0)), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    weights = str(tmp_path / "model.weights.h5")
    model.save_weights(weights)
    clone = keras.models.clone_model(model)
    clone.load_weights(weights)
    for want, got in zip(
        expected, _as_list(clone.predict(inputs, verbose=0)), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    if not fresh_process:
        return
    in_path = str(tmp_path / "inputs.npz")
    out_path = str(tmp_path / "outputs.npz")
    flat = _as_list(inputs)
    np.savez(in_path, *flat)
    script = textwrap.dedent(
        f"""
        import keras, numpy as np
        import keras_attn  # registers the classes; no custom_objects
        model = keras.models.load_model({path!r})
        data = np.load({in_path!r})
        xs = [data[f"arr_{{i}}"] for i in range(len(data.files))]
        out = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        out = out if isinstance(out, (list, tuple)) else [out]
        np.savez({out_path!r}, *out)
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    got = np.load(out_path)
    for i, want in enumerate(expected):
        np.testing.assert_allclose(got[f"arr_{i}"], want, rtol=1e-6, atol=1e-6)


def assert_finite_gradients(layer, call):
    """Every trainable weight gets a finite, not-all-zero gradient."""
    call()  # builds the layer

    def loss():
        terms = [
            keras.ops.sum(keras.ops.square(keras.ops.cast(o, "float32")))
            for o in _as_list(call())
        ]
        return sum(terms + list(layer.losses))

    _, grads = gradients(loss, [], layer.trainable_weights)
    assert layer.trainable_weights, "layer has no trainable weights"
    for w, g in zip(layer.trainable_weights, grads, strict=True):
        assert g is not None, f"no gradient for {w.path}"
        g = to_numpy(g)
        assert np.all(np.isfinite(g)), f"non-finite gradient for {w.path}"
        assert np.any(g != 0), f"zero gradient for {w.path}"


def assert_trains(model, x, y, steps=30, loss="mse"):
    """A few optimizer steps lower the loss."""
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    before = model.evaluate(x, y, verbose=0)
    with training():
        model.fit(x, y, epochs=steps, batch_size=len(x), verbose=0)
    after = model.evaluate(x, y, verbose=0)
    before = before[0] if isinstance(before, list) else before
    after = after[0] if isinstance(after, list) else after
    assert after < 0.8 * before, (before, after)


def np_masked_softmax(logits, mask):
    """NumPy reference: softmax over the last axis, masked entries 0."""
    logits = np.where(mask, logits, -np.inf)
    top = np.max(logits, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    ex = np.where(mask, np.exp(logits - top), 0.0)
    total = ex.sum(-1, keepdims=True)
    return np.divide(ex, total, out=np.zeros_like(ex), where=total > 0)


def _as_list(x):
    if isinstance(x, dict):
        return [x[k] for k in sorted(x)]
    return list(x) if isinstance(x, (list, tuple)) else [x]
