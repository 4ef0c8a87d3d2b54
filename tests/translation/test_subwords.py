"""WordPiece subwords: the graph vectorizer (`keras_attn.translation.subwords`),
the NumPy reader of the edge runtime (`keras_attn_runtime.text.wordpiece`)
and Hugging Face's `tokenizers` give the same ids; a subword translator
serves the same translation from its SavedModel and its LiteRT file, with
numbers copied and pieces joined."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.seq2seq import AttentionDecoder
from keras_attn.text import split_sentence
from keras_attn.translation import Translator
from keras_attn.translation.subwords import (
    WordPieceVectorizer,
    wordpiece_vocabulary,
)
from keras_attn_runtime import DETOKENIZERS, LiteRTTranslator
from keras_attn_runtime.text import split_sentence as np_split
from keras_attn_runtime.text import wordpiece
from tests.paths import ROOT

tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "The cat sleeps on the sofa.",
    "The cats are sleeping.",
    "She washes the dishes after lunch.",
    "The children are playing in the garden.",
    "We waited for hours at the airport.",
    "Tom's 3 cats aren't hungry!",
    "Où est la gare ? L'été, l'école est fermée.",
    "I washed my shirts, then I played.",
] * 3
PROBES = CORPUS + [
    "",
    "   ",
    "Sleepers sleep; washers wash.",
    "Zebra",  # 'Z' never seen: the whole word is [UNK]
    "catcatcatcat dishdish",
    "x" * 150,  # longer than max_chars_per_word
    "Ça coûte 12,50 € à Zürich.",
    "naïve CAFÉ café\u202f!",
    "a\u00a0b\tc\nd",
]


@pytest.fixture(scope="module")
def vocab():
    return wordpiece_vocabulary(CORPUS, 60, split_sentence, ("[start]",))


def reference_ids(vocab, text):
    """`tokenizers`' own WordPiece over the same vocabulary, with words that
    hold a digit as `[UNK]` (the `"digits"` rule)."""
    full = ["[PAD]", "[UNK]", *vocab]
    model = tokenizers.models.WordPiece(
        {t: i for i, t in enumerate(full)}, unk_token="[UNK]"
    )
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    ids = []
    for word in np_split(text).split():
        if any(c.isdigit() for c in word):
            ids.append(1)
        else:
            ids += tok.encode(word).ids
    return ids


def test_vocabulary_starts_with_reserved_and_covers_the_characters(vocab):
    assert vocab[0] == "[start]"
    assert "" not in vocab and "[UNK]" not in vocab
    assert len(vocab) + 2 <= 60
    chars = {c for text in CORPUS for c in np_split(text) if c != " "}
    chars -= set("0123456789")
    assert chars <= set(vocab)  # every seen character is a first piece


def test_graph_numpy_and_tokenizers_give_the_same_ids(vocab):
    vec = WordPieceVectorizer(vocab, split_sentence)
    ids, names = vec.tokens(tf.constant(PROBES))
    counts = vec.count(tf.constant(PROBES)).numpy()
    index = {t: i for i, t in enumerate(vec.get_vocabulary())}
    split_seen = False
    for k, text in enumerate(PROBES):
        got = [int(i) for i in ids[k].numpy() if i]
        want = reference_ids(vocab, text)
        np_ids, np_names = wordpiece(np_split(text).split(), index)
        assert got == want == np_ids, text
        assert counts[k] == len(got)
        assert [n.decode() for n in names[k].numpy()[: len(got)]] == np_names
        split_seen |= any(n.startswith("##") for n in np_names)
    assert split_seen  # the probes do exercise continuation pieces
    # Unknown words keep their text, for copying.
    row = PROBES.index("Zebra")
    assert names[row].numpy()[0] == b"Zebra" and ids[row].numpy()[0] == 1


@pytest.mark.parametrize("batch", [[""], ["   ", ""], []])
def test_a_batch_without_words_in_a_graph(vocab, batch):
    """No word at all: the longest-match loop runs no step. In a graph
    (a SavedModel, TensorFlow Serving) stacking its zero steps failed with
    "Tried to stack elements of an empty list"."""
    vec = WordPieceVectorizer(vocab, split_sentence, output_sequence_length=5)
    graph = tf.function(
        lambda t: (*vec.tokens(t), vec.count(t)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    ids, names, counts = graph(tf.constant(batch, tf.string))
    assert ids.shape == (len(batch), 5) and not np.any(ids.numpy())
    assert names.numpy().tolist() == [[b""] * 5] * len(batch)
    assert counts.numpy().tolist() == [0] * len(batch)


def test_fixed_length_pads_and_cuts(vocab):
    vec = WordPieceVectorizer(vocab, split_sentence, output_sequence_length=4)
    ids = vec(tf.constant(["The cats are sleeping.", "cat"])).numpy()
    assert ids.shape == (2, 4)
    full = WordPieceVectorizer(vocab, split_sentence)(
        tf.constant(["The cats are sleeping."])
    ).numpy()
    assert full.shape[1] > 4 and ids[0].tolist() == full[0, :4].tolist()
    index = {t: i for i, t in enumerate(vec.get_vocabulary())}
    cat = wordpiece(["cat"], index)[0]
    assert ids[1].tolist() == cat + [0] * (4 - len(cat))


def test_round_trip_through_config_and_keras_file(vocab, tmp_path):
    vec = WordPieceVectorizer(vocab, split_sentence, 7, name="wp")
    again = WordPieceVectorizer.from_config(vec.get_config())
    texts = tf.constant(PROBES)
    np.testing.assert_array_equal(vec(texts), again(texts))
    inp = keras.Input((), dtype="string")
    model = keras.Model(inp, vec(inp))
    path = str(tmp_path / "wp.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(model(texts), loaded(texts))


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"vocabulary": ["a", ""]}, "without '' and"),
        ({"vocabulary": ["[UNK]", "a"]}, "without '' and"),
        (
            {"vocabulary": ["a"], "unknown_words": "vowels"},
            "unknown_words='vowels'",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        WordPieceVectorizer(**kwargs)


def test_wordpiece_detokenizer_joins_pieces():
    import re

    joined = "Le chat dor ##t sur le cana ##pé . L' été , 12 chat ##s"
    for pattern, rewrite in DETOKENIZERS["french_wordpiece"]:
        joined = re.sub(pattern, rewrite, joined)
    assert joined == "Le chat dort sur le canapé. L'été, 12 chats"


def tiny_subword_translator(source_vocab, target_vocab, length=16):
    keras.utils.set_random_seed(3)
    src = WordPieceVectorizer(source_vocab, split_sentence, length)
    n_tgt = len(target_vocab) + 2
    src_embed = keras.layers.Embedding(src.vocabulary_size(), 4, mask_zero=True)
    gru = keras.layers.GRU(8, return_sequences=True, return_state=True)
    tgt_embed = keras.layers.Embedding(n_tgt, 4)
    decoder = AttentionDecoder(keras.layers.GRUCell(8), score="general")
    head = keras.layers.Dense(n_tgt)
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    memory, state = gru(src_embed(source))
    out, _, _ = decoder(tgt_embed(target), memory, initial_state=[state])
    model = keras.Model([source, target], head(out))

    def encode(ids):
        memory, state = gru(src_embed(ids))
        return {"cell": [state], "memory": memory, "mask": ids != 0}

    def step_fn(tokens, state, index):
        out, cell, align = decoder.step(
            tgt_embed(tokens), state["cell"], state["memory"], state["mask"]
        )
        return head(out), {**state, "cell": cell}, align

    return Translator(
        src,
        ["", "[UNK]", *target_vocab],
        encode,
        step_fn,
        max_length=6,
        trackable=model,
        standardize=split_sentence,
        detokenize=DETOKENIZERS["french_wordpiece"],
    )


@pytest.mark.slow
def test_subword_translator_serves_one_answer_everywhere(vocab, tmp_path):
    target = ["[start]", "[end]", "le", "chat", "##s", ".", "##t"]
    translator = tiny_subword_translator(vocab, target)
    texts = ["The cats sleep.", "Tom has 12 cats", "catcat", ""]
    greedy = translator.translate_greedy(tf.constant(texts))
    words = [t.decode() for t in greedy["translation"].numpy()]
    assert words[-1] == ""
    assert not any(" ##" in w for w in words)
    tokens = greedy["source_tokens"].numpy()[1].tolist()
    assert b"12" in tokens  # the unknown word itself, ready to be copied
    folder = translator.save(str(tmp_path / "tr"))
    from keras_attn.loading import trust

    assert trust.unsafe_ops(f"{folder}/saved_model") == []  # CLI loads it
    loaded = tf.saved_model.load(f"{folder}/saved_model")
    again = loaded.signatures["translate_greedy"](tf.constant(texts))
    assert again["translation"].numpy().tolist() == (
        greedy["translation"].numpy().tolist()
    )
    lite = LiteRTTranslator(f"{folder}/model.tflite")
    assert [lite.translate(t) for t in texts] == words
    assert lite.source_words("Tom has 12 cats") == [
        t.decode() for t in tokens if t
    ]
    with pytest.raises(ValueError, match="at most 16 subword tokens"):
        lite.translate("cat " * 17)
    assert greedy["source_truncated"].numpy().tolist() == [False] * 4
    long = translator.translate_greedy(tf.constant(["cat " * 17]))
    assert long["source_truncated"].numpy().tolist() == [True]


PAIRS = os.path.join(
    ROOT,
    *"../shared/data/translation/pairs.tsv".split("/"),
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(PAIRS), reason="pairs.tsv not found")
def test_same_ids_on_every_validation_sentence_and_reference():
    """A vocabulary learned on the training pairs (as the example learns
    it); every English validation sentence and every French reference (the
    strings hypotheses look like) gets the same ids in the graph, in NumPy
    and from `tokenizers`."""
    from keras_attn.translation import read_pairs, split_by_source

    train, val = split_by_source(read_pairs(PAIRS), 0.1, 1337)
    texts = sorted({t for pair in val for t in pair})
    assert len(texts) > 6000
    vocab = wordpiece_vocabulary(
        [t for pair in train for t in pair], 4000, split_sentence
    )
    vec = WordPieceVectorizer(vocab, split_sentence)
    index = {t: i for i, t in enumerate(vec.get_vocabulary())}
    mismatches = []
    for start in range(0, len(texts), 1024):
        batch = texts[start : start + 1024]
        ids = vec.tokens(tf.constant(batch))[0].numpy()
        for row, text in zip(ids, batch, strict=True):
            got = [int(i) for i in row if i]
            np_ids, _ = wordpiece(np_split(text).split(), index)
            if not got == np_ids == reference_ids(vocab, text):
                mismatches.append(text)
    assert not mismatches, mismatches[:5]
