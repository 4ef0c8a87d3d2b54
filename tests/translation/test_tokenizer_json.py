"""The project's WordPiece tokenization as a Hugging Face `tokenizer.json`
(`keras_attn.translation.tokenizer_json`): id for id the edge runtime's
`wordpiece` on the whole training corpus with the shipped translator's
vocabularies, and the `french_wordpiece` detokenizer's text back."""

import os
import re

import pytest

from keras_attn.translation.tokenizer_json import (
    learn_wordpiece_tokenizer,
    wordpiece_tokenizer,
)
from keras_attn_runtime.text import (
    DETOKENIZERS,
    read_vocabulary,
    split_sentence,
    wordpiece,
)
from tests.paths import ROOT

pytest.importorskip("tokenizers")

PAIRS = os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv")
SHIPPED = os.path.join(ROOT, "saved_models", "translation_en_fr")


def corpus(column):
    if not os.path.exists(PAIRS):
        pytest.skip(f"the translation pairs are not beside the repo: {PAIRS}")
    with open(PAIRS, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[column] for line in f]


def ours(texts, vocabulary):
    index = {token: i for i, token in enumerate(vocabulary)}
    out = []
    for text in texts:
        words = split_sentence(text)
        out.append(wordpiece(words.split(" "), index)[0] if words else [])
    return out


@pytest.mark.parametrize("side, column", [("source", 0), ("target", 1)])
def test_the_tokenizer_json_gives_our_ids_on_the_training_corpus(side, column):
    # 49,648 sentences each side; words with digits are [UNK] in both
    # (no vocabulary entry holds a digit).
    vocabulary = read_vocabulary(
        os.path.join(SHIPPED, f"{side}_vocabulary.txt")
    )
    assert not any(re.search(r"\d", t) for t in vocabulary)
    tokenizer = wordpiece_tokenizer(vocabulary)
    texts = corpus(column)
    theirs = [
        e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)
    ]
    assert theirs == ours(texts, vocabulary)


def test_decoding_joins_as_the_french_wordpiece_detokenizer():
    vocabulary = read_vocabulary(os.path.join(SHIPPED, "target_vocabulary.txt"))
    tokenizer = wordpiece_tokenizer(vocabulary)
    rules = DETOKENIZERS["french_wordpiece"]
    texts = corpus(1)
    checked = 0
    for ids in ours(texts, vocabulary):
        if 1 in ids:  # an [UNK] is the translator's to copy
            continue
        joined = " ".join(vocabulary[i] for i in ids)
        for pattern, rewrite in rules:
            joined = re.sub(pattern, rewrite, joined)
        assert tokenizer.decode(ids) == joined
        checked += 1
    assert checked > 40000


def test_special_tokens_are_matched_whole_and_skipped_when_decoding():
    vocabulary = ["", "[UNK]", "[start]", "[sep]", "chat", "##s", "le", "."]
    tokenizer = wordpiece_tokenizer(vocabulary, special_tokens=["[sep]"])
    ids = tokenizer.encode("le chats. [sep]", add_special_tokens=False).ids
    assert ids == [6, 4, 5, 7, 3]
    assert tokenizer.decode(ids) == "le chats."
    assert tokenizer.decode(ids, skip_special_tokens=False) == "le chats. [sep]"


def test_learning_puts_padding_unknown_and_the_reserved_tokens_first():
    texts = ["Le chat dort .", "Les chats dorment ."] * 20
    tokenizer = learn_wordpiece_tokenizer(texts, 60, reserved=("[sep]",))
    vocab = tokenizer.get_vocab()
    assert [vocab["[PAD]"], vocab["[UNK]"], vocab["[sep]"]] == [0, 1, 2]
    assert tokenizer.decode(tokenizer.encode("Les chats dorment .").ids) == (
        "Les chats dorment."
    )


@pytest.mark.parametrize(
    "vocabulary, special, match",
    [
        (["[UNK]", "[PAD]", "a"], (), "start with"),
        (["[PAD]", "[UNK]", "a", "a"], (), "each token once"),
        (["[PAD]", "[UNK]", "a"], ("[sep]",), r"missing \['\[sep\]'\]"),
    ],
)
def test_bad_vocabularies_are_refused_by_name(vocabulary, special, match):
    with pytest.raises(ValueError, match=match):
        wordpiece_tokenizer(vocabulary, special_tokens=special)
