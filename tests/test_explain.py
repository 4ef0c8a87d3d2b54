"""Attention pictures: every token shown, original casing, a legend."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from keras_attn import explain
from tests.paths import ROOT


def result(n_tokens, hops=3, text=None):
    rng = np.random.default_rng(0)
    tokens = [f"w{i}" for i in range(n_tokens)]
    a = rng.random((hops, n_tokens))
    return {
        "text": text if text is not None else " ".join(tokens),
        "probability": 0.8,
        "tokens": tokens,
        "attention": a / a.sum(-1, keepdims=True),
    }


def test_token_spans_find_the_original_casing_and_skip_unknown():
    text = "This MOVIE, <b>b</b>don't MISS it!? [x]"
    tokens = ["this", "movie", "b", "don't", "miss", "it", "!", "?", "[UNK]"]
    spans = explain.token_spans(text, tokens)
    words = [text[s:e] for s, e in spans[:8]]
    assert words == ["This", "MOVIE", "b", "don't", "MISS", "it", "!", "?"]
    assert spans[2][0] == text.index("b</b>")  # not the tag's own `b`
    assert spans[8] is None


REVIEW = (
    "I expected a clichéd, by-the-numbers THRILLER.<br /><br />The lead "
    "(Zorblatt) was  superb; 8/10 <i>truly</i>, and a < b > c."
)


def review_result(hops=2, weights=None):
    """A result as `attend` gives it for REVIEW, `zorblatt` unknown."""
    from keras_attn_runtime.text import tokens

    words = list(tokens(REVIEW))
    n = len(words)
    a = np.full((hops, n), 1.0 / n) if weights is None else weights
    return {
        "text": REVIEW,
        "probability": 0.8,
        "tokens": [w if w != "zorblatt" else "[UNK]" for w in words],
        "words": words,
        "known": np.array([w != "zorblatt" for w in words]),
        "attention": a,
    }


def test_the_text_is_shown_as_written():
    r = review_result()
    pieces = explain.words_as_written(r)
    shown = "".join(p if k != "break" else "\n" for k, p, _ in pieces)
    assert shown == (
        "I expected a clichéd, by-the-numbers THRILLER.\n\nThe lead "
        "(Zorblatt) was  superb; 8/10 truly, and a < b > c."
    )
    held = {p: [r["words"][j] for j in h] for k, p, h in pieces if h}
    assert held["clichéd,"] == ["clich", "d"]  # one word, both tokens
    assert held["by-the-numbers"] == ["by", "the", "numbers"]
    assert held["(Zorblatt)"] == ["zorblatt"]
    assert held["8/10"] == ["8", "10"]
    # every token the model read lies in exactly one word
    every = sorted(j for _, _, h in pieces for j in h)
    assert every == list(range(len(r["words"])))


def test_html_shades_words_on_one_scale_and_marks_unknown(tmp_path):
    n = len(review_result()["words"])
    a = np.zeros((2, n))
    j = review_result()["words"].index("superb")
    a[0, j], a[1, j] = 1.0, 0.5  # mean: 0.75 on `superb`
    a[1, 0] = 0.5  # hop 2 only: `I`
    page_path = explain.write_html(
        review_result(weights=a), tmp_path / "a.html"
    )
    page = open(page_path, encoding="utf-8").read()
    assert "[UNK]" not in page and "&lt;b&gt;" not in page
    assert "(Zorblatt)</span>" in page and "class='w unknown'" in page
    # the darkest colour of the scale on the most attended word, white ink
    assert "style='background:#08306b;color:#fff'>superb;</span>" in page
    # one scale for every row: hop 1's 1.0 saturates at the mean's top
    assert page.count("background:#08306b") == 2  # the mean and hop 1
    # hop 2's 0.5 is 2/3 of the way from white to the scale's end
    mid = "".join(f"{round(255 + (e - 255) * 2 / 3):02x}" for e in (8, 48, 107))
    assert page.count(f"background:#{mid}") == 2  # hop 2's `I` and `superb`
    assert "<span>≥ 0.750</span>" in page
    assert "<i>" not in page and page.count("<br>") == 2 * 3


def test_heatmap_labels_are_the_words_as_written(tmp_path, monkeypatch):
    import matplotlib.axes

    seen = []
    real = matplotlib.axes.Axes.set_yticklabels

    def spy(self, labels, *args, **kwargs):
        seen.extend(labels)
        assert kwargs.get("fontsize", 0) >= 10 and not kwargs.get("rotation")
        return real(self, labels, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_yticklabels", spy)
    r = review_result()
    path = explain.write_heatmap(r, str(tmp_path / "a.png"))
    assert seen[:4] == ["I", "expected", "a", "clich"]
    assert "THRILLER" in seen and "Zorblatt ?" in seen
    assert len(seen) == len(r["words"])
    assert open(path, "rb").read(4) == b"\x89PNG"
    long = result(130)
    seen.clear()
    explain.write_heatmap(long, str(tmp_path / "b.png"))
    assert seen == long["tokens"]  # 130 tokens over four columns, none cut


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(page, png, width=1000, height=900):
    """A headless Chromium screenshot of the local file `page`."""
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         f"--user-data-dir={os.path.dirname(png)}/profile",
         f"--window-size={width},{height}", f"--screenshot={png}",
         "file://" + os.path.abspath(page)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    from PIL import Image

    return np.asarray(Image.open(png).convert("RGB")).astype(int)


def _boxes(image, rgb, tol=6):
    """The boxes (height, width, slice) of the connected regions of colour
    `rgb` in `image`, largest first."""
    from scipy import ndimage

    hit = np.all(np.abs(image - np.array(rgb)) <= tol, axis=-1)
    labels, _ = ndimage.label(hit)
    found = ndimage.find_objects(labels)
    boxes = [(s[0].stop - s[0].start, s[1].stop - s[1].start, s) for s in found]
    return sorted(boxes, key=lambda b: -b[0] * b[1])


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium (.ci/run installs it)"
)
def test_the_page_as_a_browser_draws_it(tmp_path):
    n = len(review_result()["words"])
    a = np.zeros((2, n))
    a[:, review_result()["words"].index("superb")] = 1.0
    page = explain.write_html(review_result(weights=a), tmp_path / "a.html")
    image = screenshot(page, str(tmp_path / "shot.png"))
    # the most attended word: a dark box tall enough for 18 px text,
    # with white letters inside it
    height, width, where = _boxes(image, (8, 48, 107))[0]
    assert 20 <= height <= 40 and width > 40
    inside = image[where]
    assert (np.abs(inside - 255).max(-1) < 60).sum() > 20  # white ink
    # dashed orange outlines: the unknown word's and the legend's sample
    dashes = _boxes(image, (217, 95, 2), tol=40)
    assert len(dashes) >= 12 and sum(h * w for h, w, _ in dashes) >= 100
    # the legend's colour scale: one row going from white to dark blue
    # through many shades, left to right
    rows = [y for y in range(image.shape[0]) if _gradient(image[y])]
    assert rows, "no colour scale drawn"
    # nothing drawn past the page's column (no overflow to the right)
    assert image[:, 950:].min() >= 250


def _gradient(row):
    """Whether `row` holds a run of 150+ pixels whose blue-scale shades
    darken monotonically from near white to near the scale's end."""
    lum = row.sum(-1)
    run = 1
    for x in range(1, len(lum)):
        blueish = row[x, 2] >= row[x, 0]
        if blueish and lum[x] <= lum[x - 1] and lum[x - 1] - lum[x] < 12:
            run += 1
            if run >= 150 and lum[x] < 300 and lum[x - run + 1] > 700:
                return True
        else:
            run = 1
    return False


EDGE = os.path.join(ROOT, "saved_models", "imdb_edge", "model_full_int8.tflite")


@pytest.mark.skipif(not os.path.isfile(EDGE), reason="no shipped edge model")
def test_the_int8_edge_file_explains_itself(tmp_path):
    from keras_attn_runtime import LiteRTClassifier

    text = "A wonderful film with brilliant acting, though the ending was weak."
    clf = LiteRTClassifier(EDGE)
    (result,) = explain.attend(clf, [text])
    assert result["tokens"][:3] == ["a", "wonderful", "film"]
    assert result["words"] == result["tokens"] and all(result["known"])
    weights = result["attention"]
    assert weights.shape == (8, len(result["tokens"]))
    np.testing.assert_allclose(weights.sum(1), 1.0, atol=0.05)  # int8 steps
    assert result["probability"] == pytest.approx(
        float(clf.predict([text])["probability"][0, 0])
    )
    # The most attended token is one of the review's three verdict words
    # (the file trained with a bound on the attention spreads it: its
    # float model ranks "weak" first and "wonderful" below the 5th).
    top = [w for w, _ in explain.top_tokens(result, 1)]
    assert top[0] in ("wonderful", "brilliant", "weak"), top
    import keras_attn_cli

    out = tmp_path / "pictures"
    assert keras_attn_cli.main(["explain", EDGE, text, "--out", str(out)]) == 0
    html = (out / "attention.html").read_text(encoding="utf-8")
    assert "wonderful" in html and (out / "attention.png").stat().st_size > 0


@pytest.mark.skipif(not os.path.isfile(EDGE), reason="no shipped edge model")
def test_a_flat_edge_map_is_said_to_be_flat_and_why(tmp_path, capsys):
    """On a short text the full-integer file's attention is flat (its
    int8 attention output clips the larger weights, and one chunk gives
    every hop the same map): `explain` says so beside the default map,
    which does not read the attention; an informative map gets no note."""
    import keras_attn_cli
    from keras_attn_cli.commands.explaining import flat_map

    assert flat_map(np.array([[0.2, 0.2, 0.0], [0.2, 0.2, 0.0]])) == (
        pytest.approx(0.2)
    )
    assert flat_map(np.array([[0.2, 0.3, 0.0], [0.2, 0.2, 0.0]])) is None
    assert flat_map(np.array([[1.0, 0.0]])) is None  # one word: nothing
    for text, flat in (
        ("a great film", True),
        (
            "A wonderful film with brilliant acting, though the ending "
            "was weak.",
            False,
        ),
    ):
        out = tmp_path / str(flat)
        assert (
            keras_attn_cli.main(["explain", EDGE, text, "--out", str(out)]) == 0
        )
        said = capsys.readouterr().out
        assert ("the attention map is flat" in said) == flat, said
        # The map explain draws first (the default method's) is not.
        default = explain.DEFAULT_METHOD
        assert f"{default}: the words that mattered most: " in said
        page = (out / "attention.html").read_text(encoding="utf-8")
        assert f"id='map-{default}'" in page and "id='map-attention'" in page


@pytest.mark.skipif(not os.path.isfile(EDGE), reason="no shipped edge model")
def test_explain_draws_each_map_with_what_erasing_its_top_words_does(
    tmp_path, capsys
):
    import keras_attn_cli
    from keras_attn_runtime import LiteRTClassifier
    from keras_attn_runtime.attribution import attribute, top_positions

    text = (
        "A dull plot and weak dialogue, but the acting is wonderful and the "
        "music superb; I loved the ending."
    )
    out = tmp_path / "maps"
    args = ["explain", EDGE, text, "--out", str(out), "--method", "shapley"]
    assert keras_attn_cli.main(args) == 0
    said = capsys.readouterr().out
    page = (out / "attention.html").read_text(encoding="utf-8")
    order = [page.index(f"id='map-{m}'") for m in ("shapley", "attention")]
    assert order == sorted(order) and "id='map-occlusion'" in page
    # The probability printed for each map is the file's own answer once
    # that map's top 10% of words are erased.
    clf = LiteRTClassifier(EDGE)
    for method in ("shapley", "attention", "occlusion"):
        (r,) = attribute(clf, text, method)
        ids = np.asarray(clf.tokenizer([text])[0][: len(r["words"])])
        kept = np.delete(ids, top_positions(r["scores"], 0.10))
        row = np.zeros((1, clf.tokenizer.length), "int32")
        row[0, : len(kept)] = kept
        p = float(clf.predict_ids(row)["probability"][0, 0])
        line = next(x for x in said.splitlines() if x.split()[:1] == [method])
        assert float(line.split()[1]) == pytest.approx(p, abs=5e-4), line
        assert f"{p:.3f}" in page
    code = keras_attn_cli.main(
        ["explain", EDGE, text, "--out", str(out), "--method", "norm"]
    )
    assert code != 0
    assert "--method='norm'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium (.ci/run installs it)"
)
def test_the_maps_stand_side_by_side_in_a_browser(tmp_path):
    r = review_result()
    n = len(r["words"])
    first, second = np.zeros(n), np.zeros(n)
    first[r["words"].index("superb")] = 1.0
    second[0] = -1.0  # against the class: red
    second[r["words"].index("superb")] = 0.5
    maps = [
        {"method": m, "scores": s, "note": "", "erased": (1, 0.4)}
        for m, s in (("occlusion", first), ("attention", second))
    ]
    page = explain.write_page(
        {**r, "known": np.ones(n, bool)}, maps, tmp_path / "p.html"
    )
    image = screenshot(page, str(tmp_path / "shot.png"), width=1200)
    height, width, where = _boxes(image, (8, 48, 107))[0]  # full blue
    assert 20 <= height <= 40 and where[1].stop < 600  # left column
    reds = _boxes(image, (165, 15, 21))  # full red, in the right column
    assert reds and reds[0][2][1].start > 600
    assert abs(reds[0][2][0].start - where[0].start) < 200  # same band
