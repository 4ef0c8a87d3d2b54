"""One way to open a model file (`keras_attn_runtime.opener` and
`keras_attn.loading.opener`): the order a folder is read in, the kinds, and the
same artifact for `predict NAME` and `serve NAME`."""

import json
import os
import sys

import numpy as np
import pytest

from keras_attn_runtime import opener
from tests.paths import ROOT
from tests.tiny_models import tiny_onnx_classifier  # noqa: F401

SHIPPED = os.path.join(ROOT, "saved_models")


def touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb"):
        pass
    return path


def test_a_folder_is_read_savedmodel_first_then_keras_then_one_file(tmp_path):
    folder = tmp_path / "m"
    touch(str(folder / "a.tflite"))
    assert opener.find(str(folder)) == ("litert", str(folder / "a.tflite"))
    touch(str(folder / "b.onnx"))
    assert opener.find(str(folder)) is None  # two files, nothing before
    touch(str(folder / "model.keras"))
    assert opener.find(str(folder))[0] == "keras"
    touch(str(folder / "saved_model" / "saved_model.pb"))
    assert opener.find(str(folder)) == (
        "saved_model",
        str(folder / "saved_model"),
    )
    assert opener.find(str(folder / "b.onnx"))[0] == "onnx"
    assert opener.find(str(folder / "nothing.txt")) is None


def test_nothing_to_open_names_the_flag_and_the_value(tmp_path):
    with pytest.raises(ValueError, match=r"Received: MODEL='.*empty'"):
        opener.found(str(tmp_path / "empty"), "MODEL")


def test_the_runtime_opens_tensorflow_kinds_through_the_library(tmp_path):
    import keras_attn.loading.opener  # noqa: F401  (registers the TensorFlow kinds)

    touch(str(tmp_path / "model.keras"))
    with pytest.raises(ValueError, match="Could not load a Keras model"):
        opener.open(str(tmp_path))
    artifact = opener.open(os.path.join(SHIPPED, "imdb_ssa"))
    assert artifact.kind == "saved_model"
    assert artifact.path == os.path.join(SHIPPED, "imdb_ssa", "saved_model")


def test_a_litert_translator_opens_as_a_translator():
    # Failing first: `keras-attn serve` read a translator's `format` as a
    # classifier's and refused the shipped translator file.
    from keras_attn_cli.serving.served import load_backend

    path = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    artifact = load_backend(path)
    assert artifact.kind == "litert"
    assert sorted(artifact.signatures) == ["serving_default", "translate"]
    out = artifact.run("translate", {"text": [b"I am here.", b"Go."]})
    want = [artifact.translator.translate(t) for t in ("I am here.", "Go.")]
    assert out["translation"].tolist() == want
    assert all(want)


def test_an_onnx_classifier_is_opened_and_run(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    path = tiny_onnx_classifier(str(tmp_path / "m.onnx"))
    served = opener.open(path)
    assert served.kind == "onnx"
    texts = ["good film", "bad", "film film good"]
    out = served.run("serving_default", {"text": [t.encode() for t in texts]})
    ids = served.classifier.tokenizer(texts)
    want = 1 / (1 + np.exp(-(ids.astype("float32").mean(1) - 2)))
    np.testing.assert_allclose(out["probability"][:, 0], want, rtol=1e-6)


def test_one_reading_of_a_litert_file_answers_every_edge_question():
    from keras_attn.export import edge_targets
    from keras_attn.export.flatbuffer import read_model

    path = os.path.join(SHIPPED, "imdb_micro", "model_int8.tflite")
    model = read_model(path)
    assert read_model(model) is model
    for target in edge_targets.TARGETS:
        assert edge_targets.edge_problems(model, target) == (
            edge_targets.edge_problems(path, target)
        )
    assert edge_targets.output_names(model) == edge_targets.output_names(path)


# Metadata a hand-edited or hostile file may carry: each is refused with a
# `ValueError` naming the file (a JSON list ended in `AttributeError: 'list'
# object has no attribute 'get'`).
MALFORMED_CONFIGS = {
    "a list": b"[1, 2]",
    "a string": b'"text_classifier"',
    "a number": b"3",
    "null": b"null",
    "not JSON": b"{format: 1",
    "not UTF-8": b'{"format": "\xff"}',
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "a format that is a list": b'{"format": ["keras_attn.translator"]}',
    "a version that is text": b'{"version": "2"}',
    "a newer version": b'{"version": 99}',
    "a length that is text": b'{"max_length": "8"}',
    "a negative length": b'{"max_length": -1}',
    "a huge length": b'{"max_length": 1e12}',
    "length axes that are a number": b'{"length_axes": 3}',
    "length axes of text": b'{"length_axes": {"attention": ["x"]}}',
    "a translator's format without its keys": (
        b'{"format": "keras_attn.translator"}'
    ),
}


def micro_bytes():
    """The shipped micro classifier's bytes (a small LiteRT file)."""
    pytest.importorskip("ai_edge_litert")
    shipped = os.path.join(SHIPPED, "imdb_micro", "model_int8.tflite")
    if not os.path.isfile(shipped):
        pytest.skip("no shipped imdb_micro file")
    with open(shipped, "rb") as f:
        return f.read()


def with_config(data, raw, path):
    from keras_attn.export import with_metadata

    path.write_bytes(with_metadata(data, {"keras_attn.config": raw}))
    return str(path)


@pytest.mark.parametrize("case", sorted(MALFORMED_CONFIGS))
def test_malformed_litert_metadata_is_refused_naming_the_file(tmp_path, case):
    data = micro_bytes()
    path = with_config(data, MALFORMED_CONFIGS[case], tmp_path / "bad.tflite")
    with pytest.raises(ValueError, match="bad.tflite"):
        opener.open(path)


@pytest.mark.parametrize("case", sorted(MALFORMED_CONFIGS))
def test_malformed_onnx_metadata_is_refused_naming_the_file(tmp_path, case):
    pytest.importorskip("onnxruntime")
    import onnx

    path = tiny_onnx_classifier(str(tmp_path / "bad.onnx"))
    model = onnx.load(path)
    for prop in model.metadata_props:
        if prop.key == "keras_attn.config":
            raw = MALFORMED_CONFIGS[case]
            prop.value = (
                raw.decode("utf-8", "surrogateescape")
                .encode("utf-8", "replace")
                .decode("utf-8")
            )
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    with pytest.raises(ValueError, match="bad.onnx"):
        opener.open(path)


def test_the_command_line_says_one_line_for_a_list_config(tmp_path):
    import subprocess
    import sys

    path = with_config(micro_bytes(), b"[1, 2]", tmp_path / "bad.tflite")
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "predict", path, "fine"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"keras-attn: error: Not a valid model: {path!r} (its "
        "keras_attn.config metadata is not a JSON object)"
    ]


def test_an_onnx_file_without_onnx_names_the_extra(tmp_path, monkeypatch):
    # A bare `ModuleNotFoundError: No module named 'onnx'` before.
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(b"not read")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(
        ModuleNotFoundError, match="keras-attn-runtime.onnx."
    ) as info:
        opener.open(path)
    assert info.value.name == "onnx" and "m.onnx" in str(info.value)


def test_a_saved_model_without_keras_attn_says_how_to_get_it(
    tmp_path, monkeypatch
):
    # It said `pip install keras-attn`, a name no package index serves.
    folder = tmp_path / "sm"
    touch(str(folder / "saved_model.pb"))
    monkeypatch.setattr(opener, "_LOADERS", {})  # nothing registered
    with pytest.raises(ValueError, match="pip install '.\\[cpu\\]'") as info:
        opener.open(str(folder))
    assert "pip install keras-attn." not in str(info.value)
    assert "this runtime opens .tflite and .onnx files" in str(info.value)


def test_the_runtime_imports_nothing_of_the_library_above_it():
    # It imported `keras_attn.loading.opener` to open SavedModels, which
    # imported it back: a circle, and an arrow from the bottom floor up.
    import ast

    folder = os.path.join(ROOT, "keras_attn_runtime")
    upward = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            upward += [
                (name, m)
                for m in modules
                if m.split(".")[0] in ("keras_attn", "keras_attn_cli", "keras")
                or m.split(".")[0] == "tensorflow"
            ]
    assert upward == []


def test_the_command_line_registers_the_tensorflow_kinds(monkeypatch):
    from keras_attn_cli.loading import open_model

    monkeypatch.setattr(opener, "_LOADERS", {})
    artifact = open_model(os.path.join(SHIPPED, "imdb_ssa"))
    assert artifact.kind == "saved_model"
    assert opener.registered() == ["keras", "saved_model"]


def test_a_translators_window_is_checked_per_clause_before_it_runs():
    """`check_prompt` refuses a clause past the file's `source_length`
    with `PromptTooLong` (a client's error: a 400 when served), and
    `run` refuses it before any model call; a long text the segmenter
    cuts into short clauses passes."""
    path = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    if not os.path.isfile(path):
        pytest.skip("no shipped translator")
    artifact = opener.open_litert(path)
    translator = artifact.translator
    artifact.check_prompt("I am tired.")
    cut = " ".join(["the cat and the dog"] * 20)
    assert translator.token_count(cut) > translator.length
    artifact.check_prompt(cut)  # clause by clause, each short
    long = " ".join(["xyzzyplughquux"] * 12)  # one clause, no cut
    count = translator.token_count(long)
    assert count > translator.length
    for call in (
        lambda: artifact.check_prompt(long),
        lambda: artifact.run("translate", {"text": [long.encode()]}),
    ):
        with pytest.raises(opener.PromptTooLong) as info:
            call()
        assert (info.value.limit, info.value.received) == (
            translator.length,
            count,
        )
        assert f"at most {translator.length} subword tokens" in str(info.value)


def test_one_place_decides_whether_a_file_and_an_artifact_stream():
    """`artifact.stream_layout` (a file's metadata) and
    `opener.streams` (an opened artifact, `StreamingArtifact`): what the
    translator, `translate --stream` and the server's OpenAI routes
    read."""
    from keras_attn_runtime import artifact

    config = json.dumps({"format": artifact.STREAMING_DECODER}).encode()
    assert artifact.stream_layout({artifact.METADATA_CONFIG: config}) == (
        artifact.STREAMING_FILE
    )
    both = {artifact.METADATA_STREAMING: b"{}"}
    assert artifact.stream_layout(both) == artifact.ONE_CALL_AND_STREAMING
    assert artifact.stream_layout({}) is None
    assert artifact.stream_layout({artifact.METADATA_CONFIG: b"[1"}) is None

    class Declared:
        concurrent_streams, stream_capacity, sampling = False, None, False

        def stream(self, text, stop=None):
            yield text

        def check_prompt(self, text):
            pass

    class Undeclared:  # a stream, but not the rest of the interface
        def stream(self, text, stop=None):
            yield text

    assert opener.streams(Declared()) and not opener.streams(Undeclared())
    lite = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    edge = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
    if os.path.isfile(lite) and os.path.isfile(edge):
        assert opener.streams(opener.open_litert(lite))
        assert not opener.streams(opener.open_litert(edge))


def test_the_kinds_are_every_kind_find_names():
    """`KINDS` left out the decoder-only bundle that `find` names."""
    from keras_attn_runtime import opener

    assert set(opener.SUFFIXES.values()) | {"saved_model"} == set(opener.KINDS)
    assert set(opener.TENSORFLOW_KINDS) <= set(opener.KINDS)


def test_prefer_names_the_kind_a_folder_holding_several_opens_from(tmp_path):
    """A folder with a SavedModel and a LiteRT file opens from its
    SavedModel (TensorFlow Serving's order), or from the kind `prefer`
    names; a kind the folder lacks leaves the order as it is, and a kind
    that does not exist is refused naming `prefer`."""
    from keras_attn_runtime import opener

    folder = tmp_path / "m"
    (folder / "saved_model").mkdir(parents=True)
    (folder / "saved_model" / "saved_model.pb").write_bytes(b"")
    (folder / "model.tflite").write_bytes(b"")
    saved = str(folder / "saved_model")
    lite = str(folder / "model.tflite")
    assert opener.kinds_in(str(folder)) == ["saved_model", "litert"]
    assert opener.find(str(folder)) == ("saved_model", saved)
    assert opener.find(str(folder), prefer="litert") == ("litert", lite)
    assert opener.find(str(folder), prefer="onnx") == ("saved_model", saved)
    assert opener.find(lite, prefer="saved_model") == ("litert", lite)
    assert opener.kinds_in(lite) == []
    with pytest.raises(ValueError, match="prefer='tflite'"):
        opener.find(str(folder), prefer="tflite")
