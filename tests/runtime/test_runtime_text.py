"""One standardization on both sides: the runtime's Python
(`keras_attn_runtime.text`) gives the strings that the TensorFlow side
(`keras_attn.text`) gives, Unicode included. 0.2.0's runtime lowercased
ASCII only: "École Été" was "école été" in the SavedModel and
"École Été" on the device."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from keras_attn import text  # noqa: E402
from keras_attn_runtime import text as runtime  # noqa: E402

PAIRS = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "..",
    "shared",
    "data",
    "translation",
    "pairs.tsv",
)
HAND = [
    "École Été",
    "İstanbul ΣΟΦΟΣ",  # full case mapping and the final sigma
    "Straße ǅ Ǆ Ⅻ Ⓐ ＡＢＣ 𐐀",
    "L'HOMME À LA GARE ?",
    "Il a dit « OUI » ; puis : NON !",
    "ΣΑΣ ΣΑΣ. AΣ, BΣ",
]


def both(strings):
    want = text.standardize_sentence(tf.constant(strings)).numpy()
    return [w.decode("utf-8") for w in want], [
        runtime.standardize_sentence(s) for s in strings
    ]


def test_hand_picked_unicode():
    want, got = both(HAND)
    assert got == want
    assert got[0] == "école été"


def test_every_sentence_of_the_translation_pairs():
    if not os.path.isfile(PAIRS):
        pytest.skip("no translation pairs beside the checkout")
    with open(PAIRS, encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()]
    sentences = [s for row in rows for s in row[:2]]
    want, got = both(sentences)
    differ = [s for s, w, g in zip(sentences, want, got, strict=True) if w != g]
    assert differ == [], differ[:5]


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_hypothesis_strings(s):
    want, got = both([s])
    assert got == want


def test_letters_newer_than_tensorflows_tables_keep_their_case():
    # Python 3.11 (Unicode 14) lowercases U+10570 to U+10597; TensorFlow
    # leaves it: the runtime must follow the SavedModel's side.
    kept = "".join(
        chr(c) for a, b in runtime.TF_KEEPS_CASE for c in range(a, b + 1)
    )
    strings = [kept, "ΑΣ\U00010570 ΣΑΣ \U00010570Σ", "\U00010570 École"]
    want, got = both(strings)
    assert got == want
    assert got[2].startswith("\U00010570")


def test_every_cased_letter_lowercases_as_tensorflow_does():
    """Each code point that Python or TensorFlow lowercases, alone."""
    chars = [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    cased = [c for c in chars if c.lower() != c]
    lowered = tf.strings.lower(
        tf.constant([c.encode("utf-8") for c in cased]), encoding="utf-8"
    ).numpy()
    differ = [
        hex(ord(c))
        for c, low in zip(cased, lowered, strict=True)
        if runtime.lower(c) != low.decode("utf-8")
    ]
    assert differ == []


@pytest.mark.slow
def test_the_table_is_what_tensorflow_does_on_every_code_point():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from tools import derive_lowercase_table as tool

    found = tool.differences()
    assert all(low == chr(c) for c, low in found.items())
    assert tool.ranges(found) == list(runtime.TF_KEEPS_CASE)


def test_piece_by_piece_sends_what_each_text_adds():
    """`PieceByPiece`: a streamed answer's pieces join to its final text;
    a text that rewrites what was sent (a detokenizer fixing its last
    word) sends nothing until it extends it again."""
    from keras_attn_runtime.text import PieceByPiece

    out = PieceByPiece()
    pieces = [
        out.next(t)
        for t in ("Je", "Je", "Je sui", "Je s", "Je suis", "Je suis là")
    ]
    assert pieces == ["Je", "", " sui", "", "s", " là"]
    assert out.rest("Je suis là.") == "."
    assert out.rest("Je suis là") == ""
    assert "".join(pieces) + "." == "Je suis là."
