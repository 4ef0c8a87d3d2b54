"""How the CLI finds models: the models folder (`--models`,
`$KERAS_ATTN_MODELS`, the checkout, the `keras-attn-models`
distribution), one way to name a model for every verb
(`resolve_model`), and what `serve` serves for a name (its versions, as
TensorFlow Serving lays them out). Loading them is `keras_attn_cli.
models`'."""

import os

from keras_attn_runtime.artifact import TRANSLATOR_FOLDER
from keras_attn_runtime.opener import is_saved_model

GET_MODELS = (
    "No trained models found: install them with `pip install ./models` "
    "in a checkout (the keras-attn-models distribution, docs/install.md), or "
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
        path = os.path.join(folder, TRANSLATOR_FOLDER["saved_model"])
        if is_saved_model(path) and os.path.isfile(
            os.path.join(folder, TRANSLATOR_FOLDER["target_vocabulary"])
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
        if want == "explain":  # else a LiteRT file, else a SavedModel
            found = artifact_in(folder)
            if found and found.endswith(".tflite"):
                return found
            for name in (".", "saved_model"):
                found = os.path.normpath(os.path.join(folder, name))
                if is_saved_model(found):
                    return found
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
    folder's `.tflite`, else its SavedModel), `"translator"` (a
    translator SavedModel folder, else a folder's LiteRT translator) or
    `"any"` (what `predict` runs).
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
        "explain": "a .keras file, a text classifier's .tflite or "
        "SavedModel, or a folder holding one",
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


def served_artifact(value, models_root):
    """`(name, path)` of what `keras-attn serve` serves for `value`: a
    shipped model's name or a folder holding a model file (the server
    opens the file `artifact_in` picks, as `predict` does, or the kind
    `--prefer` names), a SavedModel folder, a `.tflite`, `.keras` or
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
        # The folder, not its file: the server opens it (`--prefer`
        # may name another of its files) and says which file answers.
        return name, folder
    raise ValueError(
        "Expected a shipped model's name, a folder holding a SavedModel, "
        "a model.keras or one .tflite or .onnx, a SavedModel folder, or a "
        f".tflite, .keras or .onnx file. Received: MODEL={value!r}"
    )


def served_source(value, models_root, choice="latest"):
    """`keras_attn_cli.serving.versions.Source` of what `keras-attn serve`
    serves for `value`: a folder of numbered versions (`MODEL/1/`,
    `MODEL/2/`, each what `served_artifact` takes), as TensorFlow Serving
    lays them out, watched with the policy `choice` names (`latest`,
    `latest:N`, `all` or `N,M`, each of which must be there at start);
    anything else is version 1, read once."""
    from keras_attn_cli.serving import versions

    policy = versions.parse_policy(choice)
    path = named_path(value, models_root)
    found = versions.numbered(path) if os.path.isdir(path) else {}
    if not found:
        name, artifact = served_artifact(value, models_root)
        return versions.Source(name, fixed={1: artifact})
    name = os.path.basename(os.path.abspath(path))
    if policy[0] == "specific" and not policy[1] <= set(found):
        raise ValueError(
            f"Expected --model-versions to be {versions.POLICIES} of "
            f"{name!r} ({sorted(found)}). Received: --model-versions={choice}"
        )
    return versions.Source(name, os.path.abspath(path), policy)


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
