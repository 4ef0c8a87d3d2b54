"""`keras-attn translate` and `align`: a translator (its SavedModel or its
LiteRT file) on sentences, its words, its alignment as a grid or a
picture."""

import os

import numpy as np

from keras_attn_cli.finding import (
    GET_MODELS,
    find_translator,
    models_dir,
    resolve_model,
)
from keras_attn_cli.inputs import (
    check_clause_lengths,
    check_sentences,
    read_texts,
)
from keras_attn_cli.loading import (
    interruptible,
    load_translator,
    run_model,
)
from keras_attn_cli.progress import Progress

SAMPLE_SENTENCES = [
    "I am tired.",
    "Where is the station?",
    "She is reading a book.",
    "We have to leave now.",
]


def _tokens(row):
    return [t.decode() for t in row if t]


def _check_length(out, texts):
    """A clear error when a translator read only the start of an input
    (`keras_attn_runtime.signature.check_read_whole`, the verdict every
    door gives)."""
    from keras_attn_runtime.signature import check_read_whole

    check_read_whole({k: np.asarray(v) for k, v in out.items()}, texts)


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


def print_translations(path, texts, alignment=False, allow_unsafe=False):
    """Translate `texts` with the SavedModel translator at `path`; print
    the first one's alignment as a grid."""
    import tensorflow as tf

    fn = load_translator(path, allow_unsafe)
    first = None
    with Progress("translating", len(texts)) as progress:
        for start in range(0, len(texts), TRANSLATE_CHUNK):
            chunk = texts[start : start + TRANSLATE_CHUNK]
            out = run_model(fn, tf.constant(chunk))
            _check_length(out, chunk)
            if first is None:
                first = out
                progress.emit(f"Translator: {path}\n")
            french = [t.decode() for t in out["translation"].numpy()]
            _emit(progress, chunk, french)
            progress.update(start + len(chunk))
    if alignment:
        src = _tokens(first["source_tokens"].numpy()[0])
        tgt = _tokens(first["target_tokens"].numpy()[0])
        _print_grid(texts[0], src, tgt, first["attention"].numpy()[0])
    return 0


def _print_litert_translations(path, texts, alignment=False):
    """`print_translations` for a LiteRT translator (`.tflite`): the
    file's one answer (`LiteRTTranslator.answer`, as `serve` gives it)."""
    from keras_attn_cli.loading import open_litert_translator

    translator = open_litert_translator(path)
    check_clause_lengths(translator, texts)
    with Progress("translating", len(texts)) as progress:
        progress.emit(f"Translator: {path}\n")
        for done, text in enumerate(texts, 1):
            french = interruptible(translator.answer, text)
            _emit(progress, [text], [french])
            progress.update(done)
    if alignment:
        ids, attention, words = translator.answer_ids(texts[0])
        target = [translator.target_vocab[i] for i in ids]
        _print_grid(texts[0], words, target, attention)
    return 0


def _print_generated(path, texts):
    """`print_translations` for a decoder-only translator: the file the
    opener reads for `path` (a folder: its `.litertlm` bundle, which
    `keras-attn serve` answers with too; `model.keras` when named, or
    when the folder has no bundle), greedy."""
    from keras_attn_cli.loading import open_model

    generator = open_model(path, flag="--model")
    for text in texts:
        _check_window(generator, text)
    with Progress("translating", len(texts)) as progress:
        progress.emit(f"Translator: {generator.path} ({generator.kind})\n")
        for start in range(0, len(texts), TRANSLATE_CHUNK):
            chunk = texts[start : start + TRANSLATE_CHUNK]
            done = interruptible(generator.completions, chunk)
            _emit(progress, chunk, done)
            progress.update(start + len(chunk))
    return 0


def _check_window(generator, text):
    """A decoder-only model's refusal of a text past its window, saying
    what translates long texts: the default translator, which cuts them
    into clauses."""
    from keras_attn_runtime.signature import PromptTooLong

    try:
        generator.check_prompt(text)
    except PromptTooLong as err:
        raise ValueError(
            f"{err}. A decoder-only model reads one window; `keras-attn "
            "translate` without --model (the seq2seq translator) cuts a "
            "long text into clauses."
        ) from None


def _decoder_only(path):
    """Whether `path` is a decoder-only translator: its folder, or its
    `model.keras` or `.litertlm` file."""
    from keras_attn.models.text_generator import is_text_generator

    if os.path.isdir(path):
        return is_text_generator(path)
    folder = os.path.dirname(os.path.abspath(path))
    return path.endswith((".keras", ".litertlm")) and is_text_generator(folder)


def _emit(progress, texts, translations):
    """Each text and its translation, printed as soon as it is done."""
    for text, french in zip(texts, translations, strict=True):
        progress.emit(f"{text}  ->  {french}")


MODEL_SUFFIXES = (".tflite", ".keras", ".litertlm", ".onnx")


def model_first(args):
    """`translate MODEL TEXT ...`, as `explain` and `serve` name a model:
    without `--model`, a first text that is a shipped model's name, or an
    existing path with a folder separator or a model file's suffix, is
    the model (a sentence is none of these)."""
    if args.model is not None or not args.text:
        return
    first, root = args.text[0], models_dir(args)
    shipped = (
        root is not None
        and os.sep not in first
        and os.path.isdir(os.path.join(root, first))
    )
    path = os.path.exists(first) and (
        os.sep in first or first.endswith(MODEL_SUFFIXES)
    )
    if shipped or path:
        args.model, args.text = first, args.text[1:]


def translate(args):
    model_first(args)
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
            "install the shipped ones (`pip install ./models` in a checkout, "
            "docs/install.md)."
        )
    texts = read_texts(args)
    check_sentences(texts)
    if _decoder_only(path):
        if args.alignment:
            raise ValueError(
                "A decoder-only translator attends to its own prompt, "
                "not to a source: it has no alignment. Received: "
                f"--alignment with --model={args.model!r}"
            )
        return _print_generated(path, texts)
    if path.endswith(".tflite"):
        return _print_litert_translations(path, texts, args.alignment)
    return print_translations(
        path, texts, args.alignment, args.allow_unsafe_ops
    )


def align(args):
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
    from keras_attn_cli.loading import open_litert_translator

    translator = open_litert_translator(path)
    check_clause_lengths(translator, [text])
    ids, att, src = translator.answer_ids(text)
    tgt = [translator.target_vocab[i] for i in ids]
    att = np.zeros((0, len(src))) if att is None else att
    return translator.answer(text), src, tgt, att
