"""`keras_attn.seq2seq.SequenceLoss` against a NumPy reference written from
its formula; padding adds nothing; it trains through `compile` and
round-trips through `.keras`."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import SequenceLoss
from tests.backend import training


def reference(y_true, logits, epsilon, ignore_class=0):
    """Mean over all B·T positions of −Σ_v t_v log softmax(z)_v, with
    t = (1 − ε)·one_hot + ε/V, and zero where y_true == ignore_class."""
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    target = (1 - epsilon) * np.eye(vocab)[y_true] + epsilon / vocab
    per_token = -(target * log_p).sum(-1)
    if ignore_class is not None:
        per_token = per_token * (y_true != ignore_class)
    return per_token.mean()


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("ignore_class", [0, None])
def test_matches_the_formula(epsilon, ignore_class):
    rng = np.random.default_rng(0)
    y_true = np.array([[4, 2, 0, 0], [1, 3, 5, 0]])
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    loss = SequenceLoss(label_smoothing=epsilon, ignore_class=ignore_class)
    got = float(loss(y_true, logits))
    want = reference(y_true, logits.astype("float64"), epsilon, ignore_class)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_padding_positions_add_nothing_and_get_no_gradient():
    rng = np.random.default_rng(1)
    y_true = np.array([[4, 2, 0]])
    logits = rng.normal(size=(1, 3, 5)).astype("float32")
    changed = logits.copy()
    changed[0, 2] += 100.0  # the padded position's prediction
    loss = SequenceLoss(label_smoothing=0.1)
    assert float(loss(y_true, logits)) == float(loss(y_true, changed))
    probabilities = SequenceLoss(from_logits=False)
    p = keras.ops.softmax(keras.ops.convert_to_tensor(logits))
    assert float(probabilities(y_true, p)) == pytest.approx(
        float(SequenceLoss()(y_true, logits)), rel=1e-5
    )


def test_trains_in_compile_and_round_trips(tmp_path):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(7, 4, mask_zero=True)(tokens)
    model = keras.Model(tokens, keras.layers.Dense(7)(x))
    loss = SequenceLoss(label_smoothing=0.2, ignore_class=0)
    model.compile("adam", loss=loss)
    x = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    y = np.array([[2, 3, 4, 0], [5, 6, 0, 0]])
    first = model.evaluate(x, y, verbose=0)
    with training():
        model.fit(x, y, epochs=20, verbose=0)
    assert model.evaluate(x, y, verbose=0) < first
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.models.load_model(path)
    assert isinstance(again.loss, SequenceLoss)
    assert again.loss.get_config() == loss.get_config()
    restored = SequenceLoss.from_config(loss.get_config())
    assert restored.label_smoothing == 0.2 and restored.ignore_class == 0


def test_label_smoothing_out_of_range_names_the_argument():
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        SequenceLoss(label_smoothing=1.5)


# -- tfa's reductions and distribution targets (issue #30) ----------------
def np_tfa_sequence_loss(logits, targets, weights, at, ab, st, sb):
    """tfa.seq2seq.sequence_loss from its definition, in NumPy."""
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0] * weights
    nz = (weights != 0).astype(float)

    def div(a, b):
        return np.where(b == 0, 0.0, a / np.where(b == 0, 1, b))

    if at and ab:
        return div(ce.sum(), weights.sum())
    if st and sb:
        return div(ce.sum(), nz.sum())
    if at or ab:
        axis = 0 if ab else 1
        return div(ce.sum(axis), weights.sum(axis))
    axis = 0 if sb else 1
    return div(ce.sum(axis), nz.sum(axis))


FLAGS = [
    (True, True, False, False),
    (False, False, True, True),
    (True, False, False, False),
    (False, True, False, False),
    (False, False, True, False),
    (False, False, False, True),
]


@pytest.mark.parametrize("flags", FLAGS, ids=str)
@pytest.mark.parametrize("weighted", [False, True])
def test_tfa_reductions_match_the_definition(flags, weighted):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    targets = rng.integers(1, 7, size=(3, 5))
    targets[0, 3:] = 0  # padding
    targets[2, :] = 0  # an all-padding row: divide-by-zero gives 0
    if weighted:
        weights = rng.random((3, 5)).astype("float32")
        weights[1, 2] = 0.0
    else:
        weights = (targets != 0).astype("float32")
    names = (
        "average_across_timesteps",
        "average_across_batch",
        "sum_over_timesteps",
        "sum_over_batch",
    )
    # With weights, tfa's exact setting: the weights are the only mask.
    ignore = None if weighted else 0
    loss = SequenceLoss(
        ignore_class=ignore, **dict(zip(names, flags, strict=True))
    )
    got = loss(targets, logits, sample_weight=weights if weighted else None)
    want = np_tfa_sequence_loss(
        logits.astype("float64"), targets, weights, *flags
    )
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, rtol=1e-5)
    again = SequenceLoss.from_config(loss.get_config())
    np.testing.assert_allclose(
        ops.convert_to_numpy(
            again(targets, logits, sample_weight=weights if weighted else None)
        ),
        want,
        rtol=1e-5,
    )


def test_average_and_sum_on_one_axis_are_refused():
    with pytest.raises(
        ValueError, match="average_across_batch and sum_over_batch"
    ):
        SequenceLoss(average_across_batch=True, sum_over_batch=True)


@pytest.mark.parametrize(
    "average, total",
    [
        ("average_across_batch", "sum_over_timesteps"),
        ("average_across_timesteps", "sum_over_batch"),
    ],
)
def test_an_average_and_a_sum_of_ambiguous_order_are_refused(average, total):
    # tfa refuses them: whether the sum or the mean comes first changes
    # the result when the weights differ from row to row.
    with pytest.raises(ValueError, match=f"{average} and {total}.*order"):
        SequenceLoss(**{average: True, total: True})


def test_one_hot_and_soft_targets():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    ids = rng.integers(1, 6, size=(2, 4))
    ids[1, 2:] = 0
    one_hot = np.eye(6, dtype="float32")[ids] * (ids != 0)[..., None]
    for smoothing in (0.0, 0.2):
        loss = SequenceLoss(label_smoothing=smoothing, reduction=None)
        np.testing.assert_allclose(
            ops.convert_to_numpy(loss(one_hot, logits)),
            ops.convert_to_numpy(loss(ids, logits)),
            rtol=1e-6,
        )
    soft = rng.dirichlet(np.ones(6), size=(2, 4)).astype("float32")
    soft[1, 2:] = 0.0
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = -(soft * logp).sum(-1)
    got = SequenceLoss(reduction=None)(soft, logits)
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, rtol=1e-5)
