"""`keras-attn explain`: a text classifier's attention as an HTML page
and a PNG heatmap (`keras_attn.explain` draws them)."""

import os

import numpy as np

from keras_attn_cli.finding import (
    resolve_model,
)
from keras_attn_cli.inputs import (
    read_text_file,
    snippet,
)
from keras_attn_cli.loading import (
    known_words,
    load_classifier,
    open_model,
    run_model,
)


def explain(args):
    from keras_attn import explain as drawing

    if args.text is not None and args.file is not None:
        raise ValueError("Give the text or --file, not both.")
    if args.file is not None:
        text = "\n".join(read_text_file(args.file, "--file"))
        where = f"--file={args.file!r}, holding"
    else:
        text, where = args.text, "text="
    if text is None or not text.strip():
        raise ValueError(
            f"Expected a non-empty text. Received: {where}{text!r}"
        )
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise ValueError(
            f"Expected a folder for the pictures. Received: --out="
            f"{args.out!r}, which is an existing file"
        )
    path = resolve_model(args.model, "model", "explain", args)
    drawing.pyplot()  # matplotlib, or an error before anything is written
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
    drawing.check_outputs(args.out, args.overwrite)
    result = run_model(drawing.attend, model, [text])[0]
    os.makedirs(args.out, exist_ok=True)
    html_path = drawing.write_html(
        result, os.path.join(args.out, "attention.html")
    )
    png_path = drawing.write_heatmap(
        result, os.path.join(args.out, "attention.png")
    )
    print(f"P(positive) = {result['probability']:.3f}")
    print(f"wrote {html_path}\nwrote {png_path}")
    flat = flat_map(result["attention"])
    if flat is not None:
        print(
            f"note: the map is flat (every word {flat:.3f} in every hop): it "
            "says nothing about this text. A full-integer file stores its "
            "attention on an int8 grid calibrated on long reviews, which "
            "clips a short text's larger weights, and a text of one chunk "
            "gives every hop the same map (docs/edge.md, 'Reading the edge "
            "model's attention'). The float model (imdb_ssa, or a .keras "
            "file) draws an informative map."
        )
    return 0


def flat_map(attention):
    """The one weight of a map `(hops, tokens)` in which every hop gives
    every token with weight the same weight, else `None` (a map with
    something to say)."""
    weights = np.asarray(attention, "float32")
    kept = weights[weights > 0]
    if kept.size < 2 or not np.allclose(kept, kept[0], rtol=0, atol=1e-6):
        return None
    return float(kept[0])
