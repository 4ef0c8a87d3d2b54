"""`keras_attn.seq2seq`: a tiny random encoder-decoder served three ways
(in-graph greedy, the SavedModel, the LiteRT driver) gives one answer."""

import keras
import pytest
import tensorflow as tf

from keras_attn import Attention, seq2seq
from keras_attn.litert_runtime import LiteRTTranslator

SOURCE = ["", "[UNK]", "a", "b", "c", "d", "."]
TARGET = ["", "[UNK]", "[start]", "[end]", "x", "y", "z", "."]
S, U = 6, 8


def models():
    keras.utils.set_random_seed(2)
    src = keras.Input((None,), dtype="int64")
    x = keras.layers.Embedding(len(SOURCE), 4, mask_zero=True)(src)
    memory, state = keras.layers.GRU(
        U, return_sequences=True, return_state=True
    )(x)
    encoder = keras.Model(src, [memory, state])
    prev = keras.Input((1,), dtype="int64")
    state_in = keras.Input((U,))
    mem_in = keras.Input((None, U))
    mask_in = keras.Input((None,), dtype="bool")
    y = keras.layers.Embedding(len(TARGET), 4)(prev)
    s, new_state = keras.layers.GRU(
        U, return_sequences=True, return_state=True
    )(y, initial_state=state_in)
    a, w = Attention(score="general")(
        s, mem_in, value_mask=mask_in, return_attention_scores=True
    )
    logits = keras.layers.Dense(len(TARGET))(keras.layers.Concatenate()([a, s]))
    step = keras.Model(
        [prev, state_in, mem_in, mask_in], [logits[:, 0], new_state, w[:, 0]]
    )
    vec = keras.layers.TextVectorization(
        output_sequence_length=S, vocabulary=SOURCE[2:], standardize=None
    )
    return vec, encoder, step


def test_translator_signatures_saved_model_and_litert_agree(tmp_path):
    vec, encoder, step = models()
    translator = seq2seq.Translator(vec, TARGET, encoder, step, max_length=5)
    texts = ["a b c", "d .", "c c a b"]
    greedy = translator.translate_greedy(tf.constant(texts))
    beam = translator.translate(tf.constant(texts))
    assert beam["attention"].shape[0] == 3
    assert greedy["source_tokens"].numpy()[0][:3].tolist() == [b"a", b"b", b"c"]
    words = [t.decode() for t in greedy["translation"].numpy()]
    assert all("[UNK]" not in w and "[end]" not in w for w in words)

    translator.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert {"serving_default", "translate", "translate_greedy"} <= set(
        loaded.signatures
    )
    again = loaded.signatures["translate_greedy"](tf.constant(texts))
    assert again["translation"].numpy().tolist() == (
        greedy["translation"].numpy().tolist()
    )

    seq2seq.export_tflite(encoder, step, str(tmp_path / "m.tflite"), S)
    for name, vocab in (("source", SOURCE), ("target", TARGET)):
        (tmp_path / f"{name}_vocabulary.txt").write_text(
            "\n".join(vocab) + "\n"
        )
    lite = LiteRTTranslator(str(tmp_path / "m.tflite"), max_length=5)
    assert [lite.translate(t) for t in texts] == words


def test_translator_needs_start_and_end_tokens():
    vec, encoder, step = models()
    with pytest.raises(ValueError, match="Expected '\\[end\\]'"):
        seq2seq.Translator(vec, TARGET[:3], encoder, step, max_length=5)
