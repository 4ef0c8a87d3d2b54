"""The Python in the guides runs as written: a page's blocks in order, as
one script (a later block may use an earlier one's names), in a scratch
folder that holds the shipped models. A block that cannot run here says
why just above its fence: `<!-- not run: REASON -->`."""

import glob
import os
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT

# The guides (the history page records the past).
GUIDES = sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    if os.path.basename(p) != "benchmarks-history.md"
)
BLOCK = re.compile(
    r"(?:<!-- not run: (?P<why>.*?) -->\n)?```python\n(?P<code>.*?)```",
    flags=re.S,
)
# Files a page's blocks read, made in the scratch folder first.
INPUTS = {
    "docs/batch_inference.md": {
        "english.txt": "I am tired.\nWhere is the station?\n",
    },
}


def blocks(page):
    """`[(code, reason it is not run, or None)]` of `page`'s Python."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return [
            (m.group("code"), m.group("why")) for m in BLOCK.finditer(f.read())
        ]


def runnable(page):
    return [code for code, why in blocks(page) if why is None]


def test_every_python_block_runs_or_says_why_not():
    marked = [(page, why) for page in GUIDES for _, why in blocks(page) if why]
    assert all(len(why.split()) >= 4 for _, why in marked), marked
    ran = [page for page in GUIDES if runnable(page)]
    assert "docs/seq2seq.md" in ran and len(ran) >= 5, ran
    assert sorted(INPUTS) == sorted(set(INPUTS) & set(ran))


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in GUIDES if runnable(p)])
def test_a_pages_python_runs(page, tmp_path):
    os.symlink(os.path.join(ROOT, "saved_models"), tmp_path / "saved_models")
    for name, text in INPUTS.get(page, {}).items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(runnable(page))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
