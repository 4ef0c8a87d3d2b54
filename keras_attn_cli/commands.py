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

from keras_attn_cli.inputs import (  # noqa: F401  (names tests reach here)
    CHUNK,
    MAX_LINE_BYTES,
    check_clause_lengths,
    check_sentences,
    iter_text_lines,
    iter_texts,
    read_text_file,
    read_texts,
    snippet,
)
from keras_attn_cli.models import (  # noqa: F401
    GET_MODELS,
    find_shipped_model,
    find_translator,
    interruptible,
    known_words,
    load_classifier,
    load_translator,
    models_dir,
    op_error_line,
    open_model,
    resolve_model,
    run_model,
    saved_classifier,
)
from keras_attn_cli.progress import Progress
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

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


def _verdict(p, known):
    if known == 0:
        return f"-\t{NO_WORD}"
    label = "positive" if p > 0.5 else "negative"
    return f"{p:.4f}\t{label}"


# ---------------------------------------------------------------- models


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
    results = run_model(explain.attend, model, texts)
    for result, n in zip(results, known, strict=True):
        print(
            f"[{_verdict(result['probability'], n)}] "
            f"{snippet(result['text'], 90)}"
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


def _check_length(out, texts, flag="text"):
    """A clear error when a translator read only the start of an input
    (its `source_truncated` output)."""
    if "source_truncated" not in out:
        return
    limit = out["attention"].shape[-1]
    if "source_length" in out:  # a translator that cuts long inputs
        limit = int(out["source_length"].numpy()[0])
    for text, cut in zip(texts, out["source_truncated"].numpy(), strict=True):
        if cut:
            raise ValueError(
                f"Expected at most {limit} words per sentence (source "
                "tokens: a subword translator counts word pieces; the "
                "translator reads no more). Received: "
                f"{flag}={snippet(text)!r}; "
                "split it into shorter sentences"
            )


# Sentences a SavedModel translator gets in one call from `translate`:
# the progress line moves between calls.
TRANSLATE_CHUNK = 64


def _print_grid(text, source, target, attention):
    """A translation's attention as a grid of digits (weight x 10)."""
    if not source or not target:
        print(f"\nNo alignment for {text!r}: no tokens.")
        return
    print(f"\nAttention for {text!r} (weight x 10, rows French):")
    width = max(len(w) for w in source) + 1
    print(" " * 12 + "".join(w.rjust(width) for w in source))
    for i, word in enumerate(target):
        cells = "".join(
            str(min(9, int(attention[i, j] * 10))).rjust(width)
            for j in range(len(source))
        )
        print(word[:11].ljust(12) + cells)


def _print_translations(path, texts, alignment=False, allow_unsafe=False):
    """Translate `texts` with the SavedModel translator at `path`; print
    the first one's alignment as a grid."""
    import tensorflow as tf

    fn = load_translator(path, allow_unsafe)
    translations, first = [], None
    with Progress("translating", len(texts)) as progress:
        for start in range(0, len(texts), TRANSLATE_CHUNK):
            chunk = texts[start : start + TRANSLATE_CHUNK]
            out = run_model(fn, tf.constant(chunk))
            _check_length(out, chunk)
            first = first or out
            translations += [t.decode() for t in out["translation"].numpy()]
            progress.update(start + len(chunk))
    print(f"Translator: {path}\n")
    for text, fr in zip(texts, translations, strict=True):
        print(f"{text}  ->  {fr}")
    if alignment:
        src = _tokens(first["source_tokens"].numpy()[0])
        tgt = _tokens(first["target_tokens"].numpy()[0])
        _print_grid(texts[0], src, tgt, first["attention"].numpy()[0])
    return 0


def _print_litert_translations(path, texts, alignment=False):
    """`_print_translations` for a LiteRT translator (`.tflite`)."""
    from keras_attn_runtime import LiteRTTranslator

    translator = LiteRTTranslator(path)
    check_clause_lengths(translator, texts)
    out = []
    with Progress("translating", len(texts)) as progress:
        for text in texts:
            out.append(interruptible(translator.translate, text))
            progress.update(len(out))
    print(f"Translator: {path}\n")
    for text, fr in zip(texts, out, strict=True):
        print(f"{text}  ->  {fr}")
    if alignment:
        ids, attention, words = translator.translate_ids(texts[0])
        target = [translator.target_vocab[i] for i in ids]
        _print_grid(texts[0], words, target, attention)
    return 0


def _translate(args):
    if args.stream:
        from keras_attn_cli.streaming import stream_translations

        return stream_translations(args)
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
    check_sentences(texts)
    if path.endswith(".tflite"):
        return _print_litert_translations(path, texts, args.alignment)
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
    path = resolve_model(args.model, "model", "explain", args)
    explain.pyplot()  # matplotlib, or an error before anything is written
    if path.endswith(".tflite"):  # the edge file's own attention
        artifact = open_model(path, args.accelerator, flag="model")
        model = getattr(artifact, "classifier", None)
        if model is None:
            raise ValueError(
                "Expected a LiteRT text classifier with an attention output. "
                f"Received: model={path!r}, a translator"
            )
        known = int((np.asarray(model.tokenizer([text])[0]) > 1).sum())
    else:
        model = load_classifier(path)
        known = known_words(model, [text])[0]
    if known == 0:
        raise ValueError(
            f"No known word in the text: nothing to explain. Received: "
            f"{snippet(text)!r}"
        )
    explain.check_outputs(args.out, args.overwrite)
    result = run_model(explain.attend, model, [text])[0]
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
    # A progress bar where a person waits (the int8 calibration: a minute
    # for the shipped BiLSTM), none when the output goes to a file or pipe.
    written = export.export_text_model(
        model, **settings, verbose=sys.stdout.isatty()
    )
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
            print(f"{_verdict(float(p), n)}\t{snippet(text)}", flush=True)


def _scorer(path, args):
    """`score(texts) -> (probabilities, known-word counts)` for the
    artifact at `path` (`open_model`), loaded once."""
    if path.endswith((".tflite", ".onnx")):
        artifact = open_model(
            path,
            accelerator=args.accelerator,
            vocabulary_path=args.vocabulary,
            flag="artifact",
        )
        return _runtime_scorer(artifact)
    if os.path.isdir(path):
        artifact = open_model(
            path, allow_unsafe=args.allow_unsafe_ops, flag="artifact"
        )
        return _saved_model_scorer(artifact)
    model = load_classifier(path)

    def score(texts):
        out = run_model(model.predict, np.array(texts, dtype=object), 256, 0)
        return _probabilities(out), known_words(model, texts)

    return score


def _runtime_scorer(artifact):
    """`_scorer` for a LiteRT or ONNX classifier: known words are the
    ids past padding and the unknown token."""
    kind = {"litert": "LiteRT", "onnx": "ONNX"}[artifact.kind]
    clf = getattr(artifact, "classifier", None)
    default = artifact.signatures.get(DEFAULT_SIGNATURE)
    outputs = [] if clf is None or default is None else sorted(default.outputs)
    if "probability" not in outputs:
        what = "a translator" if clf is None else f"outputs {outputs}"
        raise ValueError(
            f"Expected a {kind} classifier with a 'probability' output. "
            f"Received: {artifact.path!r} with {what}"
        )

    def score(texts):
        ids = clf.tokenizer(texts)
        known = [int((np.asarray(row) > 1).sum()) for row in ids]
        return _probabilities(clf.predict_ids(ids)), known

    return score


def _saved_model_scorer(artifact):
    """`_scorer` for a text-classifier SavedModel (`serving_default`)."""
    import tensorflow as tf

    from keras_attn import export

    fn = saved_classifier(artifact.loaded, artifact.path)

    def score(texts):
        result = run_model(fn, tf.constant(texts))
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


def _probabilities(out):
    return np.ravel(np.asarray(out["probability"], "float32"))


def _align(args):
    """Alignment heatmap (source × target tokens) from a translator."""
    from keras_attn import explain

    check_sentences([args.text])
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
    explain.pyplot()  # matplotlib, or an error before anything is printed
    path = resolve_model(args.model, "model", "translator", args)
    if path.endswith(".tflite"):
        french, src, tgt, att = _litert_alignment(path, args.text)
    else:
        french, src, tgt, att = _saved_model_alignment(
            path, args.text, args.allow_unsafe_ops
        )
    if not src:
        raise ValueError(
            f"No tokens to align: the translator found none in {args.text!r}"
        )
    explain.write_alignment_heatmap(src, tgt, att, args.out)
    print(french)
    print(f"wrote {args.out}")
    return 0


def _saved_model_alignment(path, text, allow_unsafe):
    """`(translation, source tokens, target tokens, attention)` of `text`
    from the SavedModel translator at `path`."""
    import tensorflow as tf

    out = run_model(load_translator(path, allow_unsafe), tf.constant([text]))
    _check_length(out, [text])
    src = _tokens(out["source_tokens"].numpy()[0])
    tgt = _tokens(out["target_tokens"].numpy()[0])
    att = out["attention"].numpy()[0][: len(tgt), : len(src)]
    return out["translation"].numpy()[0].decode(), src, tgt, att


def _litert_alignment(path, text):
    """`_saved_model_alignment` for a LiteRT translator (one piece: the
    alignment of a text cut into clauses would be several pictures)."""
    from keras_attn_runtime import LiteRTTranslator

    translator = LiteRTTranslator(path)
    check_clause_lengths(translator, [text])
    ids, att, src = translator.translate_ids(text)
    tgt = [translator.target_vocab[i] for i in ids]
    att = np.zeros((0, len(src))) if att is None else att
    return translator.translate(text), src, tgt, att


def _serve(args):
    from keras_attn_cli import SERVE_FLAGS, http_routes, models, serve

    for flag, kind, _, _ in SERVE_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        off = flag == "--grpc-port" and value == 0  # 0 turns gRPC off
        if kind is not str and not value > 0 and not off:
            raise ValueError(
                f"Expected {flag} to be positive. Received: {flag}={value}"
            )
    for flag in ("--port", "--grpc-port"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value > 65535:
            raise ValueError(
                f"Expected {flag} to be at most 65535. Received: {flag}={value}"
            )
    if args.grpc_port == args.port:
        raise ValueError(
            "Expected --grpc-port to differ from --port. Received: "
            f"--grpc-port={args.grpc_port}"
        )
    root = models.models_dir(args)
    values = args.model
    if not values:
        if root is None:
            raise ValueError(models.GET_MODELS)
        values = [
            name
            for name in sorted(os.listdir(root))
            if os.path.isdir(os.path.join(root, name))
        ]
    artifacts = [
        models.served_versions(v, root, args.model_versions) for v in values
    ]
    if args.model_name is not None:
        if len(artifacts) != 1:
            raise ValueError(
                "Expected one model with --model-name. Received: "
                f"--model-name={args.model_name!r} for {len(artifacts)} models"
            )
        models.check_model_name(args.model_name)
        artifacts = [(args.model_name, artifacts[0][1])]
    limits = {key: getattr(args, key) for key in serve.LIMITS}
    batching = {key: getattr(args, key) for key in serve.BATCHING}
    return serve.serve(
        artifacts,
        args.host,
        args.port,
        args.allow_unsafe_ops,
        limits,
        batching,
        log=lambda line: print(f"keras-attn serve: {line}", flush=True),
        accelerator=args.accelerator,
        log_level=args.log_level,
        access={
            "token": http_routes.read_token(args.auth_token_file),
            "model_management": args.enable_model_management,
            "docs": args.enable_docs,
            "grpc_port": args.grpc_port,
        },
    )


COMMANDS = {
    "serve": _serve,
    "classify": _classify,
    "demo": _demo,
    "explain": _explain,
    "export": _export,
    "translate": _translate,
    "align": _align,
    "predict": _predict,
}
