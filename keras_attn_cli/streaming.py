"""`keras-attn translate --stream`: a streaming LiteRT translator
(`keras_attn.translation.export_streaming_translator`) prints each sentence's
words as its search settles them, with NumPy and LiteRT only."""

import os

from keras_attn_cli.finding import (
    model_folders,
    models_dir,
    named_path,
)
from keras_attn_cli.inputs import (
    check_clause_lengths,
    check_sentences,
    read_texts,
)
from keras_attn_runtime.artifact import TRANSLATOR_FOLDER

# The streaming file's name in a translator folder.
STREAMING_FILE = TRANSLATOR_FOLDER["streaming"]
LITERT_FILE = TRANSLATOR_FOLDER["litert"]


def streams(path):
    """Whether the LiteRT file at `path` has streaming signatures: a
    streaming file, or a one-call file that also streams."""
    from keras_attn_runtime.artifact import (
        load_verified,
        metadata,
        stream_layout,
    )

    try:
        entries = metadata(load_verified(path)[1])
    except ValueError:
        return False
    return stream_layout(entries) is not None


def _streaming_file(folder):
    """The folder's `streaming.tflite`, else its `model.tflite` if that
    streams, else `None`."""
    path = os.path.join(folder, STREAMING_FILE)
    if os.path.isfile(path):
        return path
    path = os.path.join(folder, LITERT_FILE)
    return path if os.path.isfile(path) and streams(path) else None


def streaming_translator(args):
    """The streaming file `--model` names (the file, or a folder holding
    `streaming.tflite` or a `model.tflite` that streams), else the first
    translator folder under the models folder that holds one."""
    if args.model:
        path = named_path(args.model, models_dir(args))
        if os.path.isdir(path):
            path = _streaming_file(path) or os.path.join(path, STREAMING_FILE)
        if os.path.isfile(path):
            return path
        raise ValueError(
            "Expected a streaming LiteRT translator (a .tflite file, or a "
            f"folder holding {STREAMING_FILE} or a {LITERT_FILE} that "
            f"streams) with --stream. Received: --model={args.model!r}"
        )
    for folder in model_folders(args):
        path = _streaming_file(folder)
        if path is not None:
            return path
    raise ValueError(
        f"No streaming translator ({STREAMING_FILE}, or a {LITERT_FILE} "
        "that streams) under the models folder: write one with "
        "keras_attn.translation.export_streaming_translator and pass it "
        "with --model"
    )


def stream_translations(args):
    from keras_attn_cli.loading import open_litert_translator

    if args.alignment:
        raise ValueError(
            "Pass --alignment or --stream, not both (a stream prints words, "
            "not the attention)"
        )
    path = streaming_translator(args)
    texts = read_texts(args)
    check_sentences(texts)
    translator = open_litert_translator(path)
    if translator.decoder is None:
        raise ValueError(
            "Expected a streaming LiteRT translator with --stream. Received: "
            f"--model={path!r}, which translates in one call per sentence"
        )
    check_clause_lengths(translator, texts)  # before any half line
    print(f"Translator: {path} (streaming)\n")
    for text in texts:
        print(f"{text}  ->  ", end="", flush=True)
        for part in translator.stream(text):
            print(part, end="", flush=True)
        print()
    return 0
