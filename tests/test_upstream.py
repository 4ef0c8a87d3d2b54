"""The Keras behaviours our layers stand on, each named by a test.

`MultiHeadPositional` overrides and calls private hooks of
`keras.layers.MultiHeadAttention`, and our layers take their masks from
`Layer.__call__`. When Keras moves one of these, the test that names it
fails first, with the hook's name, before a model quietly answers
differently. Mask propagation through other layers is not among them:
the recipes hand masks to our layers by name (tested in
`tests/recipes/test_imdb_example.py`), so that Keras 3.16's nightly RNN
change (they stopped propagating masks) changes no answer.
"""

import inspect
import warnings

import keras
import numpy as np
import pytest

import keras_attn
from tests import upstream

# The private hooks of MultiHeadAttention that MultiHeadPositional
# overrides or calls, with the parameters it passes.
MHA_HOOKS = {
    "_build_attention": ["rank"],
    "_compute_attention": [
        "query",
        "key",
        "value",
        "attention_mask",
        "training",
        "return_attention_scores",
    ],
    "_compute_attention_mask": [
        "query",
        "value",
        "query_mask",
        "value_mask",
        "key_mask",
        "attention_mask",
        "use_causal_mask",
    ],
    "_compute_causal_mask": ["query", "value"],
    "_masked_softmax": ["attention_scores", "attention_mask"],
    "_get_common_kwargs_for_sublayer": [],
}
# The attributes of a built MultiHeadAttention that it reads.
MHA_ATTRIBUTES = [
    "_query_dense",
    "_key_dense",
    "_value_dense",
    "_output_dense",
    "_dot_product_equation",
    "_combine_equation",
    "_dropout_layer",
    "_inverse_sqrt_key_dim",
    "_attention_axes",
    "_flash_attention",
    "_key_dim",
    "_value_dim",
    "_output_shape",
]


@pytest.mark.parametrize("hook", sorted(MHA_HOOKS))
def test_multi_head_attention_hook_keeps_its_parameters(hook):
    method = getattr(keras.layers.MultiHeadAttention, hook, None)
    assert method is not None, f"Keras removed MultiHeadAttention.{hook}"
    parameters = list(inspect.signature(method).parameters)[1:]
    missing = [p for p in MHA_HOOKS[hook] if p not in parameters]
    assert missing == [], f"MultiHeadAttention.{hook} lost {missing}"


def test_multi_head_attention_keeps_the_attributes_we_read():
    layer = keras.layers.MultiHeadAttention(2, 4)
    layer.build((1, 3, 8), (1, 3, 8))
    assert [a for a in MHA_ATTRIBUTES if not hasattr(layer, a)] == []


def test_layer_call_fills_named_masks_from_keras_masks():
    """`Layer.__call__` gives a layer's `query_mask`/`value_mask` (and
    `mask`) the masks its inputs carry: our layers' masking contract."""
    tokens = np.array([[3, 4, 0, 0]], "int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    _, scores = keras_attn.Attention()(
        [embedded, embedded], return_attention_scores=True
    )
    assert np.asarray(scores)[0, :2, 2:].max() == 0.0
    _, hops = keras_attn.StructuredSelfAttention(4, 2)(
        embedded, return_attention_scores=True
    )
    assert np.asarray(hops)[0, :, 2:].max() == 0.0


def test_a_recurrent_output_carries_a_mask_only_where_keras_passes_it():
    """Where Keras stops passing a mask through an RNN (3.16), a layer
    after it sees none: why our models hand masks over by name."""
    tokens = np.array([[3, 4, 0, 0]], "int32")
    embedded = keras.layers.Embedding(10, 3, mask_zero=True)(tokens)
    for rnn in (
        keras.layers.LSTM(2, return_sequences=True),
        keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True)),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 3.16 warns of the lost mask
            out = rnn(embedded)
        carried = getattr(out, "_keras_mask", None) is not None
        assert carried == upstream.RNN_OUTPUT_CARRIES_MASK, (
            f"Keras {keras.version()}: {type(rnn).__name__}'s output "
            f"{'carries' if carried else 'lost'} the mask; update "
            "tests/upstream.py"
        )


def test_known_upstream_bugs_are_expected_only_where_they_are():
    """The version gates of `tests/upstream.py` read the running Keras."""
    x = np.random.default_rng(0).normal(size=(1, 2, 4)).astype("float32")
    dense = keras.layers.EinsumDense(
        "btd,dhk->bthk",
        (None, 2, 1),
        bias_axes="hk",
        bias_initializer="random_normal",
    )
    got = np.asarray(dense(x))
    want = np.einsum("btd,dhk->bthk", x, np.asarray(dense.kernel))
    want = want + np.asarray(dense.bias)
    wrong = not np.allclose(got, want, atol=1e-5)
    assert wrong == upstream.EINSUM_BIAS_ON_TIME_AXIS, (
        f"Keras {keras.version()}: the EinsumDense bias bug is "
        f"{'present' if wrong else 'fixed'}; update tests/upstream.py"
    )
