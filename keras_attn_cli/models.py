"""How the CLI finds and loads models: the models folder (`--models`,
`$KERAS_ATTN_MODELS`, the checkout, the `keras-attn-models` distribution),
one way to name a model for every verb, and the loaders that check a
model before running it."""

import os

import numpy as np

from keras_attn_runtime.opener import is_saved_model
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

GET_MODELS = (
    "No trained models found: install them with `pip install "
    "keras-attn-models` (from a source tree: `pip install ./models`), or "
    "pass --models DIR; `keras-attn demo` runs the generated-task demo."
)


def models_dir(args=None):
    """`--models`, `$KERAS_ATTN_MODELS`, the checkout's `saved_models/`,
    or the installed `keras_attn_models` distribution: the first that is
    given or present (`None` when none is). Never the working directory's
    own folder: a downloaded folder must not choose the models that run."""
    flag = getattr(args, "models", None)
    given = flag or os.environ.get("KERAS_ATTN_MODELS")
    if given:
        if not os.path.isdir(given):
            source = "--models" if flag else "$KERAS_ATTN_MODELS"
            raise ValueError(
                f"No such models folder. Received: {source}={given!r}"
            )
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.normpath(os.path.join(here, "..", "saved_models"))
    if os.path.isdir(checkout):
        return checkout
    import importlib.util

    if importlib.util.find_spec("keras_attn_models") is not None:
        import keras_attn_models

        return keras_attn_models.folder()
    return None


def model_folders(args=None):
    """The folders under the models folder, sorted (none without one)."""
    root = models_dir(args)
    if root is None or not os.path.isdir(root):
        return []
    return [os.path.join(root, name) for name in sorted(os.listdir(root))]


def find_shipped_model(args=None):
    """The first folder under the models folder holding a `model.keras`
    (the text-classifier contract: see docs/export.md)."""
    for folder in model_folders(args):
        path = os.path.join(folder, "model.keras")
        if os.path.isfile(path):
            return path
    return None


def find_translator(args=None):
    """The first folder holding a `saved_model/` and the target vocabulary
    beside it (the translator contract: see docs/export.md)."""
    for folder in model_folders(args):
        path = os.path.join(folder, "saved_model")
        if is_saved_model(path) and os.path.isfile(
            os.path.join(folder, "target_vocabulary.txt")
        ):
            return path
    return None


def artifact_in(folder):
    """The model file `folder` holds, in the one order every command and
    `serve` use (`keras_attn_runtime.opener`): a SavedModel (the folder
    itself, or its `saved_model/`), as TensorFlow Serving serves it; else
    its `model.keras`; else its one `.tflite` or `.onnx` file. `None`
    when it holds none of these (or several `.tflite`/`.onnx` files and
    nothing before them)."""
    from keras_attn_runtime.opener import find

    result = find(folder) if os.path.isdir(folder) else None
    return None if result is None else result[1]


def named_path(value, models_root):
    """`value` itself, or a shipped model's folder when `value` is a bare
    name that is not a path here."""
    if not os.path.exists(value) and os.sep not in value and models_root:
        if os.path.isdir(os.path.join(models_root, value)):
            return os.path.join(models_root, value)
    return value


def _folder_file(folder, want):
    """What `resolve_model` takes from a folder for `want`, or `None`:
    `artifact_in`'s file for `"any"`; the `model.keras` in (or beside, for
    a SavedModel folder) it for `"keras"`; the folder itself or its
    `saved_model/` for `"translator"`, or the folder of a
    `keras_attn.models.TextGenerator` (a decoder-only translator)."""
    if want == "any":
        return artifact_in(folder)
    if want in ("keras", "explain"):
        if is_saved_model(folder):
            folder = os.path.dirname(os.path.abspath(folder))
        found = os.path.normpath(os.path.join(folder, "model.keras"))
        if os.path.isfile(found):
            return found
        if want == "explain":  # else a LiteRT file with its attention
            found = artifact_in(folder)
            return found if found and found.endswith(".tflite") else None
        return None
    if want == "translator":
        from keras_attn.models.text_generator import is_text_generator

        if is_text_generator(folder):  # a decoder-only translator
            return os.path.normpath(folder)
    if want == "translator" and artifact_in(folder) is not None:
        # A SavedModel translator first, else its LiteRT file.
        found = artifact_in(folder)
        if found.endswith(".tflite"):
            return found
    for name in (".", "saved_model"):
        found = os.path.normpath(os.path.join(folder, name))
        if is_saved_model(found):
            return found
    return None


def resolve_model(value, flag, want, args=None):
    """One way to name a model for every command: an artifact file, a
    folder holding one (`artifact_in`'s order), a SavedModel folder, or a
    shipped model's name (a folder under the models folder). `want`:
    `"keras"` (a `.keras` file), `"explain"` (a `.keras` file, else a
    folder's `.tflite`), `"translator"` (a translator SavedModel folder,
    else a folder's LiteRT translator) or `"any"` (what `predict` runs).
    A `ValueError` naming `flag` when nothing fits: one that says so
    when the path does not exist."""
    path = named_path(value, models_dir(args))
    if os.path.isfile(path):
        return path
    found = _folder_file(path, want) if os.path.isdir(path) else None
    if found is not None:
        return found
    kinds = {
        "keras": "a .keras file or a folder holding model.keras",
        "explain": "a .keras file or a .tflite with an attention output, or "
        "a folder holding one",
        "translator": "a translator SavedModel folder, a LiteRT translator, "
        "a decoder-only translator's folder, or a folder holding one",
        "any": "a .keras, .tflite or .onnx file, a SavedModel folder, or a "
        "folder holding one",
    }[want]
    missing = "" if os.path.exists(path) else ", which does not exist"
    raise ValueError(
        f"Expected {kinds} (or a shipped model's name). Received: "
        f"{flag}={value!r}{missing}"
    )


# A text line is cut at this many bytes before anything splits it: every
# model reads at most a few thousand tokens.


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
    if os.path.isdir(os.path.join(path, "saved_model")):
        path = os.path.join(path, "saved_model")
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


# -------------------------------------------------------------- commands


def served_artifact(value, models_root):
    """`(name, path)` of what `keras-attn serve` serves for `value`: a
    shipped model's name or a folder (the file `artifact_in` picks, as
    `predict` does), a SavedModel folder, a `.tflite`, `.keras` or
    `.onnx` file."""
    path = named_path(value, models_root)
    if os.path.isfile(path) and path.endswith((".tflite", ".keras", ".onnx")):
        return os.path.splitext(os.path.basename(path))[0], path
    found = artifact_in(path) if os.path.isdir(path) else None
    if found is not None:
        folder = os.path.abspath(path)
        name = os.path.basename(folder)
        if name == "saved_model" and found == os.path.normpath(path):
            name = os.path.basename(os.path.dirname(folder))
        return name, os.path.abspath(found)
    raise ValueError(
        "Expected a shipped model's name, a folder holding a SavedModel, "
        "a model.keras or one .tflite or .onnx, a SavedModel folder, or a "
        f".tflite, .keras or .onnx file. Received: MODEL={value!r}"
    )


def served_versions(value, models_root, choice="latest"):
    """`(name, {version: path})` of what `keras-attn serve` serves for
    `value`: a folder of numbered versions (`MODEL/1/`, `MODEL/2/`, each
    what `served_artifact` takes), as TensorFlow Serving lays them out,
    with the versions `choice` picks (`"latest"`, `"all"` or `"N,M"`);
    anything else is version 1."""
    path = named_path(value, models_root)
    numbered = []
    if os.path.isdir(path):
        numbered = sorted(
            int(entry)
            for entry in os.listdir(path)
            if entry.isdigit() and os.path.isdir(os.path.join(path, entry))
        )
    if not numbered:
        name, artifact = served_artifact(value, models_root)
        found = {1: artifact}
    else:
        name = os.path.basename(os.path.abspath(path))
        found = {
            v: served_artifact(os.path.join(path, str(v)), None)[1]
            for v in numbered
        }
    if choice == "latest":
        return name, {max(found): found[max(found)]}
    if choice == "all":
        return name, found
    try:
        wanted = sorted({int(v) for v in choice.split(",")})
    except ValueError:
        wanted = None
    if not wanted or any(v not in found for v in wanted):
        raise ValueError(
            "Expected --model-versions to be latest, all or versions of "
            f"{name!r} ({sorted(found)}), comma-separated. Received: "
            f"--model-versions={choice}"
        )
    return name, {v: found[v] for v in wanted}


def check_model_name(name):
    """A name clients can put in a route (`/v1/models/NAME`): letters,
    digits, `_`, `-` and `.`, starting with a letter or digit; a
    `ValueError` naming `--model-name` otherwise."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", name):
        raise ValueError(
            "Expected --model-name to be letters, digits, '_', '-' or '.', "
            f"starting with a letter or digit. Received: --model-name={name!r}"
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
