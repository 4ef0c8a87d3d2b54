"""`multilabel_search`: tfa's `InferenceSampler` with a Bernoulli
`sample_fn` (each step a set of labels, fed back as the next input),
against a NumPy loop and the Bernoulli probabilities. Backend-agnostic."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import multilabel_search

V = 5
RNG = np.random.default_rng(0)
W = RNG.normal(size=(V, V)).astype("float32") * 2
B = RNG.normal(size=(V,)).astype("float32")


def step_fn(inputs, state, index):
    """Logits from the previous labels; the state counts the steps."""
    return ops.matmul(inputs, W) + B, state + 1.0, None


def ends_on_label_0(labels):
    return labels[:, 0] > 0.5


def np_threshold(start, steps, threshold, end=True):
    x, done, out, lengths = start, np.zeros(len(start), bool), [], 0
    lengths = np.zeros(len(start), int)
    for _ in range(steps):
        on = 1 / (1 + np.exp(-(x @ W + B))) > threshold
        drawn = np.where(done[:, None], 0.0, on.astype("float32"))
        out.append(drawn)
        lengths += ~done
        if end:
            done |= drawn[:, 0] > 0.5
        x = drawn
    return np.stack(out, 1), lengths


@pytest.mark.parametrize("end", [True, False])
def test_threshold_labels_follow_the_formula_and_end(end):
    start = (RNG.random((6, V)) > 0.5).astype("float32")
    out = multilabel_search(
        step_fn,
        np.zeros((6, 1), "float32"),
        start,
        7,
        end_fn=ends_on_label_0 if end else None,
        threshold=0.5,
    )
    labels, lengths = np_threshold(start, 7, 0.5, end)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["labels"]), labels)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["lengths"]), lengths)
    assert out["alignment"] is None
    if not end:
        assert np.all(lengths == 7)


def test_sampled_labels_have_the_sigmoid_frequencies():
    logits = np.array([-2.0, -0.5, 0.0, 1.0, 3.0], "float32")

    def constant(inputs, state, index):
        return ops.zeros_like(inputs) + logits, state, None

    rows = 4000
    out = multilabel_search(
        constant,
        np.zeros((rows, 1), "float32"),
        np.zeros((rows, V), "float32"),
        1,
        seed=7,
    )
    freq = ops.convert_to_numpy(out["labels"])[:, 0].mean(0)
    p = 1 / (1 + np.exp(-logits))
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / rows))
    again = multilabel_search(
        constant,
        np.zeros((rows, 1), "float32"),
        np.zeros((rows, V), "float32"),
        1,
        seed=7,
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(out["labels"]),
        ops.convert_to_numpy(again["labels"]),
    )


def test_sampling_compiles_and_matches_eager():
    start = np.ones((3, V), "float32")

    def run(state):
        out = multilabel_search(
            step_fn, state, start, 6, end_fn=ends_on_label_0, seed=3
        )
        return out["labels"], out["lengths"]

    state = np.zeros((3, 1), "float32")
    eager = [ops.convert_to_numpy(x) for x in run(state)]
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        compiled = jax.jit(run)(state)
    elif backend == "tensorflow":
        import tensorflow as tf

        spec = [tf.TensorSpec([None, 1], tf.float32)]
        compiled = tf.function(run, input_signature=spec)(state)
    else:
        pytest.skip("PyTorch runs the loop eagerly")
    for e, c in zip(eager, compiled, strict=True):
        np.testing.assert_array_equal(e, ops.convert_to_numpy(c))


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"max_length": 0}, "max_length=0"),
        ({"threshold": 1.0}, "threshold=1.0"),
        (
            {"start_inputs": np.zeros((V,), "float32")},
            r"start_inputs.shape=\(5,\)",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, needle):
    args = {
        "step_fn": step_fn,
        "state": np.zeros((2, 1), "float32"),
        "start_inputs": np.zeros((2, V), "float32"),
        "max_length": 3,
        **kwargs,
    }
    with pytest.raises(ValueError, match=needle):
        multilabel_search(**args)
