"""SavedModels restore the way TensorFlow Serving restores them.

TensorFlow Serving and `saved_model_cli run` load a SavedModel into a
TF1 session and run its saver's restore op before any signature. Our
exports used to work only through `tf.saved_model.load`: the functions
read Keras's wrapped variables, which the saver never restored ("Could
not find variable ..."). Each export path is run here through both
loaders, on ordinary and on blank or empty batches.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attn
from keras_attn import export
from keras_attn.export import saved_model
from tests.export.tf_serving import (
    assert_same,
    run_tf1,
    run_tf2,
    signature_names,
)
from tests.tiny_models import build_text_model

BLANK_BATCHES = [[""], ["   "], ["", "x"], []]


def token_model():
    keras.utils.set_random_seed(4)
    tokens = keras.Input((7,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(30, 8, mask_zero=True)(tokens)
    x = keras_attn.MultiHeadPositional(2, 4, position="rotary")(x, x)
    m, a = keras_attn.StructuredSelfAttention(8, 2)(
        x, return_attention_scores=True
    )
    out = keras.layers.Dense(1, name="probability")(keras.layers.Flatten()(m))
    return keras.Model(tokens, {"probability": out, "attention": a})


def checkpoint_elements(path):
    """Numbers stored in the SavedModel's checkpoint (the object graph
    and other bookkeeping left out)."""
    names = tf.train.list_variables(f"{path}/variables/variables")
    return sum(
        int(np.prod(shape))
        for name, shape in names
        if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")
    )


def test_export_saved_model_runs_under_the_tf_serving_loader(tmp_path):
    model = token_model()
    path = str(tmp_path / "sm")
    export.export_saved_model(model, path)
    ids = np.array([[3, 4, 5, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7]], "int32")
    tf1 = run_tf1(path, {"tokens": ids})
    assert_same(tf1, run_tf2(path, {"tokens": ids}))
    want = model.predict(ids, verbose=0)
    np.testing.assert_allclose(
        tf1["probability"], want["probability"], atol=1e-5
    )


def test_each_weight_is_stored_once_under_its_keras_path(tmp_path):
    model = token_model()
    path = str(tmp_path / "sm")
    export.export_saved_model(model, path)
    weights = sum(int(np.prod(v.shape)) for v in model.variables)
    assert checkpoint_elements(path) == weights
    reader = tf.train.load_checkpoint(f"{path}/variables/variables")
    for variable in model.variables:
        key = saved_model.checkpoint_key(variable.path)
        np.testing.assert_array_equal(
            reader.get_tensor(key), np.asarray(variable.value)
        )


def test_text_model_runs_under_the_tf_serving_loader(tmp_path):
    path = str(tmp_path / "sm")
    export.export_text_model(build_text_model(), saved_model=path)
    (name,) = signature_names(path)["serving_default"]
    texts = ["a good film", "awful plot <br /> boring", *BLANK_BATCHES[2]]
    for batch in [texts, *BLANK_BATCHES]:
        feed = {name: np.array(batch, dtype=object)}
        assert_same(run_tf1(path, feed), run_tf2(path, feed))


@pytest.mark.slow  # 40 s: the shipped translator's three signatures
def test_translator_signatures_run_under_the_tf_serving_loader(tmp_path):
    from tests.tiny_models import tiny_model, tiny_translator

    parts = tiny_model()
    path = str(tmp_path / "sm")
    tiny_translator(parts, segmenter="english_clauses").export(path)
    signatures = signature_names(path)
    assert set(signatures) == {
        "serving_default",
        "translate",
        "translate_greedy",
    }
    # The functions stay reachable by name, as before.
    loaded = tf.saved_model.load(path)
    assert callable(loaded.translate) and callable(loaded.translate_greedy)
    for name, inputs in signatures.items():
        for batch in [["a b c . d a b c , a b"], *BLANK_BATCHES]:
            feed = {inputs[0]: np.array(batch, dtype=object)}
            tf1 = run_tf1(path, feed, name)
            assert_same(tf1, run_tf2(path, feed, name))
            blank = [not text.strip() for text in batch]
            assert [t == b"" for t in tf1["translation"]][: sum(blank)] == [
                True
            ] * sum(blank)


@pytest.mark.parametrize("segmenter", [None, "english_clauses"])
def test_translator_answers_blank_batches_with_empty_strings(segmenter):
    from tests.tiny_models import tiny_model, tiny_translator

    translator = tiny_translator(tiny_model(), segmenter=segmenter)
    for batch in BLANK_BATCHES:
        for run in (translator.translate, translator.translate_greedy):
            out = run(tf.constant(batch, tf.string))
            got = out["translation"].numpy().tolist()
            assert len(got) == len(batch)
            assert [
                g for g, t in zip(got, batch, strict=True) if not t.strip()
            ] == [b"" for t in batch if not t.strip()]
