"""Running a SavedModel the way TensorFlow Serving does, for tests.

TensorFlow Serving (and `saved_model_cli run`) loads a SavedModel into a
TF1 session: the loader runs the SavedModel's saver restore op, then
each request feeds the signature's input tensors by name. A SavedModel
whose functions read variables the saver never restores works through
`tf.saved_model.load` but fails here.
"""

import numpy as np
import tensorflow as tf


def run_tf1(path, inputs, signature="serving_default"):
    """`{output: ndarray}` of `signature` run on `inputs` (`{name:
    array}`) in a TF1 session after `tf.compat.v1.saved_model.loader`'s
    restore, as TensorFlow Serving runs it."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature_def = meta.signature_def[signature]
        feeds = {
            signature_def.inputs[name].name: value
            for name, value in inputs.items()
        }
        fetches = {k: v.name for k, v in signature_def.outputs.items()}
        return session.run(fetches, feeds)


def run_tf2(path, inputs, signature="serving_default"):
    """The same call through `tf.saved_model.load`."""
    function = tf.saved_model.load(path).signatures[signature]
    outputs = function(**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def signature_names(path):
    """`{signature: [input names]}` of the SavedModel at `path`."""
    from tensorflow.python.saved_model import loader_impl

    meta = loader_impl.parse_saved_model(path).meta_graphs[0]
    return {
        name: sorted(signature.inputs)
        for name, signature in meta.signature_def.items()
        if not name.startswith("__")
    }


def assert_same(tf1, tf2, atol=1e-6):
    """Both loaders' outputs equal: the same names, shapes and values."""
    assert sorted(tf1) == sorted(tf2)
    for name in tf1:
        a, b = np.asarray(tf1[name]), np.asarray(tf2[name])
        assert a.shape == b.shape, name
        if a.dtype.kind in "OSU":
            assert a.tolist() == b.tolist(), name
        else:
            np.testing.assert_allclose(a, b, atol=atol, err_msg=name)
