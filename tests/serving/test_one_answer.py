"""One model name, one answer: held-out sentences translated by each
shipped translator through `keras-attn translate` and through every
door of the server (TensorFlow Serving's `:predict` and gRPC `Predict`,
KServe v2's infer, OpenAI's completions, streamed and not) and the Beam
handler of the file that answers give the same text: a folder answers
from one file everywhere. The decoder-only
folder answers from its bundle (the command line ran its Keras model,
which disagreed with the server on one sentence in 200); the seq2seq
folder from its SavedModel (OpenAI's routes answered from its LiteRT
file, which disagrees with the SavedModel on 3 sentences in 200), or,
under `--prefer litert`, from its LiteRT file at every door. Slow
tier."""

import json
import os
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from tests.paths import ROOT
from tests.serving.live import infer, named, output_all, post, start

pytestmark = pytest.mark.slow
pytest.importorskip("kserve")

TRANSLATORS = {
    # name: (the :predict signature, its output)
    "translation_en_fr": ("translate", "translation"),
    "translation_en_fr_lm": ("generate", "completion"),
}
COUNT = 200
# Where the decoder-only folder's Keras model and its bundle disagree
# (its bundle: "Dis à son il était l'étéric."), pinned.
DISAGREE = "Say hello."


def held_out():
    """The first `COUNT` held-out English sentences (the split the
    translators were trained without)."""
    from keras_attn.translation.data import read_pairs, split_by_source

    pairs = os.path.join(ROOT, "..", "shared", "data", "translation")
    path = os.path.join(pairs, "pairs.tsv")
    if not os.path.isfile(path):
        pytest.skip(f"the English-French pairs are not at {path}")
    _, held = split_by_source(read_pairs(path), 0.1, 1337)
    return sorted({source for source, _ in held})[:COUNT]


def completion(port, model, prompt, stream):
    body = {"model": model, "prompt": prompt, "stream": stream}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/openai/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        text = answer.read().decode()
    if not stream:
        return json.loads(text)["choices"][0]["text"]
    pieces = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            pieces += [c["text"] for c in json.loads(line[6:])["choices"]]
    return "".join(pieces)


LONG = " ".join(["word"] * 300)


def completion_status(port, model, prompt):
    """`(status, body)` of a completion that may be refused."""
    import urllib.error

    try:
        return 200, completion(port, model, prompt, stream=False)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def cli_exit(model, text):
    return subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "translate", model, text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def cli_lines(verb, model, texts, tmp_path):
    """The lines `keras-attn VERB MODEL --file` prints for `texts`."""
    source = tmp_path / f"{verb}-{os.path.basename(model)}.txt"
    source.write_text("\n".join(texts) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", verb, model]
        + ["--file", str(source)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def cli_translations(model, sentences, tmp_path):
    pairs = [
        line.split("  ->  ", 1)
        for line in cli_lines("translate", model, sentences, tmp_path)
        if "  ->  " in line
    ]
    return {text: french for text, french in pairs}


def grpc_outputs(grpc_port, model, signature, output, texts):
    """TensorFlow Serving's gRPC `Predict` of `texts` on `model`: its
    `output`, flat."""
    pytest.importorskip("tensorflow_serving")
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        call = predict_pb2.PredictRequest()
        call.model_spec.name = model
        call.model_spec.signature_name = signature
        call.inputs["text"].CopyFrom(tf.make_tensor_proto(list(texts)))
        call.output_filter.append(output)
        answer = stub.Predict(call, timeout=300)
    return tf.make_ndarray(answer.outputs[output]).reshape(-1)


def grpc_answers(grpc_port, model, signature, output, texts):
    values = grpc_outputs(grpc_port, model, signature, output, texts)
    return [v.decode("utf-8") for v in values]


def beam_answers(model, texts):
    """The Beam handler's translations of `texts` for the shipped folder
    `model` (`RunInference`'s own call on a batch), from the file that
    folder answers from (its SavedModel, or its bundle)."""
    from keras_attn.beam import SavedModelTranslatorHandler
    from keras_attn_runtime.beam import BundleGeneratorHandler
    from tests.serving.live import SHIPPED

    handlers = {
        "translation_en_fr": SavedModelTranslatorHandler,
        "translation_en_fr_lm": BundleGeneratorHandler,
    }
    handler = handlers[model](os.path.join(SHIPPED, model))
    results = handler.run_inference(list(texts), handler.load_model())
    return [result.inference for result in results]


def test_prefer_serves_a_folder_from_the_kind_it_names_at_every_door(tmp_path):
    """`--prefer litert`: the seq2seq folder answers `:predict`, v2 and
    OpenAI (whole, and streamed as its tokens are decoded) from its LiteRT
    file, with the answer `keras-attn translate` and the Beam handler
    give for that file (its streams, joined: the file's one-call
    signature ranks beams apart)."""
    from keras_attn_runtime.beam import LiteRTTranslatorHandler
    from tests.serving.live import SHIPPED

    sentences = held_out()[:6]
    lite = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    handler = LiteRTTranslatorHandler(lite)
    results = handler.run_inference(sentences, handler.load_model())
    beam = [result.inference for result in results]
    cli = cli_translations(lite, sentences, tmp_path)
    proc, port = start("translation_en_fr", "--prefer", "litert")
    try:
        body = {"signature_name": "translate", "inputs": sentences}
        status, answer = post(port, "translation_en_fr", body)
        assert status == 200, answer
        got = named(answer["outputs"], ["translation"])["translation"]
        wanted = ["translation"]
        status, answer = infer(port, "translation_en_fr", sentences, wanted)
        assert status == 200 and answer["outputs"][0]["data"] == got, answer
        assert beam == got and [cli[text] for text in sentences] == got
        for text, french in zip(sentences, got, strict=True):
            for stream in (False, True):
                said = completion(port, "translation_en_fr", text, stream)
                assert said == french, (text, stream, said, french)
        assert "(litert, named by --prefer" in output_all(proc)
    finally:
        import signal

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_every_door_gives_each_translator_one_answer(tmp_path):
    sentences = [*held_out(), DISAGREE]
    proc, port = start(*TRANSLATORS)
    try:
        for model, (signature, output) in TRANSLATORS.items():
            body = {"signature_name": signature, "inputs": sentences}
            status, answer = post(port, model, body)
            assert status == 200, answer
            outputs = named(answer["outputs"], [output])[output]
            served = dict(zip(sentences, outputs, strict=True))
            cli = cli_translations(model, sentences, tmp_path)
            differ = [s for s in sentences if cli.get(s) != served[s]]
            assert not differ, [(s, cli.get(s), served[s]) for s in differ]
            some = sentences[:10]
            status, answer = infer(port, model, some, [output])
            assert status == 200, answer
            (tensor,) = answer["outputs"]
            v2 = tensor["data"]
            assert v2 == [served[text] for text in some], (model, v2)
            grpc = grpc_answers(proc.grpc_port, model, signature, output, some)
            assert grpc == [served[text] for text in some], (model, grpc)
            beam = beam_answers(model, some)
            assert beam == [served[text] for text in some], (model, beam)
            for text in some:
                whole = completion(port, model, text, stream=False)
                streamed = completion(port, model, text, stream=True)
                assert streamed == whole, (model, text, streamed, whole)
                assert whole == served[text], (model, text, whole)
        # A sentence past the window, which no clause cut shortens: the
        # same verdict from every door, refused naming the window (the
        # SavedModel's `:predict` answered its first 64 tokens).
        for model in TRANSLATORS:
            status, answer = post(port, model, {"instances": [LONG]})
            assert status == 400, answer
            assert "window" in answer["error"], answer
            status, answer = infer(port, model, [LONG])
            assert status == 400 and "window" in answer["error"], answer
            status, answer = completion_status(port, model, LONG)
            assert status == 400 and "window" in answer, answer
            done = cli_exit(model, LONG)
            assert done.returncode == 2, done.stderr
            said = done.stderr
            assert "window" in said or "reads no more" in said, said
    finally:
        import signal

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


CLASSIFIERS = {
    # name: the Beam handler of the file the folder answers from
    "imdb_ssa": ("keras_attn.beam", "SavedModelClassifierHandler"),
    "imdb_edge": ("keras_attn_runtime.beam", "LiteRTClassifierHandler"),
    "imdb_micro": ("keras_attn_runtime.beam", "LiteRTClassifierHandler"),
}


def test_every_door_gives_each_classifier_one_probability(tmp_path):
    """The shipped classifiers: TensorFlow Serving's REST and gRPC, KServe
    v2, `keras-attn predict` (four decimals) and the Beam handler give
    each review the same probability (`imdb_ssa`, which holds a
    SavedModel, a LiteRT file and a Keras file, answers from its
    SavedModel everywhere)."""
    import importlib

    from tests.beam_cases import REVIEWS
    from tests.serving.live import SHIPPED

    reviews = REVIEWS[:12]
    proc, port = start(*CLASSIFIERS)
    try:
        for model, (module, name) in CLASSIFIERS.items():
            body = {"instances": reviews, "output_filter": ["probability"]}
            status, answer = post(port, model, body)
            assert status == 200, answer
            rest = np.array(answer["predictions"], "float64").reshape(-1)
            status, answer = infer(port, model, reviews, ["probability"])
            assert status == 200, answer
            v2 = np.array(answer["outputs"][0]["data"], "float64")
            grpc = grpc_outputs(
                proc.grpc_port, model, "serving_default", "probability", reviews
            )
            handler = getattr(importlib.import_module(module), name)(
                os.path.join(SHIPPED, model)
                if model == "imdb_ssa"
                else served_file(os.path.join(SHIPPED, model))
            )
            results = handler.run_inference(reviews, handler.load_model())
            beam = np.array([r.inference for r in results], "float64")
            for door, got in (("v2", v2), ("gRPC", grpc), ("Beam", beam)):
                np.testing.assert_allclose(got, rest, atol=1e-6, err_msg=door)
            cli = cli_probabilities(model, reviews, tmp_path)
            np.testing.assert_allclose(cli, rest, atol=5.1e-5, err_msg="CLI")
        assert "(saved_model, the folder's first kind" in output_all(proc)
    finally:
        import signal

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def served_file(folder):
    """The one `.tflite` of a shipped LiteRT classifier's folder."""
    (name,) = [f for f in os.listdir(folder) if f.endswith(".tflite")]
    return os.path.join(folder, name)


def cli_probabilities(model, texts, tmp_path):
    """`keras-attn predict MODEL --file` of `texts`: the printed
    probabilities (four decimals)."""
    lines = cli_lines("predict", model, texts, tmp_path)
    rows = [line.split("\t") for line in lines]
    return np.array([float(r[0]) for r in rows if len(r) == 3], "float64")
