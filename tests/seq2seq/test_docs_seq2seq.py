"""docs/seq2seq.md: our side of each snippet runs as written, in order.

Blocks marked ```python are ours and run; the tfa.seq2seq blocks are
marked ```py (tfa does not install with TensorFlow 2.16+) and do not.
"""

import contextlib
import io
import os
import re

import pytest

from tests.backend import training
from tests.paths import ROOT

DOC = os.path.join(ROOT, "docs", "seq2seq.md")


@pytest.mark.slow
def test_migration_guide_snippets_run():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    ours = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    theirs = re.findall(r"```py\n(.*?)```", text, flags=re.S)
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
