"""SavedModel export: a Keras model (with its vectorizer for raw text)
or a `tf.Module` with signatures, through the destination checks."""

from keras_attn.export.destination import check_destination, staged

KNOWN_WORDS = "known_words"


def _serving_module(model, input_signature=None, vectorizer=None):
    import tensorflow as tf

    if input_signature is None:
        input_signature = [
            tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0])
            for t in model.inputs
        ]

    class Served(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=input_signature)
        def serve(self, *args):
            outputs = self.model(
                list(args) if len(args) > 1 else args[0], training=False
            )
            if not isinstance(outputs, dict):
                outputs = {"output_0": outputs}
            if vectorizer is not None:
                ids = vectorizer(args[0])  # (B, T)
                outputs = {
                    **outputs,
                    KNOWN_WORDS: tf.reduce_sum(
                        tf.cast(ids > 1, tf.int32), axis=-1
                    ),
                }
            return outputs

    return Served()


def _write_saved_model(model, tmp, input_signature=None, vectorizer=None):
    import tensorflow as tf

    # A plain tf.Module stores each variable once (keras.export's archive
    # wrote the weights twice in Keras 3.15).
    served = _serving_module(model, input_signature, vectorizer)
    tf.saved_model.save(
        served, tmp, signatures={"serving_default": served.serve}
    )


def export_saved_model(
    model, path, input_signature=None, overwrite=False, protect=()
):
    """Write a TF-Serving SavedModel with a `serving_default` signature.

    Args:
        model: a built Keras model. Its outputs may be a tensor or a dict of
            named tensors; the signature returns the same names.
        path: target directory.
        input_signature: list of `tf.TensorSpec`. Defaults to one spec per
            model input, built from the model's input shapes and dtypes (a
            string model therefore takes a batch of raw strings).
        overwrite: replace `path` even when it is not an earlier SavedModel.
            Defaults to `False`.
        protect: paths never to replace (see `check_destination`).
    """
    target = check_destination(
        path, "saved_model", overwrite, protect, arg="path"
    )
    with staged(target) as (tmp,):
        _write_saved_model(model, tmp, input_signature)
    return path


def export_module(module, path, signatures, overwrite=False):
    """Save a `tf.Module` as a SavedModel with `signatures` (`{name:
    tf.function}`), through the same destination checks and atomic move
    as `export_saved_model`."""
    import tensorflow as tf

    target = check_destination(path, "saved_model", overwrite)
    with staged(target) as (tmp,):
        tf.saved_model.save(module, tmp, signatures=signatures)
    return path
