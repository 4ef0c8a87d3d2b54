"""The `keras-attn` command line.

keras-attn                      classify built-in reviews with the shipped
                                IMDB model and show what it attended to
                                (runs the generated-task demo when no
                                trained model is found)
keras-attn demo                 train a tiny model on a generated task
                                and, with a shipped translator, translate
                                a few sentences and print one alignment
keras-attn explain MODEL TEXT   write attention.html / attention.png
keras-attn translate TEXT...    English to French with the shipped model
"""

import argparse
import os
import sys

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
PREFERRED_MODELS = ("imdb_ensemble", "imdb_ssa", "imdb_mhp")
SAMPLE_SENTENCES = [
    "I am tired.",
    "Where is the station?",
    "She is reading a book.",
    "We have to leave now.",
]


def models_dir():
    """`$KERAS_ATTN_MODELS`, else `saved_models/` beside the package."""
    env = os.environ.get("KERAS_ATTN_MODELS")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "saved_models")


def find_shipped_model():
    root = models_dir()
    for name in PREFERRED_MODELS:
        path = os.path.join(root, name, "model.keras")
        if os.path.isfile(path):
            return path
    return None


def _classify(args):
    from keras_attn import explain

    path = args.model or find_shipped_model()
    if path is None:
        print(
            f"No trained model under {models_dir()}; running the "
            "generated-task demo instead.\n"
        )
        return _demo(argparse.Namespace(epochs=8))
    model = explain.load_text_model(path)
    texts = args.text or SAMPLE_REVIEWS
    print(f"Model: {path}\n")
    for result in explain.attend(model, texts):
        p = result["probability"]
        label = "positive" if p > 0.5 else "negative"
        words = ", ".join(w for w, _ in explain.top_tokens(result, 6))
        print(f"[{label} {p:.3f}] {result['text'][:90]}...")
        print(f"    attention picked: {words}\n")
    translator = find_translator()
    if translator and not args.text:
        _print_translations(translator, SAMPLE_SENTENCES, alignment=True)
    return 0


def find_translator():
    path = os.path.join(models_dir(), "translation_en_fr", "saved_model")
    found = os.path.isfile(os.path.join(path, "saved_model.pb"))
    return path if found else None


def _load_translator(path):
    import tensorflow as tf

    if os.path.isdir(os.path.join(path, "saved_model")):
        path = os.path.join(path, "saved_model")
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ValueError(f"No SavedModel translator. Received: path={path!r}")
    return tf.saved_model.load(path).signatures["translate"]


def _tokens(row):
    return [t.decode() for t in row if t]


def _print_translations(path, texts, alignment=False):
    """Translate `texts`; print the first one's alignment as a grid."""
    import tensorflow as tf

    out = _load_translator(path)(tf.constant(texts))
    print(f"Translator: {path}\n")
    for text, fr in zip(texts, out["translation"].numpy(), strict=True):
        print(f"{text}  ->  {fr.decode()}")
    if alignment:
        src = _tokens(out["source_tokens"].numpy()[0])
        tgt = _tokens(out["target_tokens"].numpy()[0])
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
    path = args.model or find_translator()
    if path is None:
        raise ValueError(
            f"No translator under {models_dir()}; train one with "
            "examples/translation.py --out saved_models."
        )
    return _print_translations(path, args.text, alignment=args.alignment)


def _demo(args):
    from keras_attn import demo

    demo.run(epochs=args.epochs)
    return 0


def _explain(args):
    from keras_attn import explain

    result, html_path, png_path = explain.explain(
        args.model, args.text, args.out
    )
    print(f"P(positive) = {result['probability']:.3f}")
    print(f"wrote {html_path}\nwrote {png_path}")
    return 0


def _read_lines(path):
    if not os.path.isfile(path):
        raise ValueError(f"No such file. Received: path={path!r}")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def _export(args):
    from keras_attn import explain, export

    if not (args.saved_model or args.tflite):
        raise ValueError("Nothing to do: give --saved-model and/or --tflite.")
    model = explain.load_text_model(args.model)
    if args.saved_model:
        export.export_saved_model(model, args.saved_model)
        print(f"wrote SavedModel {args.saved_model}")
    if args.tflite:
        texts = _read_lines(args.calibration) if args.calibration else None
        export.export_text_tflite(
            model,
            args.tflite,
            quantize=args.quantize,
            calibration_texts=texts,
            dynamic_length=args.dynamic_length,
        )
        size = os.path.getsize(args.tflite) / 2**20
        print(f"wrote LiteRT {args.tflite} ({args.quantize}, {size:.2f} MiB)")
    return 0


def _predict(args):
    import numpy as np

    path = args.artifact
    texts = args.text
    if path.endswith(".tflite"):
        from keras_attn.litert_runtime import LiteRTClassifier

        out = LiteRTClassifier(path, args.vocabulary).predict(texts)
    elif os.path.isdir(path) and os.path.isfile(
        os.path.join(path, "saved_model.pb")
    ):
        import tensorflow as tf

        served = tf.saved_model.load(path)
        fn = served.signatures["serving_default"]
        out = {k: v.numpy() for k, v in fn(tf.constant(texts)).items()}
    else:
        from keras_attn import explain

        model = explain.load_text_model(path)
        out = model.predict(np.array(texts, dtype=object), verbose=0)
    probs = np.ravel(out["probability"])
    for text, p in zip(texts, probs, strict=True):
        label = "positive" if p > 0.5 else "negative"
        print(f"{p:.4f}\t{label}\t{text[:80]}")
    return 0


def _align(args):
    """Alignment heatmap (source × target tokens) from a translator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import tensorflow as tf

    path = args.model
    out = _load_translator(path)(tf.constant([args.text]))
    src = [t.decode() for t in out["source_tokens"].numpy()[0] if t]
    tgt = [t.decode() for t in out["target_tokens"].numpy()[0] if t]
    att = out["attention"].numpy()[0][: len(tgt), : len(src)]
    print(out["translation"].numpy()[0].decode())
    fig, ax = plt.subplots(figsize=(1 + 0.5 * len(src), 1 + 0.4 * len(tgt)))
    ax.imshow(att, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(src)))
    ax.set_xticklabels(src, rotation=60, ha="right")
    ax.set_yticks(range(len(tgt)))
    ax.set_yticklabels(tgt)
    ax.set_xlabel("English")
    ax.set_ylabel("French")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description="keras_attn: attention layers, examples and export.",
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("classify", help="classify reviews (the default)")
    p.add_argument("text", nargs="*", help="reviews (default: samples)")
    p.add_argument("--model", default=None, help="a .keras text model")
    p.set_defaults(func=_classify)
    p = sub.add_parser("demo", help="train a tiny model on a generated task")
    p.add_argument("--epochs", type=int, default=8)
    p.set_defaults(func=_demo)
    p = sub.add_parser("explain", help="attention HTML + PNG for one text")
    p.add_argument("model", help="a .keras text model or its folder")
    p.add_argument("text")
    p.add_argument("--out", default="explain_out")
    p.set_defaults(func=_explain)
    p = sub.add_parser("export", help="SavedModel and/or LiteRT export")
    p.add_argument("model", help="a .keras raw-text model or its folder")
    p.add_argument("--saved-model", default=None, help="target folder")
    p.add_argument("--tflite", default=None, help="target .tflite file")
    p.add_argument(
        "--quantize",
        default="none",
        choices=["none", "float16", "dynamic", "int8"],
    )
    p.add_argument(
        "--calibration", default=None, help="texts, one per line (int8)"
    )
    p.add_argument(
        "--dynamic-length",
        action="store_true",
        help="LiteRT input of variable length: each text runs at its own "
        "length (recurrent models get faster; not with int8)",
    )
    p.set_defaults(func=_export)
    p = sub.add_parser("translate", help="English to French (shipped model)")
    p.add_argument("text", nargs="+")
    p.add_argument("--model", default=None, help="translator folder")
    p.add_argument(
        "--alignment", action="store_true", help="print the first alignment"
    )
    p.set_defaults(func=_translate)
    p = sub.add_parser("align", help="translation alignment heatmap (PNG)")
    p.add_argument("model", help="translator folder or its saved_model")
    p.add_argument("text")
    p.add_argument("--out", default="alignment.png")
    p.set_defaults(func=_align)
    p = sub.add_parser("predict", help="run a .keras, SavedModel or .tflite")
    p.add_argument("artifact")
    p.add_argument("text", nargs="+")
    p.add_argument("--vocabulary", default=None, help="for .tflite")
    p.set_defaults(func=_predict)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv or ["classify"])
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as err:
        print(f"keras-attn: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
