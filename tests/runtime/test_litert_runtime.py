"""The numpy-only LiteRT runtime: tokenizer, vocabularies, threads, files.

Each test here failed on the 0.1 runtime (quadratic regexes, a shared
interpreter without a lock, a string read as a list of characters, no
vocabulary checks, no flatbuffer verification) and passes now.
"""

import os
import random
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_attn_runtime as litert_runtime
from keras_attn import export
from keras_attn.text import standardize_review
from tests.paths import ROOT
from tests.processes import run_python  # noqa: F401

ADVERSARIAL = [
    "'abc' 'def'",
    "a'  'b",
    "''",
    " ''",
    "'' x ''",
    "<a<b>c",
    "<<<>",
    "a>b<c",
    "don't 'quoted' x'",
    "<" * 5000,
    "'" * 5000 + "good",
    "good" + "'" * 5000 + " bad",
    "x" + "'" * 3000 + "y",
    "a" * 3000,
    "'" + "a" * 3000 + "' 'b",
    "<br /><br />Great!!?? 10/10",
    "\u00e9t\u00e9 \u00c9T\u00c9 caf\u00e9 na\u00efve \u2014 \u201cq\u201d",
    "tab\tnew\nline\r\fform",
    "\U0001f600 \U0001f44d",
    "",
    "   ",
]


def tf_tokens(texts):
    out = standardize_review(tf.constant(texts)).numpy()
    return [t.decode("utf-8") for t in out]


def test_standardize_and_tokens_match_tensorflow_on_adversarial_text():
    rng = random.Random(0)
    alphabet = list("aB'' <>!?-\u00e9\n\tx1") + ["\U0001f600"]
    texts = ADVERSARIAL + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        for _ in range(2000)
    ]
    want = tf_tokens(texts)
    for text, w in zip(texts, want, strict=True):
        assert litert_runtime.standardize(text) == w, text[:60]
        cap = litert_runtime.MAX_TOKEN_LENGTH
        long = "#" * (cap + 1)
        want_tokens = [t if len(t) <= cap else long for t in w.split()]
        assert list(litert_runtime.tokens(text)) == want_tokens, text[:60]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80))
def test_tokens_match_tensorflow_on_random_unicode(text):
    (want,) = tf_tokens([text])
    assert litert_runtime.standardize(text) == want


def imdb_texts(n):
    import tensorflow_datasets as tfds

    try:
        ds = tfds.load("imdb_reviews", split=f"test[:{n}]", download=False)
    except Exception as err:  # no offline copy: say so, do not download
        pytest.skip(f"IMDB offline copy unavailable ({err})")
    return [ex["text"].numpy().decode("utf-8") for ex in ds]


def test_tokenizer_matches_text_vectorization_on_real_reviews():
    import keras

    texts = imdb_texts(300)
    vec = keras.layers.TextVectorization(
        max_tokens=2000,
        standardize=standardize_review,
        output_sequence_length=400,
    )
    vec.adapt(np.array(texts[:200], dtype=object))
    tok = litert_runtime.Tokenizer(vec.get_vocabulary(), 400)
    batch = texts + ADVERSARIAL
    np.testing.assert_array_equal(
        tok(batch), np.asarray(vec(np.array(batch, dtype=object)))
    )


@pytest.mark.slow
def test_tokenizer_memory_does_not_grow_with_the_input():
    """2M characters of several adversarial kinds: the extra memory stays
    below the input's own size (the 0.1 runtime held several copies)."""
    vocab = ["", "[UNK]", "good", "bad"]
    tok = litert_runtime.Tokenizer(vocab, 500)
    n = 2_000_000
    for text in ("<" * n, "'" * n, "a " * (n // 2), "\u00e9" * n):
        tracemalloc.start()
        tok([text])
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 1_500_000, (text[:4], peak)
    # a review with no length limit (dynamic models) keeps its own tokens
    dyn = litert_runtime.Tokenizer(vocab, None, max_tokens=7)
    (row,) = dyn(["good bad " * 100_000])
    np.testing.assert_array_equal(row, [2, 3, 2, 3, 2, 3, 2])


def test_a_string_is_one_text_not_a_list_of_characters():
    vocab = ["", "[UNK]", "great", "film"]
    tok = litert_runtime.Tokenizer(vocab, 4)
    np.testing.assert_array_equal(tok("great film"), [[2, 3, 0, 0]])
    with pytest.raises(ValueError, match="Received: items of type"):
        tok(["ok", 3])
    with pytest.raises(ValueError, match="type bytes"):
        tok(b"great film")


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "at least one token"),
        (b"\n[UNK]\n", "at least one token"),
        (b"\n[UNK]\ngood\nbad\ngood\n", "'good' on lines 3 and 5"),
        (b"\n[UNK]\ngo od\n", "without whitespace"),
        (b"\n[UNK]\n\xff\xfe\x00bin\n", "UTF-8"),
        (b"the\n[UNK]\ngood\n", "empty padding line"),
    ],
)
def test_bad_vocabularies_are_refused(tmp_path, content, needle):
    path = tmp_path / "vocabulary.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=needle):
        litert_runtime.read_vocabulary(str(path))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_vocabulary_loader_fuzz_never_raises_anything_but_value_error(data):
    try:
        vocab = litert_runtime.parse_vocabulary(data)
    except ValueError:
        return
    assert vocab[:2] == ["", "[UNK]"] and len(set(vocab)) == len(vocab)


@pytest.fixture(scope="module")
def tflite_model(tmp_path_factory):
    from tests.tiny_models import build_text_model

    model = build_text_model(encoder="attention")
    path = str(tmp_path_factory.mktemp("litert") / "model.tflite")
    export.export_text_tflite(model, path)
    return model, path


def test_vocabulary_travels_inside_the_flatbuffer(tflite_model):
    model, path = tflite_model
    assert not os.path.exists(os.path.join(os.path.dirname(path), "v.txt"))
    clf = litert_runtime.LiteRTClassifier(path)
    assert clf.config["max_length"] == 24
    texts = ["great film", "awful boring plot", ""]
    want = model.predict(np.array(texts, dtype=object), verbose=0)
    got = clf.predict(texts)
    np.testing.assert_allclose(got["probability"], want["probability"], 1e-4)


@pytest.mark.slow
def test_one_classifier_shared_by_threads(tflite_model):
    """8 threads × 100 calls on one `LiteRTClassifier` (the 0.1 runtime
    crashed the process in 5 runs of 5 with 4 threads); results equal the
    single-threaded ones. In a subprocess, so a crash fails the test."""
    _, path = tflite_model
    proc = run_python(f"""
        import threading, numpy as np
        from keras_attn_runtime import LiteRTClassifier
        clf = LiteRTClassifier({path!r})
        texts = [f"great film {{i}} " * (i % 7) + "awful" for i in range(10)]
        want = clf.predict(texts)["probability"]
        errors, calls = [], []
        def work():
            for i in range(100):
                got = clf.predict([texts[i % 10]])["probability"]
                if not np.array_equal(got[0], want[i % 10]):
                    errors.append(i)
                calls.append(1)
        threads = [threading.Thread(target=work) for _ in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print("calls", len(calls), "errors", len(errors))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "calls 800 errors 0" in proc.stdout


def weight_free_offsets(data):
    """Byte offsets of the flatbuffer outside its constant buffers."""
    model = litert_runtime.verify_model(data)
    inside = np.zeros(len(data), bool)
    raw = np.frombuffer(data, np.uint8)
    for buffer in model.buffers:
        if buffer.data is not None and len(buffer.data) > 64:
            chunk = np.asarray(buffer.data, np.uint8)
            hits = np.flatnonzero(raw[: len(raw) - len(chunk) + 1] == chunk[0])
            for start in hits[:50]:
                if np.array_equal(raw[start : start + len(chunk)], chunk):
                    inside[start : start + len(chunk)] = True
                    break
    return np.flatnonzero(~inside)


@pytest.mark.slow
def test_mutated_tflite_files_are_refused_or_run_never_crash(
    tflite_model, tmp_path
):
    """300 files with 1-4 bytes mutated outside the weights, each loaded
    and run in one subprocess: a crash (signal) fails the test."""
    _, path = tflite_model
    data = open(path, "rb").read()
    offsets = weight_free_offsets(data)
    rng = np.random.default_rng(0)
    folder = tmp_path / "mutants"
    folder.mkdir()
    for i in range(300):
        mutant = bytearray(data)
        for at in rng.choice(offsets, size=rng.integers(1, 5)):
            mutant[at] = int(rng.integers(0, 256))
        (folder / f"{i}.tflite").write_bytes(bytes(mutant))
    proc = run_python(
        f"""
        import glob
        from keras_attn_runtime import LiteRTClassifier
        refused = ran = 0
        for path in sorted(glob.glob({str(folder)!r} + "/*.tflite")):
            try:
                LiteRTClassifier(path).predict(["great film", ""])
                ran += 1
            except ValueError:
                refused += 1
        print("refused", refused, "ran", ran)
        """,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "refused" in proc.stdout


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=4))
def test_predict_fuzz_gives_a_finite_probability_per_text(tflite_model, texts):
    _, path = tflite_model
    clf = _classifier(path)
    out = clf.predict(texts)
    if not texts:
        assert out == {}
        return
    probability = out["probability"]
    assert probability.shape == (len(texts), 1)
    assert np.all(np.isfinite(probability))
    assert np.all((probability >= 0) & (probability <= 1))


_CLASSIFIERS = {}


def _classifier(path):
    if path not in _CLASSIFIERS:
        _CLASSIFIERS[path] = litert_runtime.LiteRTClassifier(path)
    return _CLASSIFIERS[path]


TRANSLATOR = os.path.join(ROOT, "saved_models", "translation_en_fr")


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(TRANSLATOR, "model.tflite")),
    reason="no translator shipped",
)
@pytest.mark.slow
def test_one_translator_shared_by_threads():
    path = os.path.join(TRANSLATOR, "model.tflite")
    proc = run_python(f"""
        import threading
        from keras_attn_runtime import LiteRTTranslator
        lite = LiteRTTranslator({path!r})
        texts = ["I am tired.", "Where is the station?", "Thank you.",
                 "She is reading a book."]
        want = [lite.translate(t) for t in texts]
        errors, calls = [], []
        def work(k):
            for i in range(25):
                if lite.translate(texts[(i + k) % 4]) != want[(i + k) % 4]:
                    errors.append(i)
                calls.append(1)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print("calls", len(calls), "errors", len(errors))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "calls 100 errors 0" in proc.stdout
