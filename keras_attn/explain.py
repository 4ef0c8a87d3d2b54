"""See the attention of a text model: HTML highlights and a PNG heatmap.

Works with any saved model that takes raw strings, holds a
`TextVectorization` layer named `vectorizer`, and returns a dict with
`probability` and `attention` `(B, hops, T)` (the IMDB example's models).
"""

import html
import os

import numpy as np


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
    """Probabilities, per-review tokens and attention `(hops, n_tokens)`."""
    texts = [texts] if isinstance(texts, str) else list(texts)
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


def _row(tokens, weights, color):
    top = max(float(np.max(weights)), 1e-9)
    spans = []
    for tok, w in zip(tokens, weights, strict=True):
        alpha = float(w) / top
        spans.append(
            f'<span title="{w:.4f}" style="background:rgba({color},'
            f'{alpha:.3f})">{html.escape(tok)}</span>'
        )
    return " ".join(spans)


def write_html(result, path):
    """Tokens highlighted by attention: summed over hops, then each hop."""
    a = result["attention"]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>attention</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "p{line-height:1.9}span{padding:1px 2px;border-radius:3px}</style>",
        f"<h2>P(positive) = {result['probability']:.3f}</h2>",
        "<h3>Summed over hops</h3>",
        f"<p>{_row(result['tokens'], a.sum(0), '220,40,40')}</p>",
    ]
    for h in range(a.shape[0]):
        parts.append(f"<h4>Hop {h + 1}</h4>")
        parts.append(f"<p>{_row(result['tokens'], a[h], '40,90,220')}</p>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path


def write_heatmap(result, path, max_tokens=80):
    """PNG heatmap of `A` (hops × tokens), first `max_tokens` tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = result["attention"][:, :max_tokens]
    tokens = result["tokens"][:max_tokens]
    fig, ax = plt.subplots(
        figsize=(max(6, 0.22 * len(tokens)), 0.35 * a.shape[0] + 1.6)
    )
    ax.imshow(a, aspect="auto", cmap="Reds")
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels(tokens, rotation=90, fontsize=7)
    ax.set_yticks(range(a.shape[0]))
    ax.set_yticklabels([f"hop {i + 1}" for i in range(a.shape[0])], fontsize=7)
    ax.set_title(f"P(positive) = {result['probability']:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def explain(model_path, text, out_dir):
    """Write `attention.html` and `attention.png` for `text` in `out_dir`."""
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
    try:
        return keras.models.load_model(path)
    except Exception as err:
        raise ValueError(
            f"Could not load a Keras model from {path!r}: {err}"
        ) from err
