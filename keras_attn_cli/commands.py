"""The commands of `keras-attn` (parsing lives in `keras_attn_cli`; no
module of `keras_attn` imports this package).

Every command checks its inputs before work and reports problems as a
`ValueError` naming the command-line flag; `keras_attn_cli.main` prints
them as one `keras-attn: error: ...` line with exit status 2.
"""

import itertools
import os
import sys

import numpy as np

SAMPLE_REVIEWS = [
    "One of the best films I have seen in years. The acting is superb and "
    "the story kept me on the edge of my seat. Highly recommended!",
    "A complete waste of time. The plot made no sense, the dialogue was "
    "awful and I nearly walked out. Avoid this boring mess.",
    "I expected little, but the cast is wonderful and the ending moved me "
    "to tears. A beautiful, funny and touching movie.",
    "Terrible acting, cheap effects and a script so bad it hurts. Easily "
    "the worst movie of the year.",
]
SAMPLE_SENTENCES = [
    "I am tired.",
    "Where is the station?",
    "She is reading a book.",
    "We have to leave now.",
]
NO_WORD = "no known word"


def quiet():
    """Silence TensorFlow's Python-side logging (the C++ side is silenced
    by `TF_CPP_MIN_LOG_LEVEL`, set before import)."""
    import logging

    for name in ("tensorflow", "absl", "keras"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run(args):
    command = args.command or "classify"
    return COMMANDS[command](args)


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


def _model_folders(args=None):
    root = models_dir(args)
    if root is None or not os.path.isdir(root):
        return []
    return [os.path.join(root, name) for name in sorted(os.listdir(root))]


def find_shipped_model(args=None):
    """The first folder under the models folder holding a `model.keras`
    (the text-classifier contract: see docs/export.md)."""
    for folder in _model_folders(args):
        path = os.path.join(folder, "model.keras")
        if os.path.isfile(path):
            return path
    return None


def find_translator(args=None):
    """The first folder holding a `saved_model/` and the target vocabulary
    beside it (the translator contract: see docs/export.md)."""
    for folder in _model_folders(args):
        path = os.path.join(folder, "saved_model")
        if os.path.isfile(
            os.path.join(path, "saved_model.pb")
        ) and os.path.isfile(os.path.join(folder, "target_vocabulary.txt")):
            return path
    return None


def resolve_model(value, flag, want, args=None):
    """One way to name a model for every command: an artifact file, a
    folder holding one, a SavedModel folder, or a shipped model's name
    (a folder under the models folder). `want`: `"keras"` (a `.keras`
    file), `"translator"` (a translator SavedModel folder) or `"any"`
    (what `predict` runs: `.keras`, SavedModel folder, `.tflite`,
    `.onnx`). A `ValueError` naming `flag` when nothing fits."""
    path = value
    if not os.path.exists(path) and os.sep not in value:
        root = models_dir(args)
        if root is not None and os.path.isdir(os.path.join(root, value)):
            path = os.path.join(root, value)
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        saved = os.path.isfile(os.path.join(path, "saved_model.pb"))
        if want == "keras" and saved:  # the folder beside the SavedModel
            path = os.path.dirname(os.path.abspath(path))
        candidates = {
            "keras": ["model.keras"],
            "translator": [".", "saved_model"],
            "any": ["model.keras", ".", "saved_model"],
        }[want]
        for name in candidates:
            found = os.path.normpath(os.path.join(path, name))
            if name.endswith(".keras") and os.path.isfile(found):
                return found
            if os.path.isfile(os.path.join(found, "saved_model.pb")):
                return found
        if want == "any":
            files = sorted(
                f for f in os.listdir(path) if f.endswith((".tflite", ".onnx"))
            )
            if len(files) == 1:
                return os.path.join(path, files[0])
    kinds = {
        "keras": "a .keras file or a folder holding model.keras",
        "translator": "a translator SavedModel folder or its parent",
        "any": "a .keras, .tflite or .onnx file, a SavedModel folder, or a "
        "folder holding one",
    }[want]
    raise ValueError(
        f"Expected {kinds} (or a shipped model's name). Received: "
        f"{flag}={value!r}"
    )


# A text line is cut at this many bytes before anything splits it: every
# model reads at most a few thousand tokens.
MAX_LINE_BYTES = 1 << 16
# Texts scored per batch when reading a file or standard input.
CHUNK = 256


def iter_text_lines(path, flag, limit=MAX_LINE_BYTES):
    """The non-blank lines of a UTF-8 file (`-`: standard input), one at a
    time, each cut at `limit` bytes (the rest of a longer line is read
    and dropped): memory stays bounded however long the input. Errors
    name `flag`, the option that gave the path."""
    if path != "-" and not os.path.isfile(path):
        raise ValueError(f"No such file. Received: {flag}={path!r}")
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    offset = 0
    try:
        while True:
            line = f.readline(limit)
            if not line:
                return
            start = offset
            offset += len(line)
            if len(line) == limit and not line.endswith(b"\n"):
                while True:  # drop the rest of an over-long line
                    rest = f.readline(limit)
                    offset += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                line = _whole_characters(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"Expected UTF-8 text ({err.reason} at byte "
                    f"{start + err.start}). Received: {flag}={path!r}"
                ) from None
            for part in text.splitlines():  # \r and other line breaks
                if part.strip():
                    yield part
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def _whole_characters(data):
    """`data` without a UTF-8 character cut at its end (at most 3 bytes
    go; a line that is not UTF-8 anyway stays, for the decoder's error)."""
    for cut in range(4):
        head = data[: len(data) - cut]
        try:
            head.decode("utf-8")
            return head
        except UnicodeDecodeError:
            continue
    return data


def read_text_file(path, flag):
    """Non-blank lines of a UTF-8 file (`-`: standard input), each cut at
    `MAX_LINE_BYTES`; errors name `flag`."""
    return list(iter_text_lines(path, flag))


def iter_texts(args, flag="text"):
    """Positional texts, then `--file` lines, one at a time."""
    given = False
    for text in getattr(args, "text", None) or []:
        given = True
        yield text[:MAX_LINE_BYTES]
    if getattr(args, "file", None) is not None:
        for text in iter_text_lines(args.file, "--file"):
            given = True
            yield text
    if not given:
        raise ValueError(
            f"Nothing to read: give {flag} arguments or --file. "
            "Received: no text"
        )


def read_texts(args, default=None, flag="text"):
    """Positional texts plus `--file` lines (`-`: standard input)."""
    try:
        return list(iter_texts(args, flag))
    except ValueError as err:
        if default is not None and str(err).startswith("Nothing to read"):
            return list(default)
        raise


def _snippet(text, width=80):
    text = " ".join(text[: 4 * width].split())  # never splits a long text
    return text if len(text) <= width else text[: width - 3] + "..."


def _verdict(p, known):
    if known == 0:
        return f"-\t{NO_WORD}"
    label = "positive" if p > 0.5 else "negative"
    return f"{p:.4f}\t{label}"


# ---------------------------------------------------------------- models


def load_classifier(path):
    """A `.keras` raw-text classifier: one string input, a dict output
    with `probability` (the documented contract)."""
    from keras_attn import explain

    model = explain.load_text_model(path)
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


def _run_model(fn, *args):
    """Call TensorFlow; its runtime errors become one clean line."""
    import tensorflow as tf

    try:
        return fn(*args)
    except tf.errors.OpError as err:
        raise ValueError(
            f"The model failed to run ({type(err).__name__}): "
            f"{_op_error_line(err.message or str(err))}"
        ) from None


def _op_error_line(message, width=300):
    """The line of a TensorFlow error that says what went wrong (not its
    'Graph execution error:' heading nor the stack of the node)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    telling = [
        line
        for line in lines
        if not line.startswith(("Graph execution error", "Detected at node"))
        and not line.startswith(("File ", "in ", "line "))
    ]
    for line in telling:
        if any(w in line for w in ("OOM", "out of memory", "xhausted")):
            return line[:width]
    return (telling or lines or ["(no message)"])[-1][:width]


def known_words(model, texts):
    """Per text, how many tokens the model's vocabulary knows."""
    from keras_attn.explain import find_vectorizer

    vec = find_vectorizer(model)
    ids = np.asarray(_run_model(vec, np.array(texts, dtype=object)))
    return (ids > 1).sum(axis=-1)


def load_saved_model(path, allow_unsafe=False):
    """Load a SavedModel after checking its files and its ops."""
    import tensorflow as tf

    from keras_attn import trust

    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ValueError(f"No saved_model.pb in {path!r}.")
    if not allow_unsafe:
        trust.check_saved_model(path)
    if not os.path.isfile(os.path.join(path, "variables", "variables.index")):
        raise ValueError(
            f"Not a complete SavedModel: {path!r} has no "
            "variables/variables.index"
        )
    try:
        return tf.saved_model.load(path)
    except Exception as err:
        first = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ValueError(
            f"Could not load the SavedModel {path!r}: {first}"
        ) from None


def _signature(loaded, path, key, needs):
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if key not in signatures:
        raise ValueError(
            f"Expected {needs} (a {key!r} signature). Received: {path!r} "
            f"with signatures {sorted(signatures)}"
        )
    return signatures[key]


def saved_classifier(path, allow_unsafe=False):
    """The `serving_default` function of a text-classifier SavedModel."""
    import tensorflow as tf

    loaded = load_saved_model(path, allow_unsafe)
    needs = "a text classifier SavedModel (`keras-attn translate` runs a "
    needs += "translator)"
    fn = _signature(loaded, path, "serving_default", needs)
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
    if os.path.isdir(os.path.join(path, "saved_model")):
        path = os.path.join(path, "saved_model")
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ValueError(
            f"No SavedModel translator in {path!r} (no saved_model.pb)."
        )
    loaded = load_saved_model(path, allow_unsafe)
    return _signature(
        loaded,
        path,
        "translate",
        "a translator SavedModel (`keras-attn predict` runs a classifier)",
    )


# -------------------------------------------------------------- commands


def _classify(args):
    path = args.model and resolve_model(args.model, "--model", "keras", args)
    path = path or find_shipped_model(args)
    if path is None:
        raise ValueError(GET_MODELS)
    from keras_attn import explain

    texts = read_texts(args, default=SAMPLE_REVIEWS)
    model = load_classifier(path)
    known = known_words(model, texts)
    print(f"Model: {path}\n")
    results = _run_model(explain.attend, model, texts)
    for result, n in zip(results, known, strict=True):
        print(
            f"[{_verdict(result['probability'], n)}] "
            f"{_snippet(result['text'], 90)}"
        )
        if n:
            words = ", ".join(w for w, _ in explain.top_tokens(result, 6))
            print(f"    attention picked: {words}")
        print()
    translator = find_translator(args)
    if translator and not (args.text or args.file):
        _print_translations(translator, SAMPLE_SENTENCES, alignment=True)
    return 0


def _tokens(row):
    return [t.decode() for t in row if t]


def _check_sentences(texts, flag="text"):
    for text in texts:
        if not text.strip():
            raise ValueError(
                "Expected a non-empty sentence. Received: "
                f"{flag}={_snippet(text)!r}"
            )


def _check_length(out, texts, flag="text"):
    """A clear error when a translator read only the start of an input
    (its `source_truncated` output)."""
    if "source_truncated" not in out:
        return
    limit = out["attention"].shape[-1]
    for text, cut in zip(texts, out["source_truncated"].numpy(), strict=True):
        if cut:
            raise ValueError(
                f"Expected at most {limit} words per sentence (source "
                "tokens: a subword translator counts word pieces; the "
                "translator reads no more). Received: "
                f"{flag}={_snippet(text)!r}; "
                "split it into shorter sentences"
            )


def _print_translations(path, texts, alignment=False, allow_unsafe=False):
    """Translate `texts`; print the first one's alignment as a grid."""
    import tensorflow as tf

    _check_sentences(texts)
    fn = load_translator(path, allow_unsafe)
    out = _run_model(fn, tf.constant(texts))
    _check_length(out, texts)
    print(f"Translator: {path}\n")
    for text, fr in zip(texts, out["translation"].numpy(), strict=True):
        print(f"{text}  ->  {fr.decode()}")
    if alignment:
        src = _tokens(out["source_tokens"].numpy()[0])
        tgt = _tokens(out["target_tokens"].numpy()[0])
        if not src or not tgt:
            print(f"\nNo alignment for {texts[0]!r}: no tokens.")
            return 0
        att = out["attention"].numpy()[0]
        print(f"\nAttention for {texts[0]!r} (weight x 10, rows French):")
        width = max(len(w) for w in src) + 1
        print(" " * 12 + "".join(w.rjust(width) for w in src))
        for i, word in enumerate(tgt):
            cells = "".join(
                str(min(9, int(att[i, j] * 10))).rjust(width)
                for j in range(len(src))
            )
            print(word[:11].ljust(12) + cells)
    return 0


def _translate(args):
    path = args.model and resolve_model(
        args.model, "--model", "translator", args
    )
    path = path or find_translator(args)
    if path is None:
        raise ValueError(
            GET_MODELS
            if models_dir(args) is None
            else f"No translator under {models_dir(args)}; pass --model, or "
            "install the shipped ones (`pip install keras-attn-models`)."
        )
    texts = read_texts(args)
    return _print_translations(
        path, texts, args.alignment, args.allow_unsafe_ops
    )


def _demo(args):
    from keras_attn import demo

    if args.epochs <= 0:
        raise ValueError(
            f"Expected a positive number. Received: --epochs={args.epochs}"
        )
    demo.run(epochs=args.epochs)
    return 0


def _explain(args):
    from keras_attn import explain

    if args.text is not None and args.file is not None:
        raise ValueError("Give the text or --file, not both.")
    if args.file is not None:
        text = "\n".join(read_text_file(args.file, "--file"))
    else:
        text = args.text
    if text is None or not text.strip():
        raise ValueError(f"Expected a non-empty text. Received: {text!r}")
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise ValueError(
            f"Expected a folder for the pictures. Received: --out="
            f"{args.out!r}, which is an existing file"
        )
    path = resolve_model(args.model, "model", "keras", args)
    if path.endswith(".tflite"):  # the edge file's own attention
        from keras_attn_runtime import LiteRTClassifier

        model = LiteRTClassifier(path)
        known = int((np.asarray(model.tokenizer([text])[0]) > 1).sum())
    else:
        model = load_classifier(path)
        known = known_words(model, [text])[0]
    if known == 0:
        raise ValueError(
            f"No known word in the text: nothing to explain. Received: "
            f"{_snippet(text)!r}"
        )
    explain.check_outputs(args.out, args.overwrite)
    result = _run_model(explain.attend, model, [text])[0]
    os.makedirs(args.out, exist_ok=True)
    html_path = explain.write_html(
        result, os.path.join(args.out, "attention.html")
    )
    png_path = explain.write_heatmap(
        result, os.path.join(args.out, "attention.png")
    )
    print(f"P(positive) = {result['probability']:.3f}")
    print(f"wrote {html_path}\nwrote {png_path}")
    return 0


def _export(args):
    from keras_attn import export

    if not (args.saved_model or args.tflite or args.onnx):
        raise ValueError(
            "Nothing to export: give --saved-model, --tflite and/or --onnx."
        )
    texts = None
    if args.calibration is not None:
        texts = read_text_file(args.calibration, "--calibration")
    names = {
        "quantize": "--quantize",
        "calibration_texts": "--calibration",
        "dynamic_length": "--dynamic-length",
        "saved_model": "--saved-model",
        "tflite": "--tflite",
        "onnx": "--onnx",
    }
    model_file = resolve_model(args.model, "model", "keras", args)
    if os.path.isdir(model_file):
        model_file = os.path.join(model_file, "model.keras")
    settings = dict(
        saved_model=args.saved_model,
        tflite=args.tflite,
        onnx=args.onnx,
        quantize=args.quantize,
        calibration_texts=texts,
        dynamic_length=args.dynamic_length,
        overwrite=args.overwrite,
        protect=[model_file],
        names=names,
    )
    # Check destinations and settings before the (slow) model load.
    export.check_text_export(**settings)
    model = load_classifier(model_file)
    written = export.export_text_model(model, **settings)
    if "saved_model" in written:
        print(f"wrote SavedModel {args.saved_model}")
    if "tflite" in written:
        size = os.path.getsize(args.tflite) / 2**20
        kind = {
            "none": "float32",
            "float16": "float16 weights",
            "dynamic": "dynamic-range: int8 weights, float activations",
            "int8": "full-integer int8 weights and activations",
        }[args.quantize]
        print(f"wrote LiteRT {args.tflite} ({kind}, {size:.2f} MiB)")
    if "onnx" in written:
        size = os.path.getsize(args.onnx) / 2**20
        print(f"wrote ONNX {args.onnx} (float32, token ids in, {size:.2f} MiB)")
    return 0


def _predict(args):
    score = _scorer(resolve_model(args.artifact, "artifact", "any", args), args)
    texts = iter_texts(args)
    while True:
        chunk = list(itertools.islice(texts, CHUNK))
        if not chunk:
            return 0
        probs, known = score(chunk)
        if probs.shape[0] != len(chunk):
            raise ValueError(
                "Expected one probability per text. Received: "
                f"{probs.shape[0]} for {len(chunk)} texts"
            )
        for text, p, n in zip(chunk, probs, known, strict=True):
            print(f"{_verdict(float(p), n)}\t{_snippet(text)}", flush=True)


def _scorer(path, args):
    """`score(texts) -> (probabilities, known-word counts)` for the
    artifact at `path`, loaded once."""
    if path.endswith((".tflite", ".onnx")):
        import keras_attn_runtime as litert_runtime

        if path.endswith(".tflite"):
            clf = litert_runtime.LiteRTClassifier(path, args.vocabulary)
            outputs = sorted(clf.runner.get_output_details())
            kind = "LiteRT"
        else:
            clf = litert_runtime.OnnxClassifier(path)
            outputs, kind = clf.outputs, "ONNX"
        if "probability" not in outputs:
            raise ValueError(
                f"Expected a {kind} classifier with a 'probability' output. "
                f"Received: {path!r} with outputs {outputs}"
            )

        def score(texts):
            ids = clf.tokenizer(texts)
            known = [int((np.asarray(row) > 1).sum()) for row in ids]
            return _probabilities(clf.predict_ids(ids)), known

        return score
    if os.path.isdir(path):
        import tensorflow as tf

        from keras_attn import export

        fn = saved_classifier(path, args.allow_unsafe_ops)

        def score(texts):
            result = _run_model(fn, tf.constant(texts))
            out = {k: v.numpy() for k, v in result.items()}
            if export.KNOWN_WORDS in out:  # written by keras_attn >= 0.3
                known = [int(n) for n in out[export.KNOWN_WORDS]]
            else:  # older exports: no attention at all means no known word
                att = out.get("attention")
                known = (
                    [1] * len(texts)
                    if att is None
                    else [int(np.abs(a).sum() > 0) for a in att]
                )
            return _probabilities(out), known

        return score
    model = load_classifier(path)

    def score(texts):
        out = _run_model(model.predict, np.array(texts, dtype=object), 256, 0)
        return _probabilities(out), known_words(model, texts)

    return score


def _probabilities(out):
    return np.ravel(np.asarray(out["probability"], "float32"))


def _align(args):
    """Alignment heatmap (source × target tokens) from a translator."""
    import tensorflow as tf

    _check_sentences([args.text])
    if os.path.isdir(args.out):
        raise ValueError(
            f"Expected a file for the picture. Received: --out={args.out!r}, "
            "which is a folder"
        )
    if os.path.isfile(args.out):
        with open(args.out, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                raise ValueError(
                    f"Refusing to replace a file that is not a PNG picture. "
                    f"Received: --out={args.out!r}"
                )
    fn = load_translator(
        resolve_model(args.model, "model", "translator", args),
        args.allow_unsafe_ops,
    )
    out = _run_model(fn, tf.constant([args.text]))
    _check_length(out, [args.text])
    src = [t.decode() for t in out["source_tokens"].numpy()[0] if t]
    tgt = [t.decode() for t in out["target_tokens"].numpy()[0] if t]
    if not src:
        raise ValueError(
            f"No tokens to align: the translator found none in {args.text!r}"
        )
    att = out["attention"].numpy()[0][: len(tgt), : len(src)]
    if not tgt:  # the model wrote nothing: say so on the picture
        tgt, att = ["(no output)"], np.zeros((1, len(src)))
    print(out["translation"].numpy()[0].decode())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(
        figsize=(max(5.0, 2.5 + 0.5 * len(src)), 1.8 + 0.4 * len(tgt)),
        layout="constrained",
    )
    image = ax.imshow(att, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(src)))
    ax.set_xticklabels(src, rotation=60, ha="right")
    ax.set_yticks(range(len(tgt)))
    ax.set_yticklabels(tgt)
    ax.set_xlabel("English (source)")
    ax.set_ylabel("French (output)")
    ax.set_title("Attention of each French word", fontsize=10)
    fig.colorbar(image, ax=ax, label="attention weight")
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


COMMANDS = {
    "classify": _classify,
    "demo": _demo,
    "explain": _explain,
    "export": _export,
    "translate": _translate,
    "align": _align,
    "predict": _predict,
}
