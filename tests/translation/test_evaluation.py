"""`translation_scores` (BLEU against every reference, exact match) and
`Translator.translate_texts`, against sacrebleu called by hand and the
in-graph signatures."""

import pytest
import sacrebleu
import tensorflow as tf

from keras_attn.translation import translation_scores


def test_bleu_counts_every_reference_and_equals_sacrebleu():
    hyps = ["Je suis fatigué.", "Il est là !", "Bonjour"]
    refs = [["Je suis las.", "Je suis fatigué."], ["Il est ici !"], ["Salut."]]
    got = translation_scores(hyps, refs)
    streams = [
        ["Je suis las.", "Il est ici !", "Salut."],
        ["Je suis fatigué.", None, None],
    ]
    want = sacrebleu.corpus_bleu(hyps, streams).score
    assert got["bleu_cased"] == pytest.approx(want)
    # With only the first reference the first sentence no longer matches.
    first_only = translation_scores(hyps, [r[:1] for r in refs])
    assert first_only["bleu_cased"] < got["bleu_cased"]
    assert got["sentences"] == 3


def test_cased_bleu_punishes_case_and_lowercased_does_not():
    got = translation_scores(["je suis fatigué ."], [["Je suis fatigué."]])
    assert got["bleu_lowercase"] == pytest.approx(100.0)
    assert got["bleu_cased"] < 100.0
    assert got["exact_match"] == 0.0  # exact match is cased


def test_exact_match_ignores_spacing_around_punctuation_only():
    got = translation_scores(
        ["Où est la gare?", "Où est la gare ?", "Où est le train ?"],
        [["Où est la gare ?"]] * 3,
    )
    assert got["exact_match"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "hyps, refs, match",
    [
        (["a"], [], "one entry per sentence; received 1 hypotheses and 0"),
        (["a", "b"], [["a"], []], "entry 1 is empty"),
        ([], [], "nothing to score"),
    ],
)
def test_bad_input_names_the_argument(hyps, refs, match):
    with pytest.raises(ValueError, match=match):
        translation_scores(hyps, refs)


def test_translate_texts_equals_the_signatures_in_batches():
    from keras_attn.text import split_sentence
    from keras_attn.translation import Translator
    from tests.tiny_models import (
        copying_translator,
        tiny_model,
        vectorizer,
    )

    model, encode, step_fn = tiny_model()
    translator = Translator(
        vectorizer(),
        ["", "[UNK]", "[start]", "[end]", "x", "y", "z", "."],
        encode,
        step_fn,
        max_length=5,
        trackable=model,
        standardize=split_sentence,
    )
    texts = ["a b c", "d .", "c c a b", "a", ""]
    runs = {False: translator.translate, True: translator.translate_greedy}
    for greedy, fn in runs.items():
        out = fn(tf.constant(texts))["translation"].numpy()
        want = [t.decode() for t in out]
        assert translator.translate_texts(texts, greedy, batch_size=2) == want
    assert translator.translate_texts([]) == []
    with pytest.raises(ValueError, match="at least 1; received 0"):
        copying_translator().translate_texts(texts, batch_size=0)


def test_teacher_forcing_dataset_shifts_trims_and_keeps_every_sentence():
    import numpy as np

    from keras_attn.translation import teacher_forcing_dataset

    rng = np.random.default_rng(0)
    n, s, t = 40, 7, 9
    src = np.zeros((n, s), "int64")
    tgt = np.zeros((n, t), "int64")
    for i in range(n):
        ls, lt = rng.integers(1, s + 1), rng.integers(2, t + 1)
        src[i, :ls] = rng.integers(3, 50, ls)
        tgt[i, :lt] = rng.integers(3, 50, lt)
    seen = []
    for (x, y_in), y_out in teacher_forcing_dataset(src, tgt, 4, seed=1):
        x, y_in, y_out = (np.asarray(a) for a in (x, y_in, y_out))
        assert x.shape[0] <= 4 and x[:, -1].any() and y_in.shape == y_out.shape
        full = np.concatenate([y_in[:, :1], y_out], axis=1)
        np.testing.assert_array_equal(full[:, 1:-1], y_in[:, 1:])
        assert full[:, -1].any()  # cut to the batch's longest target
        seen += [(tuple(a), tuple(b)) for a, b in zip(x, full, strict=True)]
    want = [
        (tuple(a[a > 0]), tuple(b[b > 0]))
        for a, b in zip(src, tgt, strict=True)
    ]
    got = [
        (
            tuple(np.array(a)[np.array(a) > 0]),
            tuple(np.array(b)[np.array(b) > 0]),
        )
        for a, b in seen
    ]
    assert sorted(got) == sorted(want)


@pytest.mark.parametrize(
    "args, match",
    [
        (([[1, 2]], [[1, 2], [3, 4]], 2), "same sentences; received 1 and 2"),
        (([1, 2], [[1, 2]], 2), "must be 2-D"),
        (([[1, 2]], [[1, 2]], 0), "`batch_size` must be a positive integer"),
    ],
)
def test_teacher_forcing_dataset_bad_input(args, match):
    from keras_attn.translation import teacher_forcing_dataset

    with pytest.raises(ValueError, match=match):
        teacher_forcing_dataset(*args)


PAIRS = [
    ("Hi.", "Salut."),
    ("Hi.", "Coucou."),
    ("Go.", "Va !"),
    ("Run!", "Cours !"),
    ("Run!", "Courez !"),
    ("Stop!", "Stop !"),
    ("Wait.", "Attends."),
]


def test_read_pairs_skips_incomplete_lines_and_keeps_the_limit(tmp_path):
    from keras_attn.translation import read_pairs

    path = tmp_path / "pairs.tsv"
    path.write_text(
        "Hi.\tSalut.\tCC-BY 2.0\nalone\n\tvide\nGo.\tVa !\n", encoding="utf-8"
    )
    assert read_pairs(str(path)) == [("Hi.", "Salut."), ("Go.", "Va !")]
    assert read_pairs(str(path), limit=1) == [("Hi.", "Salut.")]
    with pytest.raises(FileNotFoundError, match="none.tsv"):
        read_pairs(str(tmp_path / "none.tsv"))


def test_split_by_source_holds_out_whole_sentences():
    from keras_attn.translation import split_by_source

    train, val = split_by_source(PAIRS, 0.5, 0)
    assert not {p[0] for p in train} & {p[0] for p in val}
    assert sorted(train + val) == sorted(PAIRS)
    assert len({p[0] for p in val}) == 2  # half of the 5 sentences, floored
    assert split_by_source(PAIRS, 0.5, 0) == (train, val)  # seeded
    with pytest.raises(ValueError, match="val_fraction"):
        split_by_source(PAIRS, 1.0, 0)


def test_references_groups_every_translation_of_a_source():
    from keras_attn.translation import references

    sources, refs = references(PAIRS)
    assert sources == ["Go.", "Hi.", "Run!", "Stop!", "Wait."]
    assert refs[1] == ["Salut.", "Coucou."]
    assert refs[2] == ["Cours !", "Courez !"]


def test_word_vocabulary_leaves_out_numbers_and_puts_reserved_first():
    from keras_attn.text import split_sentence
    from keras_attn.translation import word_vocabulary

    texts = ["I have 3 cats.", "I have 12 dogs, 3 cats.", "Cats!"]
    vocab = word_vocabulary(texts, 8, split_sentence, ("[start]", "[end]"))
    assert vocab[:2] == ["[start]", "[end]"]
    assert len(vocab) == 6  # room for TextVectorization's "" and [UNK]
    assert not [w for w in vocab if any(c.isdigit() for c in w)]
    assert vocab[2:4] == ["I", "have"]  # the most frequent first
    everything = word_vocabulary(texts, 100, split_sentence, exclude="^$")
    assert "12" in everything and "3" in everything


def test_names_moved_to_translation_resolve_from_seq2seq_with_a_warning():
    import keras_attn.translation as translation
    from keras_attn import seq2seq

    with pytest.warns(DeprecationWarning, match="keras_attn.translation"):
        assert seq2seq.Translator is translation.Translator
    with pytest.warns(DeprecationWarning):
        assert seq2seq.subwords is translation.subwords
    with pytest.raises(AttributeError, match="no_such_name"):
        seq2seq.no_such_name  # noqa: B018
