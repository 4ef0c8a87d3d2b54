"""BENCHMARKS.md's tables are the benchmark scripts' JSON, rendered by
`benchmarks.report`: a table edited by hand, or a JSON re-measured without
re-rendering, fails here."""

import json
import os

from benchmarks import report, results


def test_benchmarks_md_tables_match_their_json():
    assert report.main(["--check"]) == 0


def test_figures_have_one_home():
    # The explanations guide links to the faithfulness tables here.
    page = os.path.join(report.ROOT, "docs", "explanations.md")
    text = open(page, encoding="utf-8").read()
    assert "<!-- results/" not in text
    assert "BENCHMARKS.md#explanations-faithfulness-of-each-method" in text
    assert "<!-- results/faithfulness.json -->" in open(report.DOCUMENT).read()


def test_a_hand_edited_table_is_caught_and_rewritten(tmp_path):
    text = open(report.DOCUMENT, encoding="utf-8").read()
    row = next(line for line in text.splitlines() if line.startswith("| "))
    edited = text.replace(row, row.replace("|", "| 9", 2), 1)
    assert edited != text
    doc = tmp_path / "B.md"
    doc.write_text(edited, encoding="utf-8")
    assert report.main(["--check", "--document", str(doc)]) == 1
    assert report.main(["--document", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == text


def test_render_formats_and_records_provenance(tmp_path):
    meta = results.meta("layer_speed", ["--only", "Attention(dot)"], reps=3)
    rows = [
        {"pair": "a vs b", "seq": 64, "ours_ms": 1.234, "ratio": 0.98765},
        {"pair": "a vs b", "seq": 128, "ours_ms": None, "ratio": 1.5},
    ]
    results.save(str(tmp_path / "x.json"), meta, rows)
    saved = json.loads((tmp_path / "x.json").read_text())
    assert saved["meta"]["command"] == (
        "python -m benchmarks.layer_speed --only 'Attention(dot)'"
    )
    text = report.render("x.json", str(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("`python -m benchmarks.layer_speed --only")
    assert meta["date"] in lines[0] and "reps 3" in lines[0]
    assert "| pair | T | ours ms | ratio |" in lines
    assert "| a vs b | 64 | 1.23 | 0.988 |" in lines
    assert "| a vs b | 128 | failed | 1.500 |" in lines
