"""The docs site (`mkdocs.yml`, `tools/docs_site.py`): its CLI reference
holds every command and flag the parser has, its API reference every
public name, its links stay in the site; and (slow) it builds with
`mkdocs build --strict`, where a warning or a broken link fails."""

import argparse
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
import docs_site  # noqa: E402


def _flags(parser):
    for action in parser._actions:
        yield from action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _flags(sub)


def test_the_cli_reference_has_every_command_and_flag():
    from keras_attn_cli.parser import build_parser

    page = docs_site.cli_page()
    sections = dict(
        re.findall(r"^## `([\w-]+)`\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    )
    parser = build_parser()
    (commands,) = [
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ]
    assert set(commands.choices) <= set(sections)
    checked = 0
    for name, sub in commands.choices.items():
        for flag in _flags(sub):
            if flag not in ("-h", "--help"):
                assert f"`{flag}`" in sections[name], (name, flag)
                checked += 1
    assert checked > 50
    serve = sections["serve"]
    assert "| `--max-streams` | – |" in serve  # auto: no number


def test_the_api_reference_has_every_public_name():
    import keras_attn
    import keras_attn_runtime

    pages = {m: docs_site.api_page(m) for m in docs_site.API}
    for module, page in pages.items():
        for name in docs_site.public_names(module):
            assert f"::: {module}.{name}\n" in page, (module, name)
    for name in keras_attn.__all__:
        if name != "__version__":
            assert f"::: keras_attn.{name}\n" in pages["keras_attn"]
    for name in keras_attn_runtime.__all__:
        assert f"::: keras_attn_runtime.{name}\n" in pages["keras_attn_runtime"]
    handlers = docs_site.public_names("keras_attn_runtime.beam")
    assert "LiteRTTranslatorHandler" in handlers


def test_links_are_rewritten_for_the_site_and_strays_refused():
    text = (
        "[a](docs/serving.md#versions) [b](BENCHMARKS.md) "
        "[c](https://keras.io) [d](LICENSE)"
    )
    got = docs_site.site_links(text, "README.md")
    assert got == (
        "[a](serving.md#versions) [b](benchmarks.md) "
        "[c](https://keras.io) [d](license.md)"
    )
    under = docs_site.site_links(
        "[x](../BENCHMARKS.md#one) [y](edge.md)", "docs/x.md", under_docs=True
    )
    assert under == "[x](benchmarks.md#one) [y](edge.md)"
    with pytest.raises(ValueError, match=r"links to 'keras_attn/x.py'"):
        docs_site.site_links("[z](keras_attn/x.py)", "README.md")
    for source in docs_site.PAGES:  # the real pages convert
        docs_site.site_page(source)


def test_every_page_of_docs_is_in_the_sites_navigation():
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = f.read()
    named = set(re.findall(r":\s*(\S+\.md)\s*$", config, re.M))
    on_disk = {
        n for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md")
    }
    assert on_disk <= named, on_disk - named
    assert set(docs_site.pages()) <= named


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    done = subprocess.run(
        [
            sys.executable, "-m", "mkdocs", "build", "--strict",
            "--site-dir", str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text("utf-8")
    assert "--max-streams" in cli
    api = (site / "reference" / "api" / "keras_attn" / "index.html").read_text(
        "utf-8"
    )
    assert "MultiHeadPositional" in api and "decode_rows" in api
