"""The shipped models' figures the front page and the edge page give are
the ones their files and `metrics.json` hold: a figure is copied from
one home, and this test fails when the two part."""

import json
import os

from tests.paths import ROOT

MODELS = os.path.join(ROOT, "saved_models")


def metric_file(model, name):
    with open(os.path.join(MODELS, model, name), encoding="utf-8") as f:
        return json.load(f)


def metric(model, *keys):
    value = metric_file(model, "metrics.json")
    for key in keys:
        value = value[key]
    return value


def percent(value):
    return f"{value * 100:.2f}%"


def bleu(value):
    return f"BLEU {value:.2f}"


def megabytes(path):
    full = os.path.join(MODELS, path)
    if os.path.isdir(full):
        size = sum(
            os.path.getsize(os.path.join(folder, name))
            for folder, _, names in os.walk(full)
            for name in names
        )
    else:
        size = os.path.getsize(full)
    return f"{size / 1e6:.2f} MB"


SCORES = {
    "imdb_ssa": percent(metric("imdb_ssa", "test_accuracy")),
    "imdb_edge": percent(metric("imdb_edge", "test_accuracy_litert_int8")),
    "imdb_micro": percent(metric("imdb_micro", "test_accuracy_tflm")),
    "translation_en_fr": bleu(
        metric("translation_en_fr", "val_beam", "bleu_cased")
    ),
    "translation_en_fr_lm": bleu(
        metric("translation_en_fr_lm", "validation_greedy", "bleu_cased")
    ),
}


def rows(page, first_cell):
    """`{first cell: row}` of the table rows of `page` whose first cell
    `first_cell(cell)` accepts."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = [line for line in f if line.startswith("| ")]
    found = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key = first_cell(cells)
        if key:
            found[key] = cells
    return found


def test_the_front_pages_models_score_what_their_metrics_say():
    table = rows("README.md", lambda cells: cells[0].strip("`"))
    for model, score in SCORES.items():
        assert model in table, model
        assert score.replace("BLEU ", "") in table[model][-1], (model, score)


def test_the_edge_pages_sizes_and_scores_are_the_shipped_files():
    def shipped(cells):
        found = [c.strip("`") for c in cells if c.startswith("`") and "/" in c]
        return found[0] if found else None

    table = rows("docs/start-edge.md", shipped)
    litert = metric_file("imdb_ssa", "litert.json")["dynamic"]
    expected = {
        "imdb_ssa/saved_model": SCORES["imdb_ssa"],
        "imdb_ssa/model_dynamic_int8.tflite": percent(litert["test_accuracy"]),
        "imdb_edge/model_full_int8.tflite": SCORES["imdb_edge"],
        "imdb_micro/model_int8.tflite": SCORES["imdb_micro"],
        "translation_en_fr_lm/model.litertlm": bleu(
            metric(
                "translation_en_fr_lm",
                "litertlm_validation_greedy",
                "bleu_cased",
            )
        ),
    }
    assert set(expected) <= set(table), sorted(table)
    for path, score in expected.items():
        size, shown = table[path][-2], table[path][-1]
        assert size == megabytes(path), (path, size)
        assert shown == score, (path, shown, score)
    arena = metric("imdb_micro", "arena_bytes")
    assert f"{arena:,}-byte arena" in " ".join(
        table["imdb_micro/model_int8.tflite"]
    )
