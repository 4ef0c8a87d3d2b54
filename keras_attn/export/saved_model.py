"""SavedModel export: a Keras model (with its vectorizer for raw text)
or a `tf.Module` with signatures, through the destination checks.

Every SavedModel written here restores the way TensorFlow Serving
restores one (a TF1 session runs the SavedModel's saver, then a
signature; `saved_model_cli run` does the same), not only through
`tf.saved_model.load`. See `serving_root`.
"""

from keras_attn.export import logs
from keras_attn.export.destination import check_destination, staged
from keras_attn.legacy import exports as legacy_exports
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

KNOWN_WORDS = "known_words"
VARIABLES = "served_variables"


def checkpoint_key(path):
    """The checkpoint key of the weight with Keras path `path` in a
    SavedModel written here (TensorFlow writes "." as ".." and "/" as
    ".S" in object names)."""
    escaped = path.replace(".", "..").replace("/", ".S")
    return f"{VARIABLES}/{escaped}/.ATTRIBUTES/VARIABLE_VALUE"


def _concrete_functions(function):
    """The concrete functions of a `tf.function` (traced with its input
    signature when it has not been traced yet) or of a concrete one."""
    if hasattr(function, "get_concrete_function"):
        traced = function._list_all_concrete_functions()
        return traced or [function.get_concrete_function()]
    return [function]


def _resources_of(trackables):
    """The TensorFlow resources (lookup tables) reachable from
    `trackables`, each once, in a stable order."""
    import tensorflow as tf
    from tensorflow.saved_model.experimental import TrackableResource

    found, seen = [], set()
    for root in trackables:
        for node in tf.train.TrackableView(root).descendants():
            if isinstance(node, TrackableResource) and id(node) not in seen:
                seen.add(id(node))
                found.append(node)
    return found


def _keras_paths(trackables):
    """`{id(tf.Variable): Keras path}` of the Keras variables found
    under `trackables` (the first path wins)."""
    import keras
    import tensorflow as tf

    paths = {}
    for root in trackables:
        for node in tf.train.TrackableView(root).descendants():
            if isinstance(node, keras.Variable):
                paths.setdefault(id(node.value), node.path)
    return paths


def serving_root(functions, trackables=()):
    """The object a SavedModel is written from: the functions and the
    TensorFlow variables and resources they read, nothing else.

    A Keras 3 variable wraps a `tf.Variable`. Saved as an attribute of a
    `tf.Module`, it writes a copy of itself into the checkpoint, while the
    functions read the wrapped variable, which the SavedModel's saver then
    never restores: `tf.saved_model.load` runs (it rebinds the functions'
    captures) but TensorFlow Serving and `saved_model_cli run` fail with
    "Could not find variable ...". Keras's `ExportArchive` tracks both,
    so each weight is stored twice. Here the root holds the wrapped
    variables the functions capture (each once), the lookup tables found
    under `trackables` (a text vectorizer's vocabulary), and the
    functions under their names (`tf.saved_model.load(path).NAME` keeps
    working).

    Args:
        functions: `{name: tf.function}`, the functions to keep.
        trackables: objects to search for TensorFlow resources (lookup
            tables) the functions use. Defaults to `()`.

    Returns:
        A `tf.Module` to pass to `tf.saved_model.save`.
    """
    import tensorflow as tf

    root = tf.Module()
    paths = _keras_paths(trackables)
    variables, seen = {}, set()
    for function in functions.values():
        for concrete in _concrete_functions(function):
            for variable in concrete.variables:
                if id(variable) in seen:
                    continue
                seen.add(id(variable))
                key = paths.get(id(variable)) or variable.name.split(":")[0]
                name, n = key, 1
                while name in variables:
                    name, n = f"{key}_{n}", n + 1
                variables[name] = variable
    # Keyed by Keras's variable paths: the checkpoint says which weight
    # each value is (`served_variables/<path>`, "/" written ".S").
    setattr(root, VARIABLES, variables)
    root.served_resources = _resources_of(trackables)
    for name, function in functions.items():
        setattr(root, name, function)
    return root


def save_signatures(path, signatures, trackables=()):
    """`tf.saved_model.save` of `signatures` (`{name: tf.function}`)
    through `serving_root`, so that TensorFlow Serving restores it."""
    import tensorflow as tf

    root = serving_root(signatures, trackables)
    with logs.quiet():
        tf.saved_model.save(root, path, signatures=signatures)


def _serve_function(model, input_signature=None, vectorizer=None):
    import tensorflow as tf

    if input_signature is None:
        input_signature = [
            tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0])
            for t in model.inputs
        ]

    @tf.function(input_signature=input_signature)
    def serve(*args):
        outputs = model(
            list(args) if len(args) > 1 else args[0], training=False
        )
        if isinstance(outputs, (list, tuple)):  # as Keras's export names them
            outputs = {f"output_{i}": o for i, o in enumerate(outputs)}
        elif not isinstance(outputs, dict):
            outputs = {"output_0": outputs}
        if vectorizer is not None:
            ids = vectorizer(args[0])  # (B, T)
            outputs = {
                **outputs,
                KNOWN_WORDS: tf.reduce_sum(tf.cast(ids > 1, tf.int32), axis=-1),
            }
        return outputs

    return serve


def write_saved_model(model, tmp, input_signature=None, vectorizer=None):
    serve = _serve_function(model, input_signature, vectorizer)
    save_signatures(tmp, {DEFAULT_SIGNATURE: serve}, trackables=[model])


@legacy_exports.options_by_position("input_signature", "overwrite", "protect")
def export_saved_model(
    model, path, *, input_signature=None, overwrite=False, protect=()
):
    """Write a TF-Serving SavedModel with a `serving_default` signature.

    The SavedModel restores through TensorFlow Serving's loader (and
    `saved_model_cli run`) as well as through `tf.saved_model.load`, each
    weight stored once (see `serving_root`).

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
        write_saved_model(model, tmp, input_signature)
    return path


@legacy_exports.options_by_position("signatures", "overwrite")
def export_module(module, path, *, signatures, overwrite=False, protect=()):
    """Save the `signatures` (`{name: tf.function}`) of a `tf.Module` as a
    SavedModel, through the same destination checks (`overwrite`,
    `protect`) and atomic move as `export_saved_model`. The module itself
    is searched for the lookup tables the signatures use; what is written
    is `serving_root`'s (so TensorFlow Serving restores it), with each
    signature function under its name."""
    target = check_destination(path, "saved_model", overwrite, protect)
    with staged(target) as (tmp,):
        save_signatures(tmp, signatures, trackables=[module])
    return path
