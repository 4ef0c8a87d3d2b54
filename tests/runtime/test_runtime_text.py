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
