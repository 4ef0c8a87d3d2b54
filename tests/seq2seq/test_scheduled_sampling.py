"""Scheduled sampling (Bengio et al. 2015; tfa's
`ScheduledEmbeddingTrainingSampler`, `ScheduledOutputTrainingSampler`);
part of the JAX and PyTorch suite."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import AttentionDecoder, ScheduledSampling

V = 9


def make(p=0.0, mode="embedding", seed=4):
    keras.utils.set_random_seed(0)
    decoder = AttentionDecoder(keras.layers.GRUCell(6), units=5)
    if mode == "embedding":
        return ScheduledSampling(
            decoder,
            keras.layers.Dense(V),
            keras.layers.Embedding(V, 4),
            sampling_probability=p,
            seed=seed,
        )
    return ScheduledSampling(
        decoder, keras.layers.Dense(4), sampling_probability=p, mode="output",
        seed=seed,
    )  # fmt: skip


def data(batch=3, steps=5):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, V, (batch, steps)).astype("int32")
    ids[:, 0] = 1
    ids[1, 3:] = 0  # padding
    memory = rng.normal(size=(batch, 6, 7)).astype("float32")
    return ids, memory


def teacher_forced(layer, ids, memory):
    """The decoder over embedded ids, then the output layer."""
    out, align, _ = layer.decoder(
        layer.embedding(ids), memory, inputs_mask=ids != 0
    )
    logits = ops.convert_to_numpy(layer.output_layer(out))
    return logits * (ids != 0)[..., None], ops.convert_to_numpy(align)


def np_(x):
    return ops.convert_to_numpy(x)


def test_probability_zero_and_inference_are_teacher_forcing():
    ids, memory = data()
    for p, training in ((0.0, True), (1.0, False), (0.5, None)):
        layer = make(p)
        out = layer(ids, memory, training=training)
        logits, align = teacher_forced(layer, ids, memory)
        np.testing.assert_allclose(np_(out["outputs"]), logits, atol=1e-5)
        np.testing.assert_allclose(np_(out["alignments"]), align, atol=1e-6)
        np.testing.assert_array_equal(np_(out["fed_ids"]), ids)
        assert not np_(out["sampled"]).any()


def test_the_decoder_reads_what_it_was_fed():
    """With p = 1 every step after the first reads a sampled id; running
    teacher forcing on the ids it read gives the same outputs."""
    ids, memory = data()
    layer = make(1.0)
    out = layer(ids, memory, training=True)
    fed, sampled = np_(out["fed_ids"]), np_(out["sampled"])
    assert sampled[:, 1:].all() and not sampled[:, 0].any()
    assert (fed[:, 0] == 1).all() and (fed != ids)[:, 1:].any()
    assert (fed[ids != 0] != 0).all()  # padding id never sampled
    fed = np.where(ids != 0, fed, 0)
    logits, align = teacher_forced(layer, fed, memory)
    np.testing.assert_allclose(np_(out["outputs"]), logits, atol=1e-5)
    np.testing.assert_allclose(np_(out["alignments"]), align, atol=1e-6)


def test_samples_follow_the_softmax_and_coins_the_probability():
    n = 4000
    ids = np.tile(np.array([[1, 5, 6]], "int32"), (n, 1))
    memory = np.tile(data()[1][:1], (n, 1, 1))
    layer = make(1.0, seed=11)
    out = layer(ids, memory, training=True)
    logits, _ = teacher_forced(layer, ids[:1], memory[:1])
    z = logits[0, 0].astype("float64")
    z[0] = -np.inf
    probs = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    counts = np.bincount(np_(out["fed_ids"])[:, 1], minlength=V) / n
    sigma = np.sqrt(probs * (1 - probs) / n)
    assert (np.abs(counts - probs) <= 4 * sigma + 1e-9).all(), (counts, probs)
    half = make(0.3, seed=12)(ids, memory, training=True)
    rate = np_(half["sampled"])[:, 1:].mean()
    assert abs(rate - 0.3) < 4 * np.sqrt(0.3 * 0.7 / (2 * n))


def test_output_mode_feeds_the_previous_output_back():
    rng = np.random.default_rng(1)
    frames = rng.normal(size=(2, 4, 4)).astype("float32")
    memory = rng.normal(size=(2, 6, 7)).astype("float32")
    layer = make(1.0, mode="output")
    out = np_(layer(frames, memory, training=True)["outputs"])
    state, x, expected = None, frames[:, 0], []
    for _ in range(4):
        y, state, _ = layer.decoder.step(x, state, memory)
        x = np_(layer.output_layer(y))
        expected.append(x)
    np.testing.assert_allclose(out, np.stack(expected, 1), atol=1e-5)


@pytest.mark.parametrize(
    "p, training", [(1.0, True), (0.0, True), (1.0, False)]
)
def test_output_mode_concatenates_the_auxiliary_inputs(p, training):
    """tfa's `ScheduledOutputTrainingSampler(auxiliary_inputs=...)`: the
    step's input is the reference (or, when sampled, the previous output)
    with that step's auxiliary features after it."""
    rng = np.random.default_rng(2)
    frames = rng.normal(size=(2, 4, 4)).astype("float32")
    aux = rng.normal(size=(2, 4, 3)).astype("float32")
    memory = rng.normal(size=(2, 6, 7)).astype("float32")
    layer = make(p, mode="output")
    out = layer(frames, memory, auxiliary_inputs=aux, training=training)
    sampled = p == 1.0 and training
    state, expected, previous = None, [], None
    for t in range(4):
        own = frames[:, t] if t == 0 or not sampled else previous
        x = np.concatenate([own, aux[:, t]], -1)
        y, state, _ = layer.decoder.step(x, state, memory)
        previous = np_(layer.output_layer(y))
        expected.append(previous)
    np.testing.assert_allclose(
        np_(out["outputs"]), np.stack(expected, 1), atol=1e-5
    )
    assert np.all(np_(out["sampled"])[:, 1:] == sampled)


def test_auxiliary_inputs_in_a_model_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    frames = rng.normal(size=(2, 4, 4)).astype("float32")
    aux = rng.normal(size=(2, 4, 3)).astype("float32")
    memory = rng.normal(size=(2, 6, 7)).astype("float32")
    f, a, m = (
        keras.Input((None, 4)),
        keras.Input((None, 3)),
        keras.Input((6, 7)),
    )
    out = make(0.5, mode="output")(f, m, auxiliary_inputs=a)["outputs"]
    model = keras.Model([f, a, m], out)
    model.save(tmp_path / "aux.keras")
    again = keras.models.load_model(tmp_path / "aux.keras")
    np.testing.assert_allclose(
        again.predict([frames, aux, memory], verbose=0),
        model.predict([frames, aux, memory], verbose=0),
        atol=1e-6,
    )


def test_auxiliary_inputs_only_in_output_mode():
    ids, memory = data()
    with pytest.raises(
        ValueError, match="auxiliary_inputs.shape=\\(3, 5, 2\\)"
    ):
        make(0.5)(ids, memory, auxiliary_inputs=np.ones((3, 5, 2), "float32"))


def test_the_probability_is_a_variable_and_round_trips(tmp_path):
    layer = make(0.2)
    ids, memory = data()
    layer(ids, memory)
    layer.sampling_probability = 0.7
    assert float(np_(layer.sampling_probability)) == pytest.approx(0.7)
    i, m = keras.Input((None,), dtype="int32"), keras.Input((6, 7))
    out = layer(i, m)
    model = keras.Model([i, m], out["outputs"])
    path = str(tmp_path / "s.keras")
    model.save(path)
    again = keras.models.load_model(path)
    loaded = [la for la in again.layers if hasattr(la, "mode")][0]
    assert float(np_(loaded.sampling_probability)) == pytest.approx(0.7)
    np.testing.assert_allclose(
        model.predict([ids, memory], verbose=0),
        again.predict([ids, memory], verbose=0),
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="sampling_probability=1.5"):
        layer.sampling_probability = 1.5


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"sampling_probability": -0.1}, "sampling_probability=-0.1"),
        ({"mode": "soft"}, "mode='soft'"),
        ({"embedding": None}, "embedding=None"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    args = {
        "decoder": AttentionDecoder(keras.layers.GRUCell(4)),
        "output_layer": keras.layers.Dense(V),
        "embedding": keras.layers.Embedding(V, 3),
        **kwargs,
    }
    with pytest.raises(ValueError, match=name):
        ScheduledSampling(**args)


def test_output_mode_needs_matching_widths():
    layer = ScheduledSampling(
        AttentionDecoder(keras.layers.GRUCell(4)),
        keras.layers.Dense(3),
        mode="output",
    )
    with pytest.raises(ValueError, match="must be the inputs'"):
        layer(np.ones((1, 2, 5), "float32"), np.ones((1, 3, 4), "float32"))


@pytest.mark.slow
def test_trains_with_fit_and_a_schedule():
    from tests.backend import training

    ids, memory = data(8, 5)
    layer = make(0.0)
    i, m = keras.Input((None,), dtype="int32"), keras.Input((6, 7))
    model = keras.Model([i, m], layer(i, m)["outputs"])
    model.compile("adam", keras.losses.MeanSquaredError())
    targets = np.zeros((8, 5, V), "float32")

    class Ramp(keras.callbacks.Callback):  # p = 0.0, 0.5, 1.0
        def on_epoch_begin(self, epoch, logs=None):
            layer.sampling_probability = epoch / 2

    with training():
        history = model.fit(
            [ids, memory], targets, epochs=3, verbose=0, callbacks=[Ramp()]
        )
    assert np.isfinite(history.history["loss"]).all()
    assert float(np_(layer.sampling_probability)) == 1.0
