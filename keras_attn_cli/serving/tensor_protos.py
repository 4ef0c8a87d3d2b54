"""TensorFlow's tensor protos and signature defs for TensorFlow Serving's
gRPC API: NumPy arrays to and from `TensorProto` (with TensorFlow's rules
for a proto holding fewer values than its shape), and a model's
`keras_attn_runtime.Signature`s as a `SignatureDefMap`."""

import numpy as np

from keras_attn_cli.serving import tf_serving_api as api
from keras_attn_cli.serving.limits import RequestError

# The most values one value may fill (TensorFlow's rule for a tensor
# proto holding fewer values than its shape), far past any request limit.
MAX_REPEATED = 1 << 16


def _dtypes():
    """`{NumPy dtype name: TensorFlow's DataType enum}`, from
    `tf_serving_api.TF_DTYPES`'s names."""
    from tensorflow.core.framework import types_pb2

    return {k: types_pb2.DataType.Value(v) for k, v in api.TF_DTYPES.items()}


def _dtype_enum(name):
    return _dtypes()["string" if name in ("object", "string") else name]


def to_numpy(proto):
    """A `TensorProto` as a NumPy array (strings as an object array of
    bytes), or a `RequestError` for a dtype a text model does not take."""
    names = {v: k for k, v in _dtypes().items()}
    shape = [d.size for d in proto.tensor_shape.dim]
    name = names.get(proto.dtype)
    if name is None:
        raise RequestError(f"Unsupported tensor dtype {proto.dtype}")
    if name == "string":
        array = np.array(list(proto.string_val), dtype=object)
    elif proto.tensor_content:
        array = np.frombuffer(proto.tensor_content, dtype=name)
    else:
        field = {
            "float32": "float_val",
            "float64": "double_val",
            "int64": "int64_val",
            "bool": "bool_val",
            "float16": "half_val",
        }.get(name, "int_val")
        array = np.array(list(getattr(proto, field)), dtype=name)
    count = 1
    for d in shape:
        count *= d
    if array.size == 1 and count != 1:  # one value, repeated (TensorFlow's)
        if count > MAX_REPEATED:
            raise RequestError(
                f"Expected at most {MAX_REPEATED} values for one value "
                f"repeated. Received: shape {shape}"
            )
        array = np.full(count, array.reshape(-1)[0], dtype=array.dtype)
    if array.size != count:
        raise RequestError(
            f"Expected {count} values for shape {shape}. Received: {array.size}"
        )
    return array.reshape(shape)


def from_numpy(array):
    """A NumPy array (strings as bytes or text) as a `TensorProto`."""
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2

    array = np.asarray(array)
    text = array.dtype.kind in "OSU"
    proto = tensor_pb2.TensorProto(
        dtype=_dtype_enum("string" if text else array.dtype.name),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[
                tensor_shape_pb2.TensorShapeProto.Dim(size=d)
                for d in array.shape
            ]
        ),
    )
    if text:
        proto.string_val.extend(
            v.encode("utf-8") if isinstance(v, str) else bytes(v)
            for v in array.reshape(-1).tolist()
        )
    else:
        proto.tensor_content = np.ascontiguousarray(array).tobytes()
    return proto


def signature_def_map(signatures):
    """TensorFlow Serving's `SignatureDefMap` for our signatures."""
    from tensorflow.core.framework import tensor_shape_pb2
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow_serving.apis import get_model_metadata_pb2

    def info(name, dtype, shape):
        unknown = shape is None
        dims = [
            tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d)
            for d in (shape or [])
        ]
        return meta_graph_pb2.TensorInfo(
            name=name,
            dtype=_dtype_enum(dtype),
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=dims, unknown_rank=unknown
            ),
        )

    result = get_model_metadata_pb2.SignatureDefMap()
    for key, signature in signatures.items():
        definition = result.signature_def[key]
        definition.method_name = "tensorflow/serving/predict"
        for name, (dtype, shape) in signature.inputs.items():
            definition.inputs[name].CopyFrom(info(name, dtype, shape))
        for name, (dtype, shape) in signature.outputs.items():
            definition.outputs[name].CopyFrom(info(name, dtype, shape))
    return result
