"""`keras-attn explain`: which words a text classifier used, as maps side
by side on an HTML page (each with what erasing its top words does) and
the attention per hop as a PNG heatmap (`keras_attn.explain` computes
and draws them)."""

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
    load_classifier,
    open_model,
    run_model,
)

# The maps drawn beside the one asked for, where the file can give them:
# the attention (what the model shows), the norm-based attention, a
# gradient method, and leave-one-out occlusion.
COMPARED = ("attention", "norm", "integrated_gradients", "occlusion")
TRUST_FRACTION = 0.10


def _reader(path, accelerator):
    from keras_attn import explain as explaining
    from keras_attn_runtime.opener import is_saved_model

    if path.endswith(".keras"):
        return explaining.KerasReader(load_classifier(path))
    if is_saved_model(path):
        from keras_attn.loading.opener import load_saved_model

        return explaining.SavedModelReader(load_saved_model(path), path=path)
    artifact = open_model(path, accelerator, flag="model")
    model = getattr(artifact, "classifier", None)
    if model is None:
        raise ValueError(
            "Expected a text classifier. Received: "
            f"model={path!r}, a {artifact.kind} translator"
        )
    from keras_attn_runtime.attribution import as_reader

    return as_reader(model)


def _text(args):
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
    return text


def explain(args):
    from keras_attn import explain as explaining

    text = _text(args)
    method = args.method or explaining.DEFAULT_METHOD
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise ValueError(
            f"Expected a folder for the pictures. Received: --out="
            f"{args.out!r}, which is an existing file"
        )
    path = resolve_model(args.model, "model", "explain", args)
    explaining.pyplot()  # matplotlib, or an error before anything is written
    reader = _reader(path, args.accelerator)
    can = explaining.available(reader)
    if method not in can:
        raise ValueError(
            f"Expected a method this file can run: {can}. Received: "
            f"--method={method!r} for model={path!r}"
        )
    (item,) = reader.read([text])
    if not item.known.any():
        raise ValueError(
            f"No known word in the text: nothing to explain. Received: "
            f"{snippet(text)!r}"
        )
    explaining.check_outputs(args.out, args.overwrite)
    methods = [method] + [m for m in COMPARED if m in can and m != method]
    maps = run_model(_maps, reader, item, methods, method)
    result = maps[0]["result"]
    if "attention" in can:  # drawn among the maps: its hops
        (hops,) = [
            m["result"]["hops"] for m in maps if m["method"] == "attention"
        ]
        result = {**result, "hops": hops, "attention": hops}
    os.makedirs(args.out, exist_ok=True)
    written = [
        explaining.write_page(
            result, maps, os.path.join(args.out, "attention.html")
        )
    ]
    if "attention" in result:
        written.append(
            explaining.write_heatmap(
                {**result, "tokens": result["words"]},
                os.path.join(args.out, "attention.png"),
            )
        )
    _say(result, maps)
    for name in written:
        print(f"wrote {name}")
    return 0


def _maps(reader, item, methods, default):
    from keras_attn import explain as explaining
    from keras_attn_runtime.attribution import METHODS, attribute_items

    maps = []
    for method in methods:
        (result,) = attribute_items(reader, [item], method)
        trust = explaining.erasure(
            reader,
            item,
            result["scores"],
            fractions=(TRUST_FRACTION,),
            base=result["probability"],
        )
        count = max(1, int(round(TRUST_FRACTION * len(item.ids))))
        rows = result["passes"]
        note = f"cost: {rows} row{'' if rows == 1 else 's'} run "
        note += f"({METHODS[method].cost})"
        if method == default:
            note = "the map asked for; " + note
        maps.append(
            {
                "method": method,
                "scores": result["scores"],
                "result": result,
                "note": note,
                "erased": (count, float(trust["erased"][0])),
            }
        )
    return maps


def _say(result, maps):
    p = result["probability"]
    main = maps[0]
    order = np.argsort(-main["scores"], kind="stable")[:6]
    top = ", ".join(result["words"][j] for j in order)
    print(f"P(positive) = {p:.3f}")
    print(f"{main['method']}: the words that mattered most: {top}")
    print(
        f"erasing each map's top {TRUST_FRACTION:.0%} of words moves "
        "P(positive) to (further from the answer: the map is more "
        "faithful):"
    )
    for m in maps:
        count, after = m["erased"]
        words = "word" if count == 1 else "words"
        print(f"  {m['method']:22s} {after:.3f}  ({count} {words} erased)")
    attention = next((m for m in maps if m["method"] == "attention"), None)
    flat = None if attention is None else flat_map(result["hops"])
    if flat is not None:
        print(
            f"note: the attention map is flat (every word {flat:.3f} in every "
            "hop): it says nothing about this text. A full-integer file "
            "stores its attention on an int8 grid calibrated on long "
            "reviews, which clips a short text's larger weights, and a text "
            "of one chunk gives every hop the same map (docs/edge.md, "
            "'Reading the edge model's attention'). The other maps do not "
            "read the attention."
        )


def flat_map(attention):
    """The one weight of a map `(hops, tokens)` in which every hop gives
    every token with weight the same weight, else `None` (a map with
    something to say)."""
    weights = np.asarray(attention, "float32")
    kept = weights[weights > 0]
    if kept.size < 2 or not np.allclose(kept, kept[0], rtol=0, atol=1e-6):
        return None
    return float(kept[0])
