"""KServe v2's rules on their own (`keras_attn_cli.serving.open_inference`): the
datatypes of the metadata, an infer request checked input by input
against a signature and the limits, and the answer's tensors."""

import numpy as np
import pytest

from keras_attn_cli.serving import open_inference as oip
from keras_attn_cli.serving.limits import LIMITS, RequestError
from keras_attn_runtime.signature import Signature

TEXT = Signature(
    {"text": ("string", [None])}, {"probability": ("float32", [None, 1])}
)


def test_metadata_names_v2_datatypes_and_unknown_sizes():
    assert oip.tensor_metadata(TEXT.outputs) == [
        {"name": "probability", "datatype": "FP32", "shape": [-1, 1]}
    ]
    assert oip.tensor_metadata(TEXT.inputs)[0]["datatype"] == "BYTES"
    assert oip.datatype("int32") == "INT32" and oip.datatype(object) == "BYTES"
    with pytest.raises(ValueError, match="complex64"):
        oip.datatype("complex64")


def test_an_infer_request_is_one_example_a_row_checked_against_the_limits():
    texts = np.array([b"A fine film.", "Dull."], dtype=object)
    got = oip.parse_infer([("text", "BYTES", texts)], TEXT, LIMITS)
    assert got["text"].tolist() == [b"A fine film.", b"Dull."]
    column = texts.reshape(2, 1)  # [N, 1] as well
    again = oip.parse_infer([("text", "BYTES", column)], TEXT, LIMITS)
    assert again["text"].tolist() == got["text"].tolist()


@pytest.mark.parametrize(
    "tensors, limits, message",
    [
        ([("words", "BYTES", [b"a"])], {}, "Unknown input 'words'"),
        ([("text", "FP32", [1.0])], {}, "as BYTES. Received: FP32"),
        ([], {}, r"Missing inputs \['text'\]"),
        ([("text", "BYTES", [[b"a", b"b"]])], {}, r"shape \[N\] or \[N, 1\]"),
        ([("text", "BYTES", [b"a"] * 3)], {"max_instances": 2}, "at most 2"),
        ([("text", "BYTES", [b"abcdef"])], {"max_text_bytes": 4}, "example 0"),
        ([("text", "BYTES", [b"a"]), ("text", "BYTES", [b"b"])], {}, "twice"),
    ],
)
def test_a_malformed_request_names_what_is_wrong(tensors, limits, message):
    with pytest.raises(RequestError, match=message):
        oip.parse_infer(tensors, TEXT, {**LIMITS, **limits})


def test_examples_counted_alike_in_every_input():
    two = Signature(
        {"a": ("int32", [None]), "b": ("int32", [None])},
        {"y": ("float32", [None])},
    )
    tensors = [("a", "INT32", [1, 2]), ("b", "INT32", [1])]
    with pytest.raises(RequestError, match="as many examples"):
        oip.parse_infer(tensors, two, LIMITS)


def test_the_answer_holds_the_outputs_asked_for_text_as_bytes():
    outputs = {
        "translation": np.array(["Je suis là."], dtype=object),
        "score": np.array([0.5], "float32"),
    }
    answer = oip.infer_outputs(outputs)
    assert [(n, d) for n, d, _ in answer] == [
        ("score", "FP32"),
        ("translation", "BYTES"),
    ]
    assert answer[1][2].tolist() == ["Je suis là.".encode()]
    assert [n for n, _, _ in oip.infer_outputs(outputs, ["score"])] == ["score"]
    with pytest.raises(RequestError, match=r"Unknown outputs \['nope'\]"):
        oip.infer_outputs(outputs, ["nope"])
