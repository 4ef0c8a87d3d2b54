"""Several attention mechanisms in one `AttentionDecoder` (tfa's list of
mechanisms: one memory each, contexts concatenated); part of the JAX and
PyTorch suite."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import Attention
from keras_attn.seq2seq import AttentionDecoder


def make(order="luong", feeding=False):
    keras.utils.set_random_seed(2)
    return AttentionDecoder(
        keras.layers.GRUCell(6),
        attention_order=order,
        input_feeding=feeding,
        attentional_units=5 if feeding else None,
        mechanisms=[
            Attention(score="additive", units=4),
            Attention(score="general", use_scale=True),
        ],
    )


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    memories = [
        rng.normal(size=(3, 7, 8)).astype("float32"),
        rng.normal(size=(3, 4, 5)).astype("float32"),
    ]
    masks = [
        np.arange(7)[None] < np.array([[7], [3], [5]]),
        np.arange(4)[None] < np.array([[2], [4], [3]]),
    ]
    inputs_mask = np.arange(5)[None] < np.array([[5], [4], [2]])
    return x, memories, masks, inputs_mask


def by_hand(decoder, x, memories, masks, inputs_mask):
    """The loop written out: each mechanism called on its own memory."""
    h = np.zeros((x.shape[0], 6), "float32")
    fed = np.zeros((x.shape[0], decoder.output_size), "float32")
    outs, aligns = [], [[], []]

    def attend(query):
        pairs = [
            m(query[:, None], mem, value_mask=k, return_attention_scores=True)
            for m, mem, k in zip(
                decoder.mechanisms, memories, masks, strict=True
            )
        ]
        context = np.concatenate(
            [ops.convert_to_numpy(c[:, 0]) for c, _ in pairs], -1
        )
        return context, [ops.convert_to_numpy(w[:, 0]) for _, w in pairs]

    for t in range(x.shape[1]):
        pieces = [x[:, t]] + ([fed] if decoder.input_feeding else [])
        if decoder.attention_order == "bahdanau":
            context, weights = attend(h)
            pieces.append(context)
        out, new = decoder.cell(np.concatenate(pieces, -1), [h])
        out, new = ops.convert_to_numpy(out), ops.convert_to_numpy(new[0])
        if decoder.attention_order == "luong":
            context, weights = attend(out)
        joined = np.concatenate([context, out], -1)
        if decoder.attentional_layer is not None:
            joined = ops.convert_to_numpy(decoder.attentional_layer(joined))
        on = inputs_mask[:, t : t + 1]
        h, fed = np.where(on, new, h), np.where(on, joined, fed)
        outs.append(np.where(on, joined, 0))
        for i in range(2):
            aligns[i].append(np.where(on, weights[i], 0))
    return np.stack(outs, 1), [np.stack(a, 1) for a in aligns]


@pytest.mark.parametrize(
    "order, feeding", [("luong", False), ("bahdanau", False), ("luong", True)]
)
def test_contexts_concatenated_and_alignments_per_memory(order, feeding):
    decoder = make(order, feeding)
    x, memories, masks, inputs_mask = data()
    out, aligns, _ = decoder(
        x, memories, memory_mask=masks, inputs_mask=inputs_mask
    )
    ref_out, ref_aligns = by_hand(decoder, x, memories, masks, inputs_mask)
    assert decoder.output_size == (5 if feeding else 8 + 5 + 6)
    np.testing.assert_allclose(ops.convert_to_numpy(out), ref_out, atol=2e-5)
    assert isinstance(aligns, list) and len(aligns) == 2
    for got, want, mask in zip(aligns, ref_aligns, masks, strict=True):
        got = ops.convert_to_numpy(got)
        np.testing.assert_allclose(got, want, atol=2e-6)
        assert not got[np.broadcast_to(~mask[:, None], got.shape)].any()
    # `step`, one token at a time, gives the same alignments
    states = None
    for t in range(2):  # every row is real for two steps
        _, states, weights = decoder.step(x[:, t], states, memories, masks)
        for i in range(2):
            np.testing.assert_allclose(
                ops.convert_to_numpy(weights[i]), ref_aligns[i][:, t], atol=2e-6
            )


def test_round_trip_with_two_memories(tmp_path):
    decoder = make()
    x = keras.Input((None, 4))
    ma, mb = keras.Input((7, 8)), keras.Input((4, 5))
    out, aligns, _ = decoder(x, [ma, mb])
    model = keras.Model([x, ma, mb], [out, *aligns])
    data_x, memories, _, _ = data()
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.models.load_model(path)
    for a, b in zip(
        model.predict([data_x, *memories], verbose=0),
        again.predict([data_x, *memories], verbose=0),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mechanisms": []},
        {"mechanisms": Attention()},
        {"mechanisms": [keras.layers.Dense(3)]},
        {"mechanisms": [Attention()], "monotonic": "hard"},
    ],
)
def test_bad_mechanisms_are_named(kwargs):
    with pytest.raises(ValueError, match="mechanisms="):
        AttentionDecoder(keras.layers.GRUCell(4), **kwargs)


def test_one_memory_per_mechanism():
    decoder = make()
    x, memories, _, _ = data()
    with pytest.raises(ValueError, match="one memory per mechanism"):
        decoder(x, memories[:1])
