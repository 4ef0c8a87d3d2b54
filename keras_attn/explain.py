"""See the attention of a text model: HTML highlights and a PNG heatmap.

Works with any saved model that takes raw strings, holds a
`TextVectorization` layer named `vectorizer`, and returns a dict with
`probability` and `attention` `(B, hops, T)` (the IMDB example's models).
"""

import contextlib
import html
import os
import tempfile

import numpy as np

from keras_attn_runtime import ASCII_LOWER


def find_vectorizer(model):
    """The model's one `TextVectorization` layer (at any depth)."""
    import keras

    found = [
        layer
        for layer in _walk(model)
        if isinstance(layer, keras.layers.TextVectorization)
    ]
    if len(found) != 1:
        raise ValueError(
            "Expected a model with one TextVectorization layer. Received: "
            f"model={model.name!r} with {len(found)}"
        )
    return found[0]


def _walk(model):
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from _walk(layer)


def attend(model, texts):
    """Probabilities, per-review tokens and attention `(hops, n_tokens)`.

    `model`: a raw-text Keras model, or a classifier of the edge runtime
    (`keras_attn_runtime.LiteRTClassifier`, a `.tflite` file: its
    attention output, int8 in a full-integer file, dequantized)."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if hasattr(model, "predict_ids"):
        return _attend_runtime(model, texts)
    out = model.predict(np.array(texts, dtype=object), verbose=0)
    if not isinstance(out, dict) or "attention" not in out:
        raise ValueError(
            "Expected a model whose outputs include 'attention'. Received "
            f"outputs: {sorted(out) if isinstance(out, dict) else type(out)}"
        )
    vectorizer = find_vectorizer(model)
    vocab = vectorizer.get_vocabulary()
    ids = np.asarray(vectorizer(np.array(texts, dtype=object)))
    results = []
    for i in range(len(texts)):
        n = int(np.count_nonzero(ids[i]))
        tokens = [vocab[t] for t in ids[i][:n]]
        results.append(
            {
                "text": texts[i],
                "probability": float(np.ravel(out["probability"][i])[0]),
                "tokens": tokens,
                "attention": np.asarray(out["attention"][i])[:, :n],
            }
        )
    return results


def _attend_runtime(classifier, texts):
    from keras_attn_runtime.text import tokens

    out = classifier.predict(texts)
    if "attention" not in out:
        raise ValueError(
            "Expected a model whose outputs include 'attention'. Received "
            f"outputs: {sorted(out)}"
        )
    tokenizer = classifier.tokenizer
    limit = tokenizer.length or tokenizer.max_tokens
    results = []
    for i, text in enumerate(texts):
        words = tokens(text, limit)
        words = [w if w in tokenizer.index else "[UNK]" for w in words]
        results.append(
            {
                "text": text,
                "probability": float(np.ravel(out["probability"][i])[0]),
                "tokens": words,
                "attention": np.asarray(out["attention"][i])[:, : len(words)],
            }
        )
    return results


def top_tokens(result, k=8):
    """The `k` tokens with the most attention summed over hops."""
    total = result["attention"].sum(0)
    order = np.argsort(-total)
    seen, picked = set(), []
    for j in order:
        if result["tokens"][j] not in seen:
            seen.add(result["tokens"][j])
            picked.append((result["tokens"][j], float(total[j])))
        if len(picked) == k:
            break
    return picked


def token_spans(text, tokens):
    """`(start, end)` of each token in the original `text`, or `None`.

    Standardization only lowercases ASCII letters and turns characters into
    spaces, so each token is a run of the ASCII-lowercased text; tokens are
    found left to right.
    """
    lower, cursor, spans = text.translate(ASCII_LOWER), 0, []
    for token in tokens:
        at = lower.find(token, cursor) if token != "[UNK]" else -1
        if at < 0:
            spans.append(None)
            continue
        spans.append((at, at + len(token)))
        cursor = at + len(token)
    return spans


def _highlight(text, tokens, weights, rgb):
    """The original text (its casing and punctuation) with each attended
    token's background set by its weight relative to the largest."""
    top = max(float(np.max(weights)), 1e-9) if len(weights) else 1.0
    parts, cursor = [], 0
    for span, token, w in zip(
        token_spans(text, tokens), tokens, weights, strict=True
    ):
        alpha = float(w) / top
        ink = "#fff" if alpha > 0.55 else "#111"
        style = f"background:rgba({rgb},{alpha:.3f});color:{ink}"
        if span is None:
            word = html.escape(token)
        else:
            parts.append(html.escape(text[cursor : span[0]]))
            word = html.escape(text[span[0] : span[1]])
            cursor = span[1]
        parts.append(f'<span title="{w:.4f}" style="{style}">{word}</span>')
    parts.append(html.escape(text[cursor:]))
    return "".join(parts)


OUTPUTS = ("attention.html", "attention.png")
# Written into every page and picture of ours, so that a later run can tell
# its own earlier output (replaced) from a user's file (kept).
GENERATOR = "keras-attn explain"


def is_our_output(path):
    """Whether `path` is a regular file that `write_html`/`write_heatmap`
    wrote (it names `GENERATOR` in its first 4 KiB)."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        return GENERATOR.encode() in f.read(4096)


def check_outputs(folder, overwrite=False, names=OUTPUTS):
    """Raise a `ValueError` naming `--out` unless each of `names` in
    `folder` is absent, an earlier output of ours, or `overwrite`."""
    for name in names:
        path = os.path.join(folder, name)
        if os.path.lexists(path) and not overwrite and not is_our_output(path):
            raise ValueError(
                f"{path!r} exists and is not an earlier keras-attn explain "
                "output; pass --overwrite to replace it. Received: "
                f"--out={folder!r}"
            )


@contextlib.contextmanager
def _replacing(path):
    """A temporary file beside `path`, moved over it by one `os.replace`
    once written (removed on failure)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".explain-", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_html(result, path):
    """The text highlighted by attention: summed over hops, then per hop."""
    a = result["attention"]
    text, tokens = result["text"], result["tokens"]
    legend = (
        "<p class='legend'>Background: the attention a word received, "
        "relative to the most attended word of the same row (darkest = "
        "most; hover a word for its weight). Attention sums to 1 over the "
        "words of each hop.</p>"
    )
    parts = [
        "<!doctype html><meta charset='utf-8'><title>attention</title>",
        f"<meta name='generator' content='{GENERATOR}'>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;"
        "color:#111;background:#fff}p{line-height:1.9}"
        "span{padding:1px 2px;border-radius:3px}"
        ".legend{color:#444;font-size:90%}</style>",
        f"<h2>P(positive) = {result['probability']:.3f}</h2>",
        legend,
        "<h3>Summed over hops</h3>",
        f"<p>{_highlight(text, tokens, a.sum(0), '200,30,30')}</p>",
    ]
    for h in range(a.shape[0]):
        parts.append(f"<h4>Hop {h + 1}</h4>")
        parts.append(f"<p>{_highlight(text, tokens, a[h], '30,80,200')}</p>")
    with _replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path


def write_heatmap(result, path, tokens_per_row=60):
    """PNG heatmap of `A` (hops × tokens), wrapped `tokens_per_row` tokens
    to a panel so that every token of a long text is shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, tokens = result["attention"], result["tokens"]
    hops, n = a.shape[0], max(len(tokens), 1)
    rows = -(-n // tokens_per_row)
    width = max(6, 0.2 * min(n, tokens_per_row) + 2)
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(width, rows * (0.3 * hops + 1.6) + 0.8),
        squeeze=False,
        layout="constrained",
    )
    top = max(float(a.max()) if a.size else 0.0, 1e-9)
    image = None
    for r, ax in enumerate(axes[:, 0]):
        lo, hi = r * tokens_per_row, min(n, (r + 1) * tokens_per_row)
        image = ax.imshow(
            a[:, lo:hi], aspect="auto", cmap="Reds", vmin=0, vmax=top
        )
        if rows > 1:  # the same cell width in every panel
            ax.set_xlim(-0.5, tokens_per_row - 0.5)
        ax.set_xticks(range(hi - lo))
        ax.set_xticklabels(tokens[lo:hi], rotation=90, fontsize=7)
        ax.set_yticks(range(hops))
        ax.set_yticklabels([f"{i + 1}" for i in range(hops)], fontsize=7)
        ax.set_ylabel("hop", fontsize=8)
        ax.set_xlabel(f"tokens {lo + 1}-{hi} of {len(tokens)}", fontsize=8)
    axes[0, 0].set_title(
        f"Attention per hop over the tokens; P(positive) = "
        f"{result['probability']:.3f}",
        fontsize=9,
    )
    fig.colorbar(
        image, ax=axes[:, 0].tolist(), label="attention weight", shrink=0.8
    )
    with _replacing(path) as tmp:
        fig.savefig(
            tmp,
            format="png",
            dpi=120,
            bbox_inches="tight",
            metadata={"Software": GENERATOR},
        )
    plt.close(fig)
    return path


def explain(model_path, text, out_dir, overwrite=False):
    """Write `attention.html` and `attention.png` for `text` in `out_dir`."""
    check_outputs(out_dir, overwrite)
    model = load_text_model(model_path)
    result = attend(model, text)[0]
    os.makedirs(out_dir, exist_ok=True)
    return (
        result,
        write_html(result, os.path.join(out_dir, "attention.html")),
        write_heatmap(result, os.path.join(out_dir, "attention.png")),
    )


def load_text_model(path):
    """Load a `.keras` file (or a folder holding `model.keras`)."""
    import keras

    import keras_attn  # noqa: F401  (registers the layers)

    if os.path.isdir(path):
        path = os.path.join(path, "model.keras")
    if not os.path.isfile(path):
        raise ValueError(f"No such model file. Received: path={path!r}")
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "Raw-text .keras models run on the TensorFlow backend (their "
            "TextVectorization layer is TensorFlow's): set "
            "KERAS_BACKEND=tensorflow, or use the model's .tflite or .onnx "
            f"export. Received: KERAS_BACKEND={keras.backend.backend()} for "
            f"{path!r}"
        )
    try:
        return keras.models.load_model(path)
    except Exception as err:
        raise ValueError(
            f"Could not load a Keras model from {path!r}: {err}"
        ) from err
