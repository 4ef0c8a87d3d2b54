"""Write BENCHMARKS.md's tables from `benchmarks/results/*.json`.

`python -m benchmarks.report` replaces every block of BENCHMARKS.md
between `<!-- results/NAME.json -->` and `<!-- /results/NAME.json -->`
with the table rendered from that file (its command, date, machine and
versions first); the prose around the blocks is written by people.
`--check` changes nothing and exits with 1 when a block is stale, which
the test suite runs.
"""

import argparse
import json
import os
import re
import sys

from benchmarks.results import LIBRARIES, RESULTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENT = os.path.join(ROOT, "BENCHMARKS.md")
BLOCK = re.compile(
    r"(<!-- results/(?P<name>[\w.-]+\.json) -->\n)(?P<body>.*?)"
    r"(<!-- /results/(?P=name) -->)",
    re.S,
)
NAMES = {"tensorflow": "TensorFlow", "keras": "Keras", "jax": "JAX"}
NAMES.update(torch="PyTorch", numpy="NumPy", python="Python")
HEADERS = {
    "seq": "T",
    "ours_ms": "ours ms",
    "keras_ms": "reference ms",
    "ours_mib": "ours MiB",
    "keras_mib": "reference MiB",
    "time_ratio": "time ratio",
    "memory_ratio": "memory ratio",
    "batch1_ms": "batch-1 ms",
    "speedup_vs_keras_predict": "speed-up vs Keras predict",
    "batch64_reviews_per_s": "batch-64 reviews/s",
    "m_chars": "M chars",
    "tokens_500_s": "tokens (500 max) s",
    "standardize_all_s": "standardize (all) s",
    "peak_mib": "peak MiB",
    "cache_mib": "cache MiB",
    "num_key_value_heads": "key/value heads",
    "requests_per_s": "requests/s",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "p90_ms": "p90 ms",
    "p50_over_rest": "p50 vs REST",
    "throughput_ratio": "throughput vs 1 client",
    "rename_to_first_answer_s": "rename to first answer s",
    "first_answer_ms": "first answer ms",
    "first_20_answers_median_ms": "first 20: median ms",
    "first_20_answers_max_ms": "first 20: slowest ms",
    "window_p50_ms": "5 s after: p50 ms",
    "window_p99_ms": "5 s after: p99 ms",
    "window_requests": "5 s after: requests",
    "compiled_model_ms": "CompiledModel ms",
    "interpreter_ms": "Interpreter ms",
    "outputs_equal": "outputs equal",
    "matmuls_ms": "matmuls ms",
    "attention_ms": "attention ms",
    "matmul_gmac_per_s": "matmuls G multiply-adds/s",
    "ms_a_row": "ms a row",
    "clients_ratio_ceiling": "16 clients vs 1, ceiling",
    "itl_ratio_ceiling": "inter-token 16 vs 1, ceiling",
    "sentences_per_s": "sentences/s",
    "words_per_s": "words/s",
    "first_words_p50_ms": "first words p50 ms",
    "first_words_p99_ms": "first words p99 ms",
    "first_words_share_p50": "first words at (share of answer, p50)",
    "comprehensiveness": "comprehensiveness ↑",
    "comprehensiveness_se": "± se",
    "comprehensiveness_vs_occlusion": "vs occlusion",
    "sufficiency": "sufficiency ↓",
    "sufficiency_se": "± se",
    "passes_per_review": "rows a review",
    "seconds_per_review": "s a review",
    "tokens_per_s": "tokens/s",
    "equal_to_alone": "equal to alone",
    "weight_mb": "weights MB",
    "rows_a_call": "rows a call",
    "memory_ceiling": "memory ceiling tokens/s",
    "arithmetic_ceiling": "int8 ceiling tokens/s",
    "of_ceiling": "of the lower ceiling",
    "output_tokens_per_s": "output tokens/s",
    "goodput_per_s": "goodput (requests/s)",
}


def cell(key, value):
    """One table cell, with the precision the quantity deserves."""
    if value is None:
        return "failed"
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if key.endswith("ratio"):
        return f"{value:.3f}"
    if "_share" in key:
        return f"{value:.2f}"
    if key.startswith("speedup"):
        return f"{value:.2f}x"
    if key.endswith("_s"):
        return f"{value:.3f}"
    if key.endswith("mib") or key.endswith("per_s"):
        return f"{value:.1f}"
    return f"{value:.2f}" if key.endswith("ms") else f"{value:g}"


def table(rows, columns=None):
    columns = columns or list(
        dict.fromkeys(
            k for r in rows for k, v in r.items() if not isinstance(v, list)
        )
    )
    lines = [
        "| " + " | ".join(HEADERS.get(c, c) for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for r in rows:
        values = [cell(c, r[c]) if c in r else "–" for c in columns]
        lines.append("| " + " | ".join(values) + " |")
    return lines


def provenance(meta):
    """`command` · date · machine · versions · the run's settings."""
    versions = [
        f"{NAMES[k]} {meta[k]}" for k in ("python", *LIBRARIES) if k in meta
    ]
    known = {"command", "date", "machine", "python", *LIBRARIES}
    settings = [f"{k} {v}" for k, v in meta.items() if k not in known]
    parts = [f"`{meta['command']}`", meta["date"], meta["machine"]]
    return " · ".join(parts + [", ".join(versions)] + settings[:8])


def scaling(data):
    """Layers down, lengths across, `ms / MiB` in each cell."""
    rows, seqs = data["rows"], sorted({r["seq"] for r in data["rows"]})
    by_layer = {}
    for r in rows:
        by_layer.setdefault(r["layer"], {})[r["seq"]] = (
            f"{r['ms']:.0f} ms / {r['peak_mib']:.0f} MiB"
            if "ms" in r
            else "skipped"
        )
    lines = [
        "| layer | " + " | ".join(f"T={t}" for t in seqs) + " |",
        "|" + "---|" * (len(seqs) + 1),
    ]
    for layer, cells in by_layer.items():
        values = [cells.get(t, "") for t in seqs]
        lines.append(f"| {layer} | " + " | ".join(values) + " |")
    return lines


def extras(data):
    """The lines some files add below their table."""
    lines = []
    for r in data["rows"]:
        if r.get("failed_tests"):
            names = ", ".join(f"`{n}`" for n in r["failed_tests"])
            lines.append(f"- failed in `{r['module']}`: {names}")
    for unit, seconds in (data.get("old_tokenizer_s") or {}).items():
        lines.append(
            f"- the 0.1 regex tokenizer on {unit!r} (200,000 characters): "
            f"{seconds:.2f} s"
        )
    if data.get("streaming"):  # benchmarks.translator_streaming
        lines += ["", "The streaming file, greedy and beam search:", ""]
        lines += table(data["streaming"])
    soak = data.get("summary")  # benchmarks.serving_soak
    if soak and "tracebacks_in_log" in soak:
        lines += [
            "",
            f"RSS after warm-up {soak['rss_after_warm_up_mib']} MiB, at the "
            f"end {soak['rss_at_end_mib']} MiB "
            f"({soak['growth_after_warm_up_mib']:+} MiB); "
            f"{soak['requests_total']} requests; tracebacks in the log: "
            f"{soak['tracebacks_in_log']}; WARNING lines: "
            f"{soak['warning_lines']}.",
            "",
            "| requests | answers (status: count; 0: connection closed) |",
            "|---|---|",
        ]
        for kind, counts in soak["requests"].items():
            shown = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
            lines.append(f"| {kind} | {shown} |")
    if soak and "steady_p99_ms" in soak:  # benchmarks.version_swap
        lines += [
            "",
            f"{soak['clients']} clients, a poll every {soak['poll_s']:g} s. "
            f"Steady state (before the first rename): p50 "
            f"{soak['steady_p50_ms']} ms, p99 {soak['steady_p99_ms']} ms over "
            f"{soak['steady_requests']} requests. {soak['requests']} "
            f"requests in all, {soak['failed']} failed.",
        ]
    if "int8_gmac_per_s" in data:  # benchmarks.decode_floors
        lines += [
            "",
            f"One core reads {data['read_gb_per_s']:g} GB/s and runs "
            f"{data['int8_gmac_per_s']:g} G int8-weight multiply-adds a "
            "second in LiteRT.",
        ]
        for model, costs in (data.get("call_ms") or {}).items():
            shown = ", ".join(f"`{k}` {v:g} ms" for k, v in costs.items())
            lines += ["", f"A call, {model}: {shown}."]
    if "bundle_bytes" in data:  # benchmarks.serving_rows
        sizes = ", ".join(
            f"{kind} {size / 1e6:.2f} MB"
            for kind, size in data["bundle_bytes"].items()
        )
        lines += [
            "",
            f"{data['parameters']:,} parameters; bundles: {sizes}.",
        ]
    real = data.get("real_reviews")
    if real:
        lines += [
            "",
            f"{real['reviews']} real test reviews, one at a time (median "
            f"{real['words_median']:g} words, longest {real['words_max']}):",
            "",
            "| path | mean ms per review | speed-up vs Keras predict |",
            "|---|---|---|",
        ]
        for path, ms in real["mean_ms"].items():
            speedup = real["speedup_vs_keras_predict"][path]
            lines.append(f"| {path} | {ms:.2f} | {speedup:.2f}x |")
    return lines


def render(name, folder=RESULTS):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        data = json.load(f)
    body = scaling(data) if name == "scaling.json" else table(data["rows"])
    lines = [provenance(data["meta"]), "", *body]
    more = extras(data)
    if more:
        lines += ["", *more]
    return "\n".join(lines) + "\n"


def update(text, folder=RESULTS):
    """`text` with every results block re-rendered from `folder`."""
    return BLOCK.sub(
        lambda m: m.group(1) + render(m.group("name"), folder) + m.group(4),
        text,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--document", default=DOCUMENT)
    args = parser.parse_args(argv)
    with open(args.document, encoding="utf-8") as f:
        text = f.read()
    new = update(text)
    if args.check:
        stale = [
            m.group("name")
            for m, n in zip(
                BLOCK.finditer(text), BLOCK.finditer(new), strict=True
            )
            if m.group(0) != n.group(0)
        ]
        for name in stale:
            print(f"stale: {name} (run python -m benchmarks.report)")
        return 1 if stale else 0
    with open(args.document, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"{args.document}: {len(BLOCK.findall(text))} tables written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
