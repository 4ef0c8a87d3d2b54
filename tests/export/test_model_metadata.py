"""Sizes and paths read from a model file are checked before use (trust
round three): `max_length` in metadata, ONNX external-data locations."""

import os

import numpy as np
import pytest

import keras_attn_runtime as litert_runtime


@pytest.mark.parametrize(
    "value, needle",
    [
        (0, "not a positive integer"),
        (-5, "not a positive integer"),
        (True, "not a positive integer"),  # read as one token by 0.2.0
        ("8", "not a positive integer"),
        (1 << 28, "over the limit"),  # a 2.7 GB token matrix in 0.2.0
    ],
)
def test_bad_metadata_lengths_are_refused_naming_the_file(value, needle):
    with pytest.raises(ValueError, match=needle) as info:
        litert_runtime.metadata_length(value, "max_length", "m.tflite")
    assert "m.tflite" in str(info.value) and "max_length" in str(info.value)


def test_metadata_length_must_fit_the_declared_input():
    assert litert_runtime.metadata_length(8, "max_length", "m", 8) == 8
    with pytest.raises(ValueError, match="input length 8"):
        litert_runtime.metadata_length(9, "max_length", "m", 8)


onnx = pytest.importorskip("onnx")


def onnx_with_external(tmp_path, location, length=4):
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (
        ("location", location),
        ("offset", "0"),
        ("length", "8"),
    ):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [weight],
    )
    model = helper.make_model(graph)
    for key, value in (
        ("keras_attn.vocabulary", "\n[UNK]\ngood"),
        ("keras_attn.config", f'{{"max_length": {length}}}'),
    ):
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    path = str(tmp_path / "model" / "m.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink"])
def test_onnx_external_data_outside_the_folder_is_refused(tmp_path, kind):
    secret = tmp_path / "secret"
    secret.write_bytes(np.arange(2, dtype="float32").tobytes())
    location = {
        "parent": "../secret",
        "absolute": str(secret),
        "symlink": "link",
    }[kind]
    path = onnx_with_external(tmp_path, location)
    if kind == "symlink":
        os.symlink(str(secret), os.path.join(os.path.dirname(path), "link"))
    with pytest.raises(ValueError, match="external data location"):
        litert_runtime.OnnxClassifier(path)


def test_onnx_max_length_from_metadata_is_bounded(tmp_path):
    path = onnx_with_external(tmp_path, "w.bin", length=1 << 28)
    with open(os.path.join(os.path.dirname(path), "w.bin"), "wb") as f:
        f.write(np.ones(2, "float32").tobytes())
    with pytest.raises(ValueError, match="over the limit"):
        litert_runtime.OnnxClassifier(path)


def shared_table_model(copies):
    """A `.tflite` whose `copies` subgraphs are one shared table holding
    `copies` references to one shared tensor table: a few KB on disk,
    `copies**2` tensors once unpacked."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    b = flatbuffers.Builder(1024)
    s.TensorStart(b)
    s.TensorAddBuffer(b, 0)
    tensor = s.TensorEnd(b)
    s.SubGraphStartTensorsVector(b, copies)
    for _ in range(copies):
        b.PrependUOffsetTRelative(tensor)
    tensors = b.EndVector()
    s.SubGraphStart(b)
    s.SubGraphAddTensors(b, tensors)
    graph = s.SubGraphEnd(b)
    s.ModelStartSubgraphsVector(b, copies)
    for _ in range(copies):
        b.PrependUOffsetTRelative(graph)
    graphs = b.EndVector()
    s.BufferStart(b)
    buffer = s.BufferEnd(b)
    s.ModelStartBuffersVector(b, 1)
    b.PrependUOffsetTRelative(buffer)
    buffers = b.EndVector()
    s.ModelStart(b)
    s.ModelAddVersion(b, 3)
    s.ModelAddSubgraphs(b, graphs)
    s.ModelAddBuffers(b, buffers)
    b.Finish(s.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_a_tiny_tflite_of_shared_tables_is_refused_before_unpacking():
    # 0.2.0 unpacked such a 16 KB file into 4 million objects (2.1 GB,
    # still running at 60 s).
    pytest.importorskip("ai_edge_litert")
    data = shared_table_model(2000)
    assert len(data) < 20_000
    with pytest.raises(ValueError, match="shared tables"):
        litert_runtime.verify_model(data)
    small = shared_table_model(3)  # few copies: structurally fine
    litert_runtime.verify_model(small)


def test_detokenization_patterns_are_never_read_from_a_model_file():
    # 0.2.0 applied regular expressions from the file: `^(.+)+Q` hung
    # `translate()` for ever.
    rules = litert_runtime.DETOKENIZERS["french"]
    legacy = {"detokenize": [list(r) for r in rules]}
    assert litert_runtime.detokenizer(legacy, "m.tflite") == rules
    assert litert_runtime.detokenizer({"detokenizer": "french"}, "m") == rules
    evil = {"detokenize": [["^(.+)+Q", ""]]}
    with pytest.raises(ValueError, match="never read from a model file"):
        litert_runtime.detokenizer(evil, "m.tflite")
    with pytest.raises(ValueError, match="Unknown detokenizer 'x'"):
        litert_runtime.detokenizer({"detokenizer": "x"}, "m.tflite")


@pytest.mark.slow
def test_malformed_translator_config_names_the_file(tmp_path):
    # 0.2.0 ended in `TypeError: ...` / `KeyError` lines without the file.
    pytest.importorskip("ai_edge_litert")
    import json

    from keras_attn.export import with_metadata

    shipped = "saved_models/translation_en_fr/model.tflite"
    if not os.path.isfile(shipped):
        pytest.skip("no shipped translator")
    with open(shipped, "rb") as f:
        data = f.read()
    model = litert_runtime.verify_model(data)
    config = json.loads(litert_runtime.metadata(model)["keras_attn.config"])
    for broken in (
        {**config, "end_id": [1]},
        {k: v for k, v in config.items() if k != "end_id"},
        [1, 2],
        {**config, "max_length": True},
    ):
        path = tmp_path / "t.tflite"
        raw = json.dumps(broken).encode()
        path.write_bytes(with_metadata(data, {"keras_attn.config": raw}))
        with pytest.raises(ValueError, match="t.tflite"):
            litert_runtime.LiteRTTranslator(str(path))


def test_the_artifact_format_version_is_checked():
    from keras_attn_runtime import artifact

    ours = artifact.artifact_config(artifact.TRANSLATOR, max_length=8)
    artifact.check_format(ours, artifact.TRANSLATOR, "t.tflite")
    artifact.check_format({"kind": "translator"}, artifact.TRANSLATOR, "t")
    newer = {**ours, "version": artifact.FORMAT_VERSION + 1}
    with pytest.raises(ValueError, match="newer keras_attn.*upgrade"):
        artifact.check_format(newer, artifact.TRANSLATOR, "t.tflite")
    with pytest.raises(ValueError, match="Expected a keras_attn.text_class"):
        artifact.check_format(ours, artifact.TEXT_CLASSIFIER, "t.tflite")
    with pytest.raises(ValueError, match="version 'x'"):
        artifact.check_format({"version": "x"}, artifact.TRANSLATOR, "t")
