"""Export trained models for serving: SavedModel and LiteRT/TFLite.

Every writer builds the artifact under a temporary path next to the
target and moves it into place only when it is complete, so a failure never
leaves a half-written artifact behind.
"""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path; on success move it to `target`.

    Works for files and directories. An existing `target` is replaced only
    after the new artifact is complete.
    """
    target = os.path.abspath(target)
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: path={target!r}"
        )
    tmp_dir = tempfile.mkdtemp(prefix=".tmp-export-", dir=parent)
    tmp = os.path.join(tmp_dir, os.path.basename(target))
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"The export wrote nothing at {tmp!r}.")
        old = None
        if os.path.exists(target):
            old = os.path.join(tmp_dir, ".old")
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def export_saved_model(model, path, input_signature=None):
    """Write a TF-Serving SavedModel with a `serving_default` signature.

    Args:
        model: a built Keras model. Its outputs may be a tensor or a dict of
            named tensors; the signature returns the same names.
        path: target directory.
        input_signature: list of `tf.TensorSpec`. Defaults to one spec per
            model input, built from the model's input shapes and dtypes (a
            string model therefore takes a batch of raw strings).
    """
    import keras
    import tensorflow as tf

    if input_signature is None:
        input_signature = [
            tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0])
            for t in model.inputs
        ]

    def serve(*args):
        outputs = model(list(args) if len(args) > 1 else args[0])
        if not isinstance(outputs, dict):
            outputs = {"output_0": outputs}
        return outputs

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve, input_signature)
    with atomic_path(path) as tmp:
        archive.write_out(tmp, verbose=False)
    return path
