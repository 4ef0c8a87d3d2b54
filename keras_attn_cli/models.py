"""How the CLI loads and runs models: the loaders that check a model
before running it, the run harness's model errors (memory, ops) and
`open_model`, through which every command and `serve` open a file.
Finding and naming them is `keras_attn_cli.finding`'s."""

import os

import numpy as np

from keras_attn_runtime.artifact import TRANSLATOR_FOLDER
from keras_attn_runtime.opener import is_saved_model
from keras_attn_runtime.signature import DEFAULT_SIGNATURE


def load_classifier(path):
    """A `.keras` raw-text classifier: one string input, a dict output
    with `probability` (the documented contract)."""
    from keras_attn.opener import KerasArtifact

    model = KerasArtifact(path).model
    check_classifier(model, path)
    return model


def check_classifier(model, path):
    inputs = getattr(model, "inputs", None) or []
    if len(inputs) != 1 or inputs[0].dtype != "string":
        raise ValueError(
            "Expected a text model: one string input. Received: "
            f"{path!r} with inputs "
            f"{[(tuple(t.shape), str(t.dtype)) for t in inputs]}"
        )
    outputs = model.output
    if not isinstance(outputs, dict) or "probability" not in outputs:
        names = sorted(outputs) if isinstance(outputs, dict) else "a tensor"
        raise ValueError(
            "Expected a model whose outputs are a dict with 'probability'. "
            f"Received: {path!r} with outputs {names}"
        )


def run_model(fn, *args):
    """Call TensorFlow; its runtime errors become one clean line. The call
    runs on a worker thread while this one waits in short steps, so that
    Ctrl-C acts at once (a TensorFlow op does not return to Python, where
    the interrupt is raised, until it ends: 9 s for a long translation)."""
    import tensorflow as tf

    try:
        return interruptible(fn, *args)
    except tf.errors.OpError as err:
        message = err.message or str(err)
        kind = "" if memory_failure(message) else f" ({type(err).__name__})"
        raise ValueError(
            f"The model failed to run{kind}: {op_error_line(message)}"
        ) from None


def interruptible(fn, *args):
    """`fn(*args)` on a daemon thread, waited for in steps of 0.1 s: a
    `KeyboardInterrupt` reaches this thread between steps, whatever `fn`
    is doing (it is left to end with the process)."""
    import concurrent.futures
    import threading

    future = concurrent.futures.Future()

    def work():
        try:
            future.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 (handed to the caller)
            future.set_exception(err)

    threading.Thread(target=work, daemon=True, name="keras-attn-model").start()
    while True:
        try:
            return future.result(timeout=0.1)
        except concurrent.futures.TimeoutError:
            continue


# Bytes per element of the dtypes an allocation failure may name, in
# TensorFlow's proto spelling (DT_FLOAT) and its OOM message's (float).
_DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "half": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def memory_failure(message):
    """The allocation a TensorFlow error message says failed, as
    "the model asked for N bytes (...)", or `None` for any other error.

    Two forms: the runtime's "OOM when allocating tensor with shape[...]
    and type float", and a constant that graph optimization folded and
    could not materialize ("Cannot parse tensor from proto", its dtype,
    `dim { size: ... }` and a `float_val` line, which alone says
    nothing)."""
    import re

    nodes = re.findall(r"\[\[\{\{node ([^}]+)\}\}\]\]", message)
    oom = re.search(
        r"OOM when allocating tensor with shape\[([\d, ]*)\]"
        r"(?: and type (\w+))?",
        message,
    )
    if oom:
        dims = [int(d) for d in oom.group(1).split(",") if d.strip()]
        dtype = oom.group(2) or "?"
    elif "Cannot parse tensor from proto" in message:
        found = re.search(r"dtype: DT_(\w+)", message)
        dtype = found.group(1).lower() if found else "?"
        dims = [int(d) for d in re.findall(r"size: (\d+)", message)]
    else:
        return None
    count = 1
    for d in dims:
        count *= d
    width = _DTYPE_BYTES.get(dtype)
    asked = f"{count * width:,} bytes" if width else f"{count:,} elements"
    node = f", node {nodes[-1]}" if nodes else ""
    return (
        f"the model asked for {asked} (a {dtype} tensor of shape "
        f"{dims}{node}): more memory than can be allocated"
    )


def op_error_line(message, width=300):
    """The line of a TensorFlow error that says what went wrong (not its
    'Graph execution error:' heading, the stack of the node, nor the
    `[[{{node X}}]]` marker), with the node named after it: an
    allocation that does not fit says its shape and the limit."""
    import re

    failure = memory_failure(message)
    if failure:
        return failure[:width]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    nodes = re.findall(r"\[\[\{\{node ([^}]+)\}\}\]\]", message)
    telling = [
        line
        for line in lines
        if not line.startswith(("Graph execution error", "Detected at node"))
        and not line.startswith(("File ", "in ", "line ", "[["))
    ]
    chosen = None
    for line in telling:
        if any(w in line for w in ("OOM", "out of memory", "xhausted")):
            chosen = line
            break
    chosen = chosen or (telling or lines or ["(no message)"])[-1]
    if nodes and nodes[-1] not in chosen:
        chosen = f"{chosen} (at node {nodes[-1]})"
    return chosen[:width]


def known_words(model, texts):
    """Per text, how many tokens the model's vocabulary knows."""
    from keras_attn.explain import find_vectorizer

    vec = find_vectorizer(model)
    ids = np.asarray(run_model(vec, np.array(texts, dtype=object)))
    return (ids > 1).sum(axis=-1)


def _signature(loaded, path, key, needs):
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if key not in signatures:
        raise ValueError(
            f"Expected {needs} (a {key!r} signature). Received: {path!r} "
            f"with signatures {sorted(signatures)}"
        )
    return signatures[key]


def saved_classifier(loaded, path):
    """The `serving_default` function of a loaded text-classifier
    SavedModel (from `path`), checked."""
    import tensorflow as tf

    needs = "a text classifier SavedModel (`keras-attn translate` runs a "
    needs += "translator)"
    fn = _signature(loaded, path, DEFAULT_SIGNATURE, needs)
    specs = list(fn.structured_input_signature[1].values())
    if len(specs) != 1 or specs[0].dtype != tf.string:
        raise ValueError(
            "Expected a SavedModel whose serving_default takes one batch "
            f"of strings. Received: {path!r} with inputs {specs}"
        )
    if "probability" not in fn.structured_outputs:
        hint = ""
        if "translate" in loaded.signatures:
            hint = " (a translator: run it with `keras-attn translate`)"
        raise ValueError(
            "Expected a SavedModel whose serving_default returns "
            f"'probability'. Received: {path!r} with outputs "
            f"{sorted(fn.structured_outputs)}{hint}"
        )
    return fn


def load_translator(path, allow_unsafe=False):
    """The `translate` function of a translator SavedModel (the folder or
    its parent), opened as every SavedModel is (`keras_attn.opener`)."""
    inside = os.path.join(path, TRANSLATOR_FOLDER["saved_model"])
    if os.path.isdir(inside):
        path = inside
    if not is_saved_model(path):
        raise ValueError(
            f"No SavedModel translator in {path!r} (no saved_model.pb)."
        )
    from keras_attn.opener import SavedModelArtifact

    loaded = SavedModelArtifact(path, allow_unsafe).loaded
    return _signature(
        loaded,
        path,
        "translate",
        "a translator SavedModel (`keras-attn predict` runs a classifier)",
    )


def _tensorflow_loader(kind):
    """A loader of `kind` for `keras_attn_runtime.opener.register` that
    imports TensorFlow and Keras (`keras_attn.opener`) only when a file of
    that kind is opened: serving a LiteRT file never imports them."""

    def load(path, allow_unsafe):
        from keras_attn import opener

        return opener.open_tensorflow_kind(kind, path, allow_unsafe)

    return load


def open_model(path, accelerator="cpu", vocabulary_path=None, **settings):
    """`keras_attn_runtime.opener.open` with the TensorFlow kinds
    registered (lazily): how every command and `serve` open a model file.
    `settings`: `allow_unsafe` and `flag`, as `open` takes them."""
    from keras_attn_runtime import opener

    for kind in set(opener.TENSORFLOW_KINDS) - set(opener.registered()):
        opener.register(kind, _tensorflow_loader(kind))
    return opener.open(path, accelerator, vocabulary_path, **settings)
