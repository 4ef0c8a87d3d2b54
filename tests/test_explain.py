"""Attention pictures: every token shown, original casing, a legend."""

import os

import numpy as np
import pytest

from keras_attn import explain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    text = "This MOVIE, <br />don't MISS it!? [x]"
    tokens = ["this", "movie", "don't", "miss", "it", "!", "?", "[UNK]"]
    spans = explain.token_spans(text, tokens)
    words = [text[s:e] if (s, e) != (0, 0) else None for s, e in spans[:7]]
    assert words == ["This", "MOVIE", "don't", "MISS", "it", "!", "?"]
    assert spans[7] is None


def test_html_keeps_the_text_and_has_a_legend(tmp_path):
    r = result(4, text="Great FILM, truly <b>great</b>!")
    r["tokens"] = ["great", "film", "truly", "great"]
    path = explain.write_html(r, str(tmp_path / "a.html"))
    page = open(path, encoding="utf-8").read()
    assert ">Great</span> <span" in page and ">FILM</span>," in page
    assert "&lt;b&gt;" in page  # the original text, escaped
    assert "class='legend'" in page
    # dark backgrounds get white ink (readable contrast)
    assert "rgba(200,30,30,1.000);color:#fff" in page


def test_heatmap_shows_every_token_of_a_long_text(tmp_path, monkeypatch):
    import matplotlib.axes

    seen = []
    real = matplotlib.axes.Axes.set_xticklabels

    def spy(self, labels, *args, **kwargs):
        seen.extend(labels)
        return real(self, labels, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticklabels", spy)
    r = result(130)
    path = explain.write_heatmap(r, str(tmp_path / "a.png"))
    assert seen == r["tokens"]  # 130 tokens over three panels, none cut
    assert open(path, "rb").read(4) == b"\x89PNG"


EDGE = os.path.join(ROOT, "saved_models", "imdb_edge", "model_full_int8.tflite")


@pytest.mark.skipif(not os.path.isfile(EDGE), reason="no shipped edge model")
def test_the_int8_edge_file_explains_itself(tmp_path):
    from keras_attn_runtime import LiteRTClassifier

    text = "A wonderful film with brilliant acting, though the ending was weak."
    clf = LiteRTClassifier(EDGE)
    (result,) = explain.attend(clf, [text])
    assert result["tokens"][:3] == ["a", "wonderful", "film"]
    weights = result["attention"]
    assert weights.shape == (8, len(result["tokens"]))
    np.testing.assert_allclose(weights.sum(1), 1.0, atol=0.05)  # int8 steps
    assert result["probability"] == pytest.approx(
        float(clf.predict([text])["probability"][0, 0])
    )
    top = [w for w, _ in explain.top_tokens(result, 3)]
    assert "wonderful" in top
    import keras_attn_cli

    out = tmp_path / "pictures"
    assert keras_attn_cli.main(["explain", EDGE, text, "--out", str(out)]) == 0
    html = (out / "attention.html").read_text(encoding="utf-8")
    assert "wonderful" in html and (out / "attention.png").stat().st_size > 0
