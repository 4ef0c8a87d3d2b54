"""`keras-attn translate` prints each translation as soon as it is done:
a run cut short (Ctrl-C, a failure) keeps the finished ones on standard
output. Stand-in translators; no model is loaded."""

import pytest

from keras_attn_cli.commands import translating


class Cut:
    """Translates by upper-casing; the call after `limit` is a Ctrl-C."""

    def __init__(self, limit):
        self.calls, self.limit = 0, limit

    def __call__(self, text):
        self.calls += 1
        if self.calls > self.limit:
            raise KeyboardInterrupt
        return text.upper()


def test_a_litert_run_cut_short_keeps_the_finished_translations(
    monkeypatch, capsys
):
    from keras_attn_cli import loading

    cut = Cut(limit=2)

    class Translator:  # what the opener gives of a LiteRT translator
        answer = cut

    monkeypatch.setattr(
        loading, "open_litert_translator", lambda path: Translator()
    )
    monkeypatch.setattr(translating, "check_clause_lengths", lambda *a: None)
    texts = ["one.", "two.", "three.", "four."]
    with pytest.raises(KeyboardInterrupt):
        translating._print_litert_translations("m.tflite", texts)
    out = capsys.readouterr().out
    assert "one.  ->  ONE." in out and "two.  ->  TWO." in out
    assert "three" not in out


class Generator:
    """A stand-in of what the opener gives for a decoder-only folder:
    `path`, `kind`, the window check and the completions."""

    path, kind = "folder", "litertlm"

    def __init__(self, calls=None):
        self.calls = calls if calls is not None else []

    def check_prompt(self, text):
        from keras_attn_runtime.signature import PromptTooLong

        if len(text.split()) > 100:
            raise PromptTooLong(127, len(text.split()), "tokens")

    def completions(self, texts):
        self.calls.append(len(texts))
        if len(self.calls) > 1:
            raise KeyboardInterrupt
        return [t.upper() for t in texts]


def test_a_decoder_only_run_prints_each_chunk_as_it_is_done(
    monkeypatch, capsys
):
    from keras_attn_cli import loading

    calls = []
    monkeypatch.setattr(
        loading, "open_model", lambda path, **kw: Generator(calls)
    )
    monkeypatch.setattr(translating, "TRANSLATE_CHUNK", 2)
    with pytest.raises(KeyboardInterrupt):
        translating._print_generated("folder", ["a.", "b.", "c.", "d."])
    out = capsys.readouterr().out
    assert "a.  ->  A." in out and "b.  ->  B." in out and "c." not in out
    # Which file answers is said.
    assert "Translator: folder (litertlm)" in out


def test_a_decoder_only_window_refusal_points_to_the_clause_translator(
    monkeypatch,
):
    from keras_attn_cli import loading

    monkeypatch.setattr(loading, "open_model", lambda path, **kw: Generator())
    with pytest.raises(ValueError, match="cuts a long text into clauses"):
        translating._print_generated("folder", ["long " * 2000])
