"""The code in the guides runs as written.

A page's Python and shell blocks run in order as one script (the Python
in one namespace, so a later block may use an earlier one's names; a
shell block through `bash -euo pipefail`), in a scratch folder that
holds the shipped models and the recipes. A ```text block right after
a block that runs is what that block prints, `...` standing for any text.

A block that cannot run here says why just above its fence:
`<!-- not run: REASON -->`. A `<!-- server -->` block is a
`keras-attn serve` command: the test starts it on free ports before the
page's other blocks (the page's 8501 and 8500 stand for them) and stops
it after them.
"""

import os
import subprocess
import sys

import pytest

from tests.docs_blocks import (
    GUIDES,
    INPUTS,
    LANGUAGES,
    RUN,
    SEPARATOR,
    blocks,
    matches,
    runnable,
    script,
    start_server,
    with_ports,
)
from tests.paths import ROOT


def test_every_block_declares_a_language_we_know():
    wrong = [
        (page, b.lang or "(none)", b.code.splitlines()[0][:60])
        for page in GUIDES
        for b in blocks(page)
        if b.lang not in LANGUAGES
    ]
    assert not wrong, wrong


def test_every_code_block_runs_or_says_why_not():
    marked = [(page, b.why) for page in GUIDES for b in blocks(page) if b.why]
    assert all(len(why.split()) >= 4 for _, why in marked), marked
    assert all(b.lang in RUN for page in GUIDES for b in blocks(page) if b.why)
    ran = [page for page in GUIDES if runnable(page)]
    assert "docs/seq2seq.md" in ran and len(ran) >= 9, ran
    assert sorted(INPUTS) == sorted(set(INPUTS) & set(ran))
    servers = [b for page in GUIDES for b in blocks(page) if b.server]
    assert servers and all(
        b.code.startswith("keras-attn serve ") for b in servers
    )


def test_expected_output_is_read_with_its_wildcards():
    assert matches("P = 0.2...\nok", "P = 0.2041  \nok\n")
    assert not matches("P = 0.2...\nok", "P = 0.3\nok")
    assert not matches("one\ntwo", "one\ntwo\nthree")


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in GUIDES if runnable(p)])
def test_a_pages_code_runs(page, tmp_path):
    for folder in ("saved_models", "recipes"):
        os.symlink(os.path.join(ROOT, folder), tmp_path / folder)
    for name, text in INPUTS.get(page, {}).items():
        (tmp_path / name).write_text(text)
    bin_dir = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    }
    proc, ports = start_server(page)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script(page, ports)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    printed = done.stdout.split(SEPARATOR)
    for block, got in zip(runnable(page), printed, strict=False):
        if block.expected is not None:
            expected = with_ports(block.expected, ports)
            assert matches(expected, got), (block.code, got)
