"""The translation example runs end to end on a tiny slice."""

import os
import sys

import numpy as np
import pytest

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "recipes"))
PAIRS = os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv")
needs_pairs = pytest.mark.skipif(
    not os.path.isfile(PAIRS), reason="pairs.tsv not found"
)


def test_missing_pairs_file_is_a_clear_error(tmp_path):
    import translation

    with pytest.raises(FileNotFoundError, match="--pairs"):
        translation.main(str(tmp_path / "none.tsv"))


@pytest.mark.parametrize("architecture", ["gru", "transformer", "ensemble"])
def test_step_fn_matches_teacher_forcing(architecture):
    # What the searches (and the exported models) run one token at a time
    # must equal the training model's whole-sentence pass: the GRU's
    # AttentionDecoder.step, the Transformer's key/value caches.
    import keras
    import numpy as np
    import translation
    import translation_transformer

    hp = {
        **translation_transformer.HPARAMS,
        "units": 16,
        "embed_dim": 8,
        "heads": 2,
        "feed_forward_dim": 16,
        "target_length": 6,
        "members": 2 if architecture == "ensemble" else 1,
    }
    build = (
        translation_transformer.build_transformer
        if architecture == "transformer"
        else translation.build_models
    )
    keras.utils.set_random_seed(0)
    trainer, encode, step_fn = build(30, 40, hp)
    src = np.array([[5, 6, 7, 0], [8, 9, 3, 4]], "int32")
    tgt = np.array([[2, 11, 12, 13, 14, 15], [2, 16, 17, 18, 19, 20]], "int32")
    want = trainer([src, tgt], training=False)
    if architecture == "ensemble":  # the log of the members' mean softmax
        probs = [keras.ops.softmax(w).numpy() for w in want]
        assert not np.allclose(probs[0], probs[1], atol=1e-3)
        want = np.log(np.mean(probs, axis=0))
    want = keras.ops.convert_to_numpy(want)
    state = encode(keras.ops.convert_to_tensor(src))
    for t in range(tgt.shape[1]):
        logits, state, align = step_fn(
            keras.ops.convert_to_tensor(tgt[:, t]), state, t
        )
        got = keras.ops.convert_to_numpy(logits)
        np.testing.assert_allclose(got, want[:, t], atol=1e-4, rtol=1e-4)
        align = keras.ops.convert_to_numpy(align)
        np.testing.assert_allclose(align.sum(-1), 1.0, atol=1e-5)
        assert np.all(align[0, 3] == 0.0)  # padded source position


@pytest.mark.slow
@needs_pairs
@pytest.mark.parametrize("architecture", ["gru", "transformer", "ensemble"])
def test_main_tiny_slice(tmp_path, architecture):
    import tensorflow as tf
    import translation
    import translation_transformer

    script = (
        translation_transformer
        if architecture == "transformer"
        else translation
    )
    ensemble = architecture == "ensemble"  # two members, int8 weights
    metrics, translator = script.main(
        PAIRS,
        limit=2000,
        out=str(tmp_path),
        verbose=0,
        epochs=1,
        units=16,
        embed_dim=8,
        heads=2,
        layers=1,
        feed_forward_dim=16,
        score=["dot", "general"] if ensemble else "general",
        members=2 if ensemble else 1,
        int8_weights=ensemble,
    )
    for key in ("bleu_cased", "bleu_lowercase", "exact_match"):
        assert 0 <= metrics["val_beam"][key] <= 100
    assert metrics["litert"]["agreement_with_keras"] >= 0.99
    assert "WHILE" in metrics["litert"]["ops"]
    assert not [op for op in metrics["litert"]["ops"] if "FLEX" in op]
    folder = tmp_path / metrics["model"]
    loaded = tf.saved_model.load(str(folder / "saved_model"))
    assert {"serving_default", "translate", "translate_greedy"} <= set(
        loaded.signatures
    )
    if ensemble:  # int8 weights in both files, checked before writing
        from ai_edge_litert.interpreter import Interpreter

        reader = tf.train.load_checkpoint(
            str(folder / "saved_model" / "variables" / "variables")
        )
        dtypes = set(reader.get_variable_to_dtype_map().values())
        assert tf.int8 in dtypes and tf.float32 in dtypes
        lite = Interpreter(str(folder / "model.tflite"))
        assert np.int8 in {t["dtype"] for t in lite.get_tensor_details()}
        with pytest.raises(ValueError, match="quantize"):
            translator.save(str(tmp_path / "new"), quantize="int8")
        assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match="sentences"):
        translator.check_litert(str(folder / "model.tflite"), [])
    if architecture != "gru":
        return
    png = tmp_path / "a.png"
    import keras_attn_cli

    code = keras_attn_cli.main(
        ["align", str(folder), "I am tired.", "--out", str(png)]
    )
    assert code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_tied_output_reads_keras_int8_embeddings():
    # After Keras's int8 quantization the embedding table holds round(E·s);
    # the tied output must divide by s again (without it the logits are
    # off by a factor of about 127 / max|E|).
    import keras
    import numpy as np
    import translation

    keras.utils.set_random_seed(0)
    hp = {**translation.HPARAMS, "units": 16, "embed_dim": 8, "members": 1}
    trainer, _, _ = translation.build_models(30, 40, hp)
    src = np.array([[5, 6, 7, 0]], "int32")
    tgt = np.array([[2, 11, 12, 13]], "int32")
    before = keras.ops.convert_to_numpy(trainer([src, tgt]))
    trainer.quantize(
        "int8", filters=lambda x: isinstance(x, keras.layers.Embedding)
    )
    embeddings = [
        x
        for x in trainer._flatten_layers()
        if isinstance(x, keras.layers.Embedding)
    ]
    assert len(embeddings) == 2
    assert all(e.quantization_mode == "int8" for e in embeddings)
    after = keras.ops.convert_to_numpy(trainer([src, tgt]))
    np.testing.assert_allclose(after, before, atol=0.02 * np.abs(before).max())


def test_every_hyperparameter_has_a_flag():
    import translation
    import translation_transformer

    parser = translation.parse_args("x")
    assert vars(parser.parse_args([])) == {
        "pairs": translation.DEFAULT_PAIRS,
        "out": None,
        "weights": None,
        "limit": None,
        **translation.HPARAMS,
    }
    args = parser.parse_args(
        "--score dot general --no-int8-weights --learning-rate 3e-3 "
        "--members 2".split()
    )
    assert args.score == ["dot", "general"]
    assert args.int8_weights is False and args.learning_rate == 3e-3
    assert args.members == 2 and isinstance(args.members, int)
    with pytest.raises(SystemExit):  # argparse names the bad flag
        parser.parse_args(["--members", "two"])
    own = translation.parse_args("x", translation_transformer.HPARAMS)
    defaults = vars(own.parse_args([]))
    assert (
        defaults["learning_rate"]
        == translation_transformer.HPARAMS["learning_rate"]
    )


def test_favour_copies_raises_unknown_only_when_the_source_has_one():
    # A number is [UNK] (id 1) on both sides; the bonus makes the decoder
    # write [UNK] (copied from the source) rather than guess a number.
    import translation
    from keras import ops

    vocab = 5

    def encode(source):
        return {"memory": ops.cast(source, "float32")}

    def step_fn(tokens, state, index):
        logits = ops.zeros((ops.shape(tokens)[0], vocab))
        return logits, {**state, "seen": index}, None

    encode2, step2 = translation.favour_copies(encode, step_fn, 3, 1.5)
    source = np.array([[4, 1, 2], [4, 2, 2]], "int32")  # row 0: unknown
    state = encode2(ops.convert_to_tensor(source))
    tokens = ops.convert_to_tensor(np.array([0, 0], "int32"))
    logits, state, _ = step2(tokens, state, 7)
    want = np.zeros((2, vocab))
    want[0, 3] = 1.5
    np.testing.assert_array_equal(ops.convert_to_numpy(logits), want)
    assert int(ops.convert_to_numpy(state["model"]["seen"])) == 7
    assert ops.convert_to_numpy(state["copy"]).tolist() == [True, False]
    assert translation.favour_copies(encode, step_fn, 3, 0.0) == (
        encode,
        step_fn,
    )
