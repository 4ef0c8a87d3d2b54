"""Attributions of Keras models: the gradient methods against
finite differences and completeness, the norm-based attention against
its formula, raw-text and token-id models alike, on every backend (this
module is in the layer suite that runs again on JAX and PyTorch), and
integrated gradients equal across the three backends."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_attn import StructuredSelfAttention, explain
from tests.paths import ROOT

VOCAB = ["", "[UNK]"] + [f"w{i}" for i in range(10)]
TEXT = "w3 w1 w7 w2 w9"
LENGTH = 8


def token_model(seed=3):
    """Embedding → StructuredSelfAttention → Dense: token ids in, a dict
    with `probability` and `attention` out."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(len(VOCAB), 4, mask_zero=True, name="embedding")(
        ids
    )
    mask = keras.ops.not_equal(ids, 0)
    m, a = StructuredSelfAttention(5, num_hops=2, penalty_coefficient=0.0)(
        x, mask=mask, return_attention_scores=True
    )
    h = keras.layers.Flatten()(m)
    p = keras.layers.Dense(1, activation="sigmoid", name="probability")(h)
    model = keras.Model(ids, {"probability": p, "attention": a})
    rng = np.random.default_rng(seed)  # weights large enough to matter
    for name in ("embedding", "probability"):
        for weight in model.get_layer(name).weights:
            weight.assign(rng.normal(0, 1.5, weight.shape).astype("float32"))
    return model


def ids_of(text):
    row = np.zeros((1, LENGTH), "int32")
    found = [VOCAB.index(w) for w in text.split()]
    row[0, : len(found)] = found
    return row


def class_probability(model, ids, positive):
    p = float(np.asarray(model.predict(ids, verbose=0)["probability"])[0, 0])
    return p if positive else 1.0 - p


def with_embedding(model, table):
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    clone.get_layer("embedding").embeddings.assign(table)
    return clone


def test_gradient_x_input_is_the_derivative_of_scaling_each_token():
    model = token_model()
    (r,) = explain.attribute(model, TEXT, "gradient_x_input", vocabulary=VOCAB)
    positive = r["probability"] >= 0.5
    ids = ids_of(TEXT)
    table = np.asarray(model.get_layer("embedding").embeddings)
    h, want = 1e-2, []
    for t in ids[0, :5]:
        up, down = table.copy(), table.copy()
        up[t] *= 1 + h
        down[t] *= 1 - h
        f_up = class_probability(with_embedding(model, up), ids, positive)
        f_down = class_probability(with_embedding(model, down), ids, positive)
        want.append((f_up - f_down) / (2 * h))
    np.testing.assert_allclose(r["scores"], want, atol=2e-4)
    assert r["words"] == TEXT.split() and r["passes"] == 1


def test_integrated_gradients_add_up_to_the_drop_from_zero_embeddings():
    model = token_model()
    (r,) = explain.attribute(
        model, TEXT, "integrated_gradients", vocabulary=VOCAB, steps=128
    )
    positive = r["probability"] >= 0.5
    ids = ids_of(TEXT)
    zero = np.zeros_like(np.asarray(model.get_layer("embedding").embeddings))
    f_zero = class_probability(with_embedding(model, zero), ids, positive)
    f = class_probability(model, ids, positive)
    assert abs(f - f_zero) > 0.01  # something to add up to
    assert r["scores"].sum() == pytest.approx(f - f_zero, abs=1e-3)
    assert r["passes"] == 128


def test_norm_is_each_hops_weight_times_the_vectors_length():
    model = token_model()
    (r,) = explain.attribute(model, TEXT, "norm", vocabulary=VOCAB)
    ids = ids_of(TEXT)
    values = keras.Model(model.input, model.get_layer("embedding").output)
    h = np.asarray(values.predict(ids, verbose=0))[0, :5]
    a = np.asarray(model.predict(ids, verbose=0)["attention"])[0, :, :5]
    want = (a * np.linalg.norm(h, axis=-1)[None]).sum(0)
    np.testing.assert_allclose(r["scores"], want, rtol=1e-5)


def test_padding_and_unknown_words_are_read_as_the_model_reads_them():
    model = token_model()
    (r,) = explain.attribute(model, "w3 zz w1", "occlusion", vocabulary=VOCAB)
    assert r["words"] == ["w3", "zz", "w1"]
    np.testing.assert_array_equal(r["known"], [True, False, True])
    # Leave one out, by hand: the row without each token, padded.
    p = np.asarray(model.predict(ids_of("w3 w1"), verbose=0)["probability"])
    positive = r["probability"] >= 0.5
    full = r["probability"] if positive else 1 - r["probability"]
    without_unknown = float(p[0, 0]) if positive else 1 - float(p[0, 0])
    assert r["scores"][1] == pytest.approx(full - without_unknown, abs=1e-6)


def test_a_token_model_needs_its_vocabulary():
    with pytest.raises(ValueError, match="vocabulary=None"):
        explain.attribute(token_model(), TEXT, "occlusion")


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="a raw-text model's TextVectorization runs on TensorFlow",
)
def test_a_raw_text_model_and_its_file_explain_as_its_token_model(tmp_path):
    from keras_attn.text import standardize_review

    model = token_model()
    text = keras.Input((), dtype="string", name="text")
    vectorizer = keras.layers.TextVectorization(
        standardize=standardize_review,
        vocabulary=VOCAB[2:],
        output_sequence_length=LENGTH,
        name="vectorizer",
    )
    raw = keras.Model(text, model(vectorizer(text)))
    path = str(tmp_path / "raw.keras")
    raw.save(path)
    texts = [TEXT.upper() + "!", "w1 w1 nope"]
    for method in ("occlusion", "integrated_gradients", "norm", "attention"):
        want = explain.attribute(model, texts, method, vocabulary=VOCAB)
        for got in (
            explain.attribute(raw, texts, method),
            explain.attribute(path, texts, method),
        ):
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g["scores"], w["scores"], atol=1e-5)
                assert g["probability"] == pytest.approx(w["probability"])
    (r,) = explain.attribute(raw, texts[:1], "attention")
    assert r["words"] == [*TEXT.lower().split(), "!"]
    assert r["hops"].shape == (2, 6)


INTEGRATED = """
import json, sys
import keras
from keras_attn import explain
model = keras.models.load_model(sys.argv[1])
vocabulary = json.loads(sys.argv[2])
out = explain.attribute(
    model, json.loads(sys.argv[3]), "integrated_gradients",
    vocabulary=vocabulary, steps=16,
)
print(json.dumps([r["scores"].tolist() for r in out]))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="it runs every backend itself: once, from the TensorFlow run",
)
def test_integrated_gradients_agree_on_tensorflow_jax_and_pytorch(tmp_path):
    """The same `.keras` file on each backend: the scores agree within
    1e-5 (float32 sums in another order)."""
    import importlib.util

    path = str(tmp_path / "tokens.keras")
    token_model().save(path)
    texts = [TEXT, "w4 w4 w8"]
    got = {}
    for backend in ("tensorflow", "jax", "torch"):
        if importlib.util.find_spec(backend) is None:
            pytest.skip(f"{backend} is not installed")
        env = {**os.environ, "KERAS_BACKEND": backend}
        run = subprocess.run(
            [sys.executable, "-c", INTEGRATED, path, json.dumps(VOCAB)]
            + [json.dumps(texts)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        got[backend] = json.loads(run.stdout.strip().splitlines()[-1])
    for backend in ("jax", "torch"):
        for a, b in zip(got[backend], got["tensorflow"], strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert np.ptp(got["tensorflow"][0]) > 1e-3  # not all equal
