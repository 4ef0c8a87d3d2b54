"""Tiny models the tests build: a raw-text classifier (a BiLSTM or
attention encoder under StructuredSelfAttention, its vocabulary adapted
on generated reviews) and a GRU encoder-decoder translator over a
seven-word vocabulary. Seeded: each call builds the same weights."""

import json

import keras
import numpy as np
from keras import ops

import keras_attn
from keras_attn.seq2seq import AttentionDecoder
from keras_attn.text import split_sentence
from keras_attn.translation import Translator

RNG = np.random.default_rng(5)
WORDS = (
    "good great fine awful bad boring superb movie film plot actor "
    "story scene end the a was is it and but not"
).split()
TEXTS = [
    " ".join(RNG.choice(WORDS, size=RNG.integers(3, 30)))
    + " <br /><br />Don't MISS it!? 10/10 'quoted' café"
    for _ in range(64)
] + ["", "x " * 500]
LENGTH = 24


def build_text_model(policy=None, encoder="rnn"):
    """Vectorizer → Embedding → encoder → StructuredSelfAttention → prob.

    `encoder="rnn"`: a BiLSTM; `"attention"`: MultiHeadPositional.
    """
    if policy:
        keras.mixed_precision.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(3)
        vec = keras.layers.TextVectorization(
            max_tokens=400,
            standardize=keras_attn.standardize_review,
            output_sequence_length=LENGTH,
            name="vectorizer",
        )
        vec.adapt(np.array(TEXTS[:60], dtype=object))
        tokens = keras.Input((LENGTH,), dtype="int64")
        # The mask by name: from Keras 3.16 an RNN's output carries none.
        mask = keras.ops.not_equal(tokens, 0)
        x = keras.layers.Embedding(1000, 256, mask_zero=True)(tokens)
        if encoder == "rnn":
            x = keras.layers.Bidirectional(
                keras.layers.LSTM(4, return_sequences=True)
            )(x, mask=mask)
        else:
            x = keras_attn.MultiHeadPositional(
                2, 4, feed_forward="per_head", output_dim=8
            )(x, query_mask=mask, value_mask=mask)
        m, a = keras_attn.StructuredSelfAttention(8, 3)(
            x, mask=mask, return_attention_scores=True
        )
        prob = keras.layers.Dense(1, "sigmoid", dtype="float32")(
            keras.layers.Flatten()(m)
        )
        inner = keras.Model(tokens, {"probability": prob, "attention": a})
        text = keras.Input((), dtype="string")
        return keras.Model(text, inner(vec(text)))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


SOURCE = ["", "[UNK]", "a", "b", "c", "d", "."]
TARGET = ["", "[UNK]", "[start]", "[end]", "x", "y", "z", "."]
S, U = 6, 8


def vectorizer():
    return keras.layers.TextVectorization(
        output_sequence_length=S,
        vocabulary=SOURCE[2:],
        standardize=split_sentence,
    )


def tiny_model(units=U):
    """`(model, encode, step_fn)` of a GRU encoder-decoder of `units`
    (more than the default's 8 to give LiteRT's int8 weights to
    quantize: it leaves kernels under 1,024 values in float)."""
    keras.utils.set_random_seed(2)
    src_embed = keras.layers.Embedding(len(SOURCE), 4, mask_zero=True)
    gru = keras.layers.GRU(units, return_sequences=True, return_state=True)
    tgt_embed = keras.layers.Embedding(len(TARGET), 4)
    decoder = AttentionDecoder(keras.layers.GRUCell(units), score="general")
    head = keras.layers.Dense(len(TARGET))
    src = keras.Input((None,), dtype="int32")
    tgt = keras.Input((None,), dtype="int32")
    memory, state = gru(src_embed(src))
    out, _, _ = decoder(tgt_embed(tgt), memory, initial_state=[state])
    model = keras.Model([src, tgt], head(out))

    def encode(source):
        memory, state = gru(src_embed(source))
        return {"cell": [state], "memory": memory, "mask": source != 0}

    def step_fn(tokens, state, index):
        out, cell, align = decoder.step(
            tgt_embed(tokens), state["cell"], state["memory"], state["mask"]
        )
        return head(out), {**state, "cell": cell}, align

    return model, encode, step_fn


def tiny_translator(parts, **kwargs):
    """A `Translator` of `tiny_model()`'s `(model, encode, step_fn)`:
    5 tokens at most, copying unknown words; `kwargs` override."""
    model, encode, step_fn = parts
    settings = {
        "max_length": 5,
        "trackable": model,
        "standardize": split_sentence,
        **kwargs,
    }
    return Translator(vectorizer(), TARGET, encode, step_fn, **settings)


def copying_model():
    """A decoder that writes `[UNK]` twice, attending to source positions
    2 and then 0, then `.` and the end."""
    tokens = ("[UNK]", "[UNK]", ".", "[end]", "[end]", "[end]")
    script = np.array([TARGET.index(t) for t in tokens])
    where = np.array([2, 0, 1, 1, 1, 1])

    def encode(source):
        return {"mask": source != 0}

    def step_fn(tokens, state, index):
        batch = ops.shape(tokens)[0]
        token = ops.take(ops.convert_to_tensor(script), index)
        logits = ops.one_hot(ops.full((batch,), token), len(TARGET)) * 10.0
        at = ops.take(ops.convert_to_tensor(where), index)
        align = ops.one_hot(ops.full((batch,), at), S)
        return logits, state, align

    return encode, step_fn


def copying_translator():
    encode, step_fn = copying_model()
    return Translator(
        vectorizer(),
        TARGET,
        encode,
        step_fn,
        max_length=6,
        standardize=split_sentence,
    )


def tiny_onnx_classifier(path, length=6):
    """A `.onnx` text classifier: `p = sigmoid(mean(ids) - 2)`."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMean", ["f"], ["m"], axes=[1]),
            helper.make_node("Sub", ["m", "two"], ["z"]),
            helper.make_node("Sigmoid", ["z"], ["probability"]),
        ],
        "g",
        [
            helper.make_tensor_value_info(
                "ids", TensorProto.INT32, [None, length]
            )
        ],
        [
            helper.make_tensor_value_info(
                "probability", TensorProto.FLOAT, [None, 1]
            )
        ],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)]
    )
    for key, value in (
        ("keras_attn.vocabulary", "\n[UNK]\ngood\nfilm"),
        (
            "keras_attn.config",
            json.dumps(
                {"format": "keras_attn.text_classifier", "max_length": length}
            ),
        ),
    ):
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


# A tiny decoder-only model and its word-per-token tokenizer (the
# `.litertlm` and row-decoding tests).
V = 60
START, END = "[start]", "[end]"
CONTEXT = 48
PREFILLS = (4, 16)


def word_tokenizer():
    from keras_attn.translation.tokenizer_json import wordpiece_tokenizer

    vocabulary = ["[PAD]", "[UNK]", START, END, "[sep]"]
    vocabulary += [f"w{i}" for i in range(len(vocabulary), V)]
    return wordpiece_tokenizer(vocabulary, special_tokens=[START, END, "[sep]"])


def tiny_decoder(**kwargs):
    settings = dict(
        num_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=64,
        num_key_value_heads=2,
    )
    from keras_attn.models import CausalLM

    lm = CausalLM(V, **{**settings, **kwargs})
    lm(np.ones((1, 3), "int32"))
    # Large random weights: blocks that outweigh the embedding in the
    # residual stream, so that tokens vary (the initial weights repeat one
    # token, which would hide a wrong position or cache slot).
    rng = np.random.default_rng(1)
    for weight in lm.weights:
        if "kernel" in weight.path:
            fan_in = int(np.prod(weight.shape[:-1]))
            if len(weight.shape) == 3 and "attention_output" in weight.path:
                fan_in = int(np.prod(weight.shape[:2]))
            elif len(weight.shape) == 3:
                fan_in = int(weight.shape[0])
            values = rng.normal(size=weight.shape) * 4 / np.sqrt(fan_in)
            weight.assign(values.astype("float32"))
    table = rng.normal(size=(V, lm.hidden_dim))
    table[0] = 0.0  # padding: a logit of 0, never the largest here
    lm.token_embedding.embeddings.assign(table.astype("float32"))
    return lm
