"""Distribution (MirroredStrategy) and determinism, each in a fresh process.

Both need process-wide TensorFlow settings (logical devices, op
determinism) that must be made before TensorFlow initializes.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = """
import keras, numpy as np, keras_attn

def build():
    keras.utils.set_random_seed(7)
    tokens = keras.Input((12,), dtype="int32")
    x = keras.layers.Embedding(50, 16, mask_zero=True)(tokens)
    x = keras_attn.MultiHeadPositional(2, 8, feed_forward="concat")(x)
    m = keras_attn.StructuredSelfAttention(8, 3, penalty_coefficient=0.5)(x)
    c = keras_attn.AdditiveAttention(8)(x, x)
    h = keras.layers.Concatenate()([
        keras.layers.Flatten()(m), keras.layers.GlobalAveragePooling1D()(c)])
    out = keras.layers.Dense(1, activation="sigmoid")(h)
    model = keras.Model(tokens, out)
    model.compile(keras.optimizers.SGD(0.1), "binary_crossentropy")
    return model

rng = np.random.default_rng(0)
X = rng.integers(1, 50, size=(320, 12)).astype("int32")
X[:, 9:] = 0
Y = (X[:, 0] > 25).astype("float32")
"""


def run(*parts):
    script = "\n".join(textwrap.dedent(part) for part in parts)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_mirrored_strategy_matches_one_device():
    """20 steps: same per-step losses (penalty included) within 1e-5."""
    out = run(
        """
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        """,
        MODEL,
        """
        class Losses(keras.callbacks.Callback):
            def __init__(self):
                super().__init__(); self.seen = []
            def on_train_batch_end(self, batch, logs=None):
                self.seen.append(float(logs["loss"]))

        def losses(model):
            cb = Losses()
            model.fit(X, Y, batch_size=16, epochs=1, shuffle=False,
                      verbose=0, callbacks=[cb])
            return np.array(cb.seen)

        single = losses(build())
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        assert strategy.num_replicas_in_sync == 2
        with strategy.scope():
            mirrored_model = build()
        mirrored = losses(mirrored_model)
        assert len(single) == len(mirrored) == 20
        print(float(np.abs(single - mirrored).max()))
    """,
    )
    assert float(out) <= 1e-5, out


@pytest.mark.slow
def test_seeded_training_is_deterministic():
    out = run(
        """
        import tensorflow as tf
        tf.config.experimental.enable_op_determinism()
        """,
        MODEL,
        """
        def weights():
            model = build()
            model.fit(X, Y, batch_size=32, epochs=2, verbose=0)
            return model.get_weights()

        a, b = weights(), weights()
        print(max(float(np.abs(x - y).max()) for x, y in zip(a, b)))
    """,
    )
    assert float(out) == 0.0, out


def test_penalty_scaling_matches_single_batch_mean():
    """The per-replica penalty is a batch mean, so replicas average to it."""
    import keras_attn

    layer = keras_attn.StructuredSelfAttention(4, 3)
    h = np.random.default_rng(1).normal(size=(8, 5, 3)).astype("float32")
    layer(h)
    whole = float(layer.losses[0])
    halves = []
    for part in (h[:4], h[4:]):
        layer(part)
        halves.append(float(layer.losses[0]))
    np.testing.assert_allclose(np.mean(halves), whole, rtol=1e-5)
