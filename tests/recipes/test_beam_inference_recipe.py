"""`recipes/beam_inference.py` end to end on a small `--input` (slow):
the pipeline writes one JSON line an answer and its own check against
the direct calls passes; the LiteRT translator on DirectRunner."""

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("apache_beam")


def test_the_recipe_translates_an_input_file_and_checks_its_answers(
    tmp_path,
):
    lite = os.path.join(
        ROOT, "saved_models", "translation_en_fr", "model.tflite"
    )
    if not os.path.isfile(lite):
        pytest.skip("no shipped translator")
    sentences = ["I am tired.", "Where is the station?", "She reads a book."]
    given = tmp_path / "english.txt"
    given.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "answers"
    command = [
        sys.executable,
        "recipes/beam_inference.py",
        "--task",
        "translate",
        "--input",
        str(given),
        "--output",
        str(output),
        "--check",
        "3",
    ]

    def run():
        return subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=600
        )

    done = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 answers" in done.stdout and "3 checked" in done.stdout
    rows = []
    for path in (tmp_path / "out").glob("answers*.jsonl"):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["text"] for r in rows) == sorted(sentences)
    assert all(r["answer"] for r in rows)
    # A second run to the same prefix is refused: nothing replaced, and no
    # earlier shard read as its answers.
    before = {p: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    again = run()
    assert again.returncode == 2
    assert "--output=" in again.stderr and "already there" in again.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
