"""TensorFlow Serving's REST rules on their own (no server): the output
filter, the empty request, the row and columnar answers."""

import numpy as np
import pytest

from keras_attn_cli.serving import tf_serving_api as api
from keras_attn_runtime.signature import Signature

CLASSIFIER = Signature(
    {"text": ("string", [None])},
    {
        "probability": ("float32", [None, 1]),
        "attention": ("float32", [None, 2, 3]),
    },
)
LIMITS = {"max_instances": 4, "max_text_bytes": 100}


def test_output_filter_keeps_the_named_outputs_in_the_callers_order():
    assert api.output_filter(None, CLASSIFIER) is None
    assert api.output_filter([], CLASSIFIER) is None
    wanted = api.output_filter(["probability", "probability"], CLASSIFIER)
    assert wanted == ["probability"]
    outputs = {"probability": np.ones((2, 1)), "attention": np.ones((2, 2, 3))}
    assert list(api.filtered(outputs, wanted)) == ["probability"]
    assert api.filtered(outputs, None) is outputs


@pytest.mark.parametrize(
    "wanted, needle",
    [
        (["probabilty"], "Unknown output 'probabilty'"),
        ("probability", "list of output names"),
        ([1], "list of output names"),
    ],
)
def test_a_bad_output_filter_is_a_request_error(wanted, needle):
    with pytest.raises(api.RequestError, match=needle):
        api.output_filter(wanted, CLASSIFIER)


def test_an_empty_request_answers_no_rows_in_both_forms():
    name, inputs, form = api.parse_predict(
        {"instances": []}, {"serving_default": CLASSIFIER}, LIMITS
    )
    assert name == "serving_default" and form == "row"
    out = CLASSIFIER.empty_outputs()
    assert out["attention"].shape == (0, 2, 3)
    assert api.format_predict(out, "row") == {"predictions": []}
    assert api.format_predict(out, "columnar") == {
        "outputs": {"attention": [], "probability": []}
    }


def test_a_merged_call_is_cut_back_to_each_requests_width():
    signature = Signature(
        {"text": ("string", [None])}, {"tokens": ("string", [None, None])}
    )
    merged = {"tokens": np.array([[b"a", b"", b""], [b"b", b"c", b""]], object)}
    first = signature.own_part(merged, 0, 1)
    assert first["tokens"].tolist() == [[b"a"]]
    second = signature.own_part(merged, 1, 1)
    assert second["tokens"].tolist() == [[b"b", b"c"]]


@pytest.mark.parametrize(
    "body",
    [
        '{"instances": ["I am \\udc80 here"]}',
        '{"instances": [{"text": "\\ud800"}]}',
        '{"inputs": {"text": ["ok", "\\udfff"]}}',
    ],
)
def test_a_lone_surrogate_is_a_request_error_naming_the_example(body):
    # JSON's \u escapes carry lone surrogates, which UTF-8 cannot encode.
    with pytest.raises(api.RequestError, match="lone surrogate") as info:
        api.parse_predict(
            api.parse_json(body), {"serving_default": CLASSIFIER}, LIMITS
        )
    assert "example" in str(info.value) and "Received" in str(info.value)
