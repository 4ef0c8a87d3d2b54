"""docs/seq2seq.md: our side of each snippet runs as written, in order.

Our blocks run; the tfa.seq2seq blocks are marked as not run (tfa does
not install with TensorFlow 2.16+). `tests/docs_blocks.py` reads both.
"""

import contextlib
import io
import os

import pytest

from tests.backend import training
from tests.docs_blocks import blocks
from tests.paths import ROOT

PAGE = os.path.join("docs", "seq2seq.md")
DOC = os.path.join(ROOT, PAGE)


@pytest.mark.slow
def test_migration_guide_snippets_run():
    found = [b for b in blocks(PAGE) if b.lang == "python"]
    ours = [b.code for b in found if b.runs]
    theirs = [b.code for b in found if b.why and "tfa" in b.why]
    assert len(ours) >= 4 and len(theirs) >= 2
    printed = io.StringIO()
    # As a user runs them: autograd on under PyTorch (the test session
    # turns it off), since one snippet trains with `fit`.
    with contextlib.redirect_stdout(printed), training():
        exec(compile("\n".join(ours), DOC, "exec"), {})  # noqa: S102
    out = printed.getvalue()
    assert "(2, 4, 32) (2, 4, 5)" in out
    assert "\n1.4979\n" in out  # log(20) · 3/6
    assert "(2, 10)\n(2, 10, 5)" in out
    assert "\nTrue\n" in out  # the training budget was not spent
    assert "[(2, 2, 3, 2, 8), (2, 3)]" in out  # the ring's 3 positions
