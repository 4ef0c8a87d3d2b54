"""TensorFlow Serving's protos on their own (`keras_attn_cli.
tensor_protos`): arrays to `TensorProto`s and back, unchanged, and our
signatures as a `SignatureDefMap`."""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from keras_attn_cli.serving import tensor_protos  # noqa: E402
from keras_attn_runtime.signature import Signature  # noqa: E402


@pytest.mark.parametrize(
    "array",
    [
        np.array([[0.25, -1.5]], "float32"),
        np.array([3, 4, 5], "int32"),
        np.array([b"A fine film.", "Été".encode()], dtype=object),
    ],
)
def test_arrays_go_through_tensor_protos_unchanged(array):
    proto = tensor_protos.from_numpy(array)
    back = tensor_protos.to_numpy(proto)
    assert back.shape == array.shape and back.tolist() == array.tolist()


def test_signatures_become_a_signature_def_map():
    signature = Signature(
        {"text": ("string", [None])}, {"probability": ("float32", [None, 1])}
    )
    defs = tensor_protos.signature_def_map({"serving_default": signature})
    sig = defs.signature_def["serving_default"]
    assert sorted(sig.inputs) == ["text"]
    assert sorted(sig.outputs) == ["probability"]
    dims = [d.size for d in sig.outputs["probability"].tensor_shape.dim]
    assert dims == [-1, 1]
