"""Explanations drawn: a text's words shaded by a map (HTML), the
attention per hop (PNG) and a translation's alignment (PNG)."""

import contextlib
import html
import os
import re
import tempfile

import numpy as np

from keras_attn_runtime import ASCII_LOWER

_TAG = re.compile(r"<[^>]*>")
_BREAK = re.compile(r"<\s*br\s*/?\s*>", re.I)
_MARKUP = re.compile(r"</?[A-Za-z!][^>]*>")


def token_spans(text, tokens):
    """`(start, end)` of each token in the original `text`, or `None`.

    Standardization only lowercases ASCII letters and turns characters
    (and `<...>` tags) into spaces, so each token is a run of the
    ASCII-lowercased text outside tags; tokens are found left to right.
    `[UNK]` (a vocabulary's name, not a run of the text) has no span.
    """
    lower = _TAG.sub(lambda m: " " * len(m.group()), text)
    lower, cursor, spans = lower.translate(ASCII_LOWER), 0, []
    for token in tokens:
        at = lower.find(token, cursor) if token and token != "[UNK]" else -1
        if at < 0:
            spans.append(None)
            continue
        spans.append((at, at + len(token)))
        cursor = at + len(token)
    return spans


def words_as_written(result):
    """The text cut into what a reader sees, each piece with its tokens.

    A list of `(kind, string, token_indices)`: `"word"` (a run of
    characters without spaces or tags, as written, with the indices of
    the tokens the model read from it: `clichéd` holds both `clich` and
    `d`), `"space"` (as written), `"break"` (a `<br>` tag). Other tags
    are markup and are dropped.
    """
    text = result["text"]
    spans = token_spans(text, result.get("words") or result["tokens"])
    starts = {}
    for j, span in enumerate(spans):
        if span is not None:
            starts.setdefault(span[0], []).append(j)
    pieces = []
    for match in re.finditer(r"<[^>]*>|\s+|[^\s<]+|<", text):
        piece, a, b = match.group(), match.start(), match.end()
        if _BREAK.fullmatch(piece):
            pieces.append(("break", "", []))
        elif _MARKUP.fullmatch(piece):
            continue
        elif piece.startswith("<") and len(piece) > 1:  # `a < b > c`
            for sub in re.finditer(r"\s+|\S+", piece):
                kind = "space" if sub.group().isspace() else "word"
                pieces.append((kind, sub.group(), []))
        elif piece.isspace():
            pieces.append(("space", piece, []))
        else:
            held = [j for p in range(a, b) for j in starts.get(p, [])]
            pieces.append(("word", piece, held))
    return pieces


def _shade(value, top):
    """White to dark blue, linear in `value / top` (the one scale)."""
    t = 0.0 if top <= 0 else min(max(value / top, 0.0), 1.0)
    lo, hi = (255, 255, 255), (8, 48, 107)
    rgb = tuple(round(a + (b - a) * t) for a, b in zip(lo, hi, strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb), ("#fff" if t > 0.5 else "#111")


def _paragraph(pieces, weights, known, top, shade=None, sign=""):
    """The words as written, each shaded by its weight (`shade`: the
    white-to-blue scale by default) with the weight as its title."""
    shade = shade or _shade
    parts = []
    for kind, piece, held in pieces:
        if kind == "break":
            parts.append("<br>")
        elif kind == "space":
            parts.append(html.escape(piece))
        elif not held:  # punctuation, or past the model's length
            parts.append(f"<span class='unread'>{html.escape(piece)}</span>")
        else:
            w = float(sum(weights[j] for j in held))
            unknown = not any(known[j] for j in held)
            bg, ink = shade(w, top)
            cls = "w unknown" if unknown else "w"
            note = " (unknown word)" if unknown else ""
            parts.append(
                f"<span class='{cls}' title='{w:{sign}.4f}{note}' "
                f"style='background:{bg};color:{ink}'>"
                f"{html.escape(piece)}</span>"
            )
    return "".join(parts)


def _row_weights(pieces, weights):
    return [
        float(sum(weights[j] for j in held))
        for kind, _, held in pieces
        if kind == "word" and held
    ]


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


_STYLE = (
    "body{font-family:system-ui,sans-serif;font-size:18px;max-width:46em;"
    "margin:1.5em auto;padding:0 1em;color:#111;background:#fff}"
    "p.text{line-height:2.1;overflow-wrap:anywhere}"
    "span.w{padding:2px 1px;border-radius:3px}"
    "span.unknown{outline:2px dashed #d95f02;outline-offset:-1px;"
    "font-style:italic}"
    "span.unread{color:#666}"
    ".legend{display:flex;flex-wrap:wrap;align-items:center;gap:.4em 1.2em;"
    "font-size:16px;color:#333}"
    ".bar{display:inline-block;width:240px;height:1em;vertical-align:middle;"
    "border:1px solid #999;background:linear-gradient(to right,#ffffff,"
    "#08306b)}"
    ".ticks{display:flex;justify-content:space-between;width:240px;"
    "font-size:14px}"
    "details{margin-top:1em}summary{cursor:pointer;font-weight:600}"
)


def write_html(result, path):
    """The text as written, each word shaded by the attention it got.

    One colour scale for every row (legend with its values): the mean over
    hops first (sums to 1 over the words read), then each hop. A word the
    model read as several tokens (`clichéd`: `clich` + `d`) gets their
    sum; an unknown word is outlined; text the model did not read
    (punctuation, words past its length) is grey.
    """
    a = np.asarray(result["attention"], dtype="float64")
    known = np.asarray(result.get("known", [True] * a.shape[1]), dtype=bool)
    pieces = words_as_written(result)
    mean = a.mean(0)
    top = max(_row_weights(pieces, mean) or [0.0])
    clipped = any(max(_row_weights(pieces, row) or [0.0]) > top for row in a)
    read = sum(1 for kind, _, held in pieces if kind == "word" and held)
    words = sum(1 for kind, _, _ in pieces if kind == "word")
    ticks = f"{top / 2:.3f}", ("≥ " if clipped else "") + f"{top:.3f}"
    parts = [
        "<!doctype html><html lang='en'><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width'>",
        f"<meta name='generator' content='{GENERATOR}'>",
        "<title>Attention over a text</title>",
        f"<style>{_STYLE}</style>",
        f"<h1>P(positive) = {result['probability']:.3f}</h1>",
        "<div class='legend' id='legend'>"
        "<span>attention a word received:</span>"
        "<span><span class='bar'></span><span class='ticks'><span>0</span>"
        f"<span>{ticks[0]}</span><span>{ticks[1]}</span></span></span>"
        "<span><span class='w unknown'>word</span> unknown to the "
        "model</span><span><span class='unread'>grey</span>: not read "
        "(punctuation, or past the model's length)</span></div>",
        f"<p class='note'>The model read {read} of the {words} words. "
        "Hover a word for its weight.</p>",
        "<h2>All hops (mean)</h2>",
        f"<p class='text' id='mean'>{_paragraph(pieces, mean, known, top)}</p>",
    ]
    parts += _hop_details(pieces, a, known, top, "Hop")
    return _write(parts, path)


def _hop_details(pieces, hops, known, top, heading):
    """Each hop's map on the one scale `top`, folded under `heading N`."""
    parts = []
    for h, row in enumerate(hops):
        parts.append(f"<details><summary>{heading} {h + 1}</summary>")
        parts.append(
            f"<p class='text'>{_paragraph(pieces, row, known, top)}</p>"
            "</details>"
        )
    return parts


def _write(parts, path):
    """The page's lines, written atomically to `path`."""
    with _replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")
    return path


def _shade_signed(value, top):
    """Blue for support of the predicted class, red against it, the
    strength linear in `|value| / top`."""
    t = 0.0 if top <= 0 else min(abs(value) / top, 1.0)
    hi = (8, 48, 107) if value >= 0 else (165, 15, 21)
    rgb = tuple(round(255 + (b - 255) * t) for b in hi)
    return "#{:02x}{:02x}{:02x}".format(*rgb), ("#fff" if t > 0.5 else "#111")


def _signed_paragraph(pieces, scores, known):
    top = max([abs(w) for w in _row_weights(pieces, scores)] or [0.0])
    return _paragraph(pieces, scores, known, top, _shade_signed, "+")


_PAGE_STYLE = _STYLE.replace("max-width:46em", "max-width:96em") + (
    ".maps{display:grid;grid-template-columns:repeat(auto-fit,"
    "minmax(22em,1fr));gap:1em}"
    ".map{border:1px solid #ccc;border-radius:6px;padding:0 .8em}"
    ".map h2{font-size:18px;margin:.6em 0 .2em}"
    ".trust{font-size:15px;color:#333;margin:.2em 0}"
    ".signed{display:inline-block;width:240px;height:1em;"
    "vertical-align:middle;border:1px solid #999;background:"
    "linear-gradient(to right,#a50f15,#ffffff,#08306b)}"
)


def write_page(result, maps, path):
    """The text once per map, side by side, each with what erasing its
    top words does to the probability.

    `result`: the text as `attribute` read it (`text`, `words`, `known`,
    `probability`; `hops` for each hop's attention). `maps`: per method,
    `method`, `scores` (one a word), `note` (its cost, or why it is the
    default) and `erased` `(count, probability after)`: the top words
    erased. Each map shades on its own scale (blue: for the predicted
    class; red: against it); the hops follow, folded."""
    pieces = words_as_written(result)
    n = len(result["words"])
    known = np.asarray(result.get("known", [True] * n), dtype=bool)
    p = result["probability"]
    label = "positive" if p >= 0.5 else "negative"
    read = sum(1 for kind, _, held in pieces if kind == "word" and held)
    words = sum(1 for kind, _, _ in pieces if kind == "word")
    parts = [
        "<!doctype html><html lang='en'><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width'>",
        f"<meta name='generator' content='{GENERATOR}'>",
        "<title>Which words the model used</title>",
        f"<style>{_PAGE_STYLE}</style>",
        f"<h1>P(positive) = {p:.3f}: {label}</h1>",
        "<div class='legend' id='legend'><span>each map on its own "
        "scale:</span><span><span class='signed'></span></span><span>red: "
        f"against {label}, blue: for it</span><span><span class='w "
        "unknown'>word</span> unknown to the model</span><span><span "
        "class='unread'>grey</span>: not read</span></div>",
        f"<p class='note'>The model read {read} of the {words} words. "
        "Under each map: the probability once the words it ranks highest "
        "are erased. The further it moves, the more the map shows what "
        "the model used. Hover a word for its score.</p>",
        "<div class='maps' id='maps'>",
    ]
    for m in maps:
        count, after = m["erased"]
        drop = (p - after) if p >= 0.5 else (after - p)
        parts += [
            f"<section class='map' id='map-{html.escape(m['method'])}'>",
            f"<h2>{html.escape(m['method'])}</h2>",
            f"<p class='trust'>{html.escape(m.get('note', ''))}</p>",
            f"<p class='trust'>erase its top {count} word"
            f"{'' if count == 1 else 's'}: P(positive) {p:.3f} → "
            f"{after:.3f} (the {label} class drops {drop:+.3f})</p>",
            f"<p class='text'>"
            f"{_signed_paragraph(pieces, np.asarray(m['scores']), known)}"
            "</p></section>",
        ]
    parts.append("</div>")
    hops = result.get("hops")
    if hops is not None:
        a = np.asarray(hops, "float64")
        top = max(max(_row_weights(pieces, row) or [0.0]) for row in a)
        parts += _hop_details(pieces, a, known, top, "Attention, hop")
    return _write(parts, path)


def heatmap_labels(result):
    """Each token's label in the heatmap: its text as written (`MOVIE`,
    `clich`), `?` appended where the model does not know it."""
    text = result["text"]
    names = result.get("words") or result["tokens"]
    known = result.get("known", [True] * len(names))
    labels = []
    for span, name, k in zip(
        token_spans(text, names), names, known, strict=True
    ):
        label = text[span[0] : span[1]] if span else name
        labels.append(label if k else label + " ?")
    return labels


def write_heatmap(result, path, tokens_per_column=40):
    """PNG heatmap of `A`, tokens down (labels as written, horizontal,
    10 pt), hops across, wrapped into columns of `tokens_per_column`
    tokens so that every token of a long text is shown."""
    plt = pyplot()
    a = np.asarray(result["attention"])
    labels = heatmap_labels(result)
    hops, n = a.shape[0], max(len(labels), 1)
    cols = -(-n // tokens_per_column)
    rows = min(n, tokens_per_column)
    fig, axes = plt.subplots(
        1,
        cols,
        figsize=(cols * (1.4 + 0.3 * hops) + 1.2, 0.24 * rows + 1.6),
        squeeze=False,
        layout="constrained",
    )
    top = max(float(a.max()) if a.size else 0.0, 1e-9)
    image = None
    for c, ax in enumerate(axes[0]):
        lo, hi = c * tokens_per_column, min(n, (c + 1) * tokens_per_column)
        image = ax.imshow(
            a[:, lo:hi].T, aspect="auto", cmap="Blues", vmin=0, vmax=top
        )
        if cols > 1:  # the same cell height in every column
            ax.set_ylim(tokens_per_column - 0.5, -0.5)
        ax.set_yticks(range(hi - lo))
        ax.set_yticklabels(labels[lo:hi], fontsize=10)
        for tick, label in zip(
            ax.get_yticklabels(), labels[lo:hi], strict=True
        ):
            if label.endswith(" ?"):
                tick.set_color("#d95f02")
        ax.set_xticks(range(hops))
        ax.set_xticklabels([f"{i + 1}" for i in range(hops)], fontsize=10)
        ax.set_xlabel("hop", fontsize=10)
        ax.set_title(f"tokens {lo + 1}-{hi} of {len(labels)}", fontsize=10)
    fig.suptitle(
        f"Attention per hop; P(positive) = {result['probability']:.3f}"
        "   (orange '?': unknown word)",
        fontsize=11,
    )
    fig.colorbar(image, ax=axes[0].tolist(), label="attention weight")
    with _replacing(path) as tmp:
        fig.savefig(
            tmp,
            format="png",
            dpi=110,
            bbox_inches="tight",
            metadata={"Software": GENERATOR},
        )
    plt.close(fig)
    return path


def pyplot():
    """Matplotlib's `pyplot` on its file backend (`Agg`); a
    `ModuleNotFoundError` naming `matplotlib` before anything is written
    when it is not installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_alignment_heatmap(source, target, attention, path):
    """PNG heatmap of a translation's attention: `attention` `(len(target),
    len(source))`, French words down, English across; `target` empty (the
    model wrote nothing) is said on the picture. Written atomically."""
    plt = pyplot()
    attention = np.asarray(attention, "float32")
    if not target:
        target, attention = ["(no output)"], np.zeros((1, len(source)))
    fig, ax = plt.subplots(
        figsize=(max(5.0, 2.5 + 0.5 * len(source)), 1.8 + 0.4 * len(target)),
        layout="constrained",
    )
    image = ax.imshow(attention, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(source)))
    ax.set_xticklabels(source, rotation=60, ha="right")
    ax.set_yticks(range(len(target)))
    ax.set_yticklabels(target)
    ax.set_xlabel("English (source)")
    ax.set_ylabel("French (output)")
    ax.set_title("Attention of each French word", fontsize=10)
    fig.colorbar(image, ax=ax, label="attention weight")
    with _replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return path
