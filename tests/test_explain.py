"""Attention pictures: every token shown, original casing, a legend."""

import numpy as np

from keras_attn import explain


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
