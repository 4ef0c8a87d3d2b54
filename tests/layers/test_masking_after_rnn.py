"""The masking contract after a recurrent layer, on every Keras we
support.

Keras 3.15's `RNN` and `Bidirectional` pass their input's mask on to
their output; from 3.16 they set `supports_masking = False`: the RNN
still reads its input's mask, but a layer after it gets none and attends
to padding. A mask handed to each layer by name (`mask=` for
`StructuredSelfAttention`, `query_mask=`/`value_mask=` for the score
family and `MultiHeadPositional`) gives the same answers on both
versions: padded steps get weight exactly 0, and more padding changes
nothing. These run in the layer suite, so also on the next Keras.
"""

import keras
import numpy as np
import pytest

import keras_attn

RNNS = {
    "lstm": lambda: keras.layers.LSTM(4, return_sequences=True),
    "gru": lambda: keras.layers.GRU(4, return_sequences=True),
    "simple_rnn": lambda: keras.layers.SimpleRNN(4, return_sequences=True),
    "bidirectional_lstm": lambda: keras.layers.Bidirectional(
        keras.layers.LSTM(2, return_sequences=True)
    ),
}


def attend(kind, x, mask):
    """The attention layer `kind` on `x`, handed `mask` by name:
    `(pooled or attended output, attention weights)`."""
    if kind == "structured_self_attention":
        return keras_attn.StructuredSelfAttention(4, num_hops=2)(
            x, mask=mask, return_attention_scores=True
        )
    if kind == "attention":
        return keras_attn.Attention(score="general")(
            x, x, query_mask=mask, value_mask=mask, return_attention_scores=True
        )
    return keras_attn.MultiHeadPositional(2, 2, position="rotary")(
        x, x, query_mask=mask, value_mask=mask, return_attention_scores=True
    )


def model_after(rnn, kind):
    keras.utils.set_random_seed(4)
    tokens = keras.Input((None,), dtype="int32")
    mask = keras.ops.not_equal(tokens, 0)  # (B, T): True on words
    x = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)
    x = RNNS[rnn]()(x, mask=mask)
    out, weights = attend(kind, x, mask)
    return keras.Model(tokens, [out, weights])


KINDS = ["structured_self_attention", "attention", "multi_head_positional"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rnn", sorted(RNNS))
def test_a_mask_by_name_survives_a_recurrent_layer(rnn, kind):
    model = model_after(rnn, kind)
    words = np.array([[3, 4, 5]], "int32")
    padded = np.array([[3, 4, 5, 0, 0, 0, 0]], "int32")
    out, weights = (np.asarray(t) for t in model(words))
    out_p, weights_p = (np.asarray(t) for t in model(padded))
    # Keys on padding get weight exactly 0, whatever the query.
    assert weights_p[..., 3:].max() == 0.0
    if kind == "structured_self_attention":  # A: (B, hops, T), M pooled
        np.testing.assert_allclose(weights_p[..., :3], weights, atol=1e-6)
        np.testing.assert_allclose(out_p, out, atol=1e-6)
    else:  # (B, [H,] Tq, Tk) and (B, T, D): the words' rows unchanged
        np.testing.assert_allclose(weights_p[..., :3, :3], weights, atol=1e-6)
        np.testing.assert_allclose(out_p[:, :3], out, atol=1e-6)


def test_the_readme_model_keeps_padding_out_of_the_attention():
    # docs/start-layers.md's classifier, as written there.
    tokens = keras.Input((None,), dtype="int32")
    mask = keras.ops.not_equal(tokens, 0)  # 0 = padding
    x = keras.layers.Embedding(1000, 32, mask_zero=True)(tokens)
    x = keras.layers.Bidirectional(
        keras.layers.LSTM(16, return_sequences=True)
    )(x, mask=mask)
    m, a = keras_attn.StructuredSelfAttention(
        16, num_hops=4, penalty_coefficient=0.1
    )(x, mask=mask, return_attention_scores=True)
    explain = keras.Model(tokens, a)
    hops = np.asarray(explain(np.array([[5, 6, 7, 0, 0]], "int32")))
    assert hops[..., 3:].max() == 0.0
    np.testing.assert_allclose(hops.sum(-1), 1.0, atol=1e-6)
