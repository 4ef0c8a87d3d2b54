"""The decoder-only servers measured by NVIDIA's AIPerf, the field's
load generator for OpenAI-compatible servers, beside our own probe
(`benchmarks.serving_rows`): the same 21.4M-parameter model, its bundle
with `decode_rows_<R>` signatures served by `keras-attn serve`, and the
bundle without them by `litert-lm serve`.

`aiperf profile` sends streamed chat completions of synthetic prompts
(`--isl` tokens, counted by the model's tokenizer), each asking for
`--osl` tokens (`max_completion_tokens`), at 1 and 16 concurrent
requests (`--requests` a client, at least `--least` in all); it
counts tokens with the model's tokenizer (a local copy of its
`tokenizer.json`). Reported from its `profile_export_aiperf.json`:
TTFT and inter-token latency (p50, p99), output tokens a second, and
goodput (requests a second that meet `--goodput`'s targets).

    python -m benchmarks.aiperf_serving [--aiperf aiperf] [--osl 100]

AIPerf installs on its own (`pip install aiperf`, in another virtual
environment: it pins its own versions); `--aiperf` names its command.
Writes `benchmarks/results/aiperf_serving.json`.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks import results
from benchmarks.serving_generation import _version, start_theirs
from benchmarks.serving_rows import build
from tests.serving.live import start

CONCURRENCY = (1, 16)
GOODPUT = "time_to_first_token:1000 inter_token_latency:30"


def tokenizer_folder(folder, out):
    """A folder `transformers` reads the model's tokenizer from."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        data = f.read()
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(data)
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return out


def profile(args, url, endpoint, model, tokenizer, concurrency, out):
    """One `aiperf profile` run; its exported metrics."""
    requests = max(args.requests * concurrency, args.least)
    command = [
        args.aiperf, "profile",
        "--model", model,
        "--tokenizer", tokenizer,
        "--endpoint-type", "chat",
        "--custom-endpoint", endpoint,
        "--streaming",
        "--url", url,
        "--concurrency", str(concurrency),
        "--request-count", str(requests),
        "--warmup-request-count", "2",
        "--isl", str(args.isl), "--isl-stddev", "0",
        "--osl", str(args.osl), "--osl-stddev", "0",
        "--goodput", GOODPUT,
        "--random-seed", "0",
        "--ui-type", "none",
        "--output-artifact-dir", out,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    for root, _, files in os.walk(out):
        if "profile_export_aiperf.json" in files:
            with open(os.path.join(root, "profile_export_aiperf.json")) as f:
                return json.load(f)
    raise RuntimeError(f"no profile_export_aiperf.json under {out}")


def _stat(metrics, name, stat):
    value = (metrics.get(name) or {}).get(stat)
    return None if value is None else round(float(value), 2)


def row(server, concurrency, metrics):
    return {
        "server": server,
        "concurrency": concurrency,
        "requests": _stat(metrics, "request_count", "avg"),
        "errors": _stat(metrics, "error_request_count", "avg") or 0,
        "ttft_p50_ms": _stat(metrics, "time_to_first_token", "p50"),
        "ttft_p99_ms": _stat(metrics, "time_to_first_token", "p99"),
        "inter_token_p50_ms": _stat(metrics, "inter_token_latency", "p50"),
        "inter_token_p99_ms": _stat(metrics, "inter_token_latency", "p99"),
        "output_tokens_per_s": _stat(metrics, "output_token_throughput", "avg"),
        "goodput_per_s": _stat(metrics, "goodput", "avg"),
        "requests_per_s": _stat(metrics, "request_throughput", "avg"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", default="aiperf")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--least", type=int, default=16)
    parser.add_argument("--isl", type=int, default=8)
    parser.add_argument("--osl", type=int, default=100)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as home:
        folders = {}
        for kind, counts in (("rows", (1, 4, 16)), ("one", ())):
            folders[kind] = os.path.join(home, f"decoder_{kind}")
            build(folders[kind], counts)
        tokenizer = tokenizer_folder(
            folders["rows"], os.path.join(home, "tokenizer")
        )
        log = open(os.path.join(home, "servers.log"), "w")  # noqa: SIM115
        for name in ("keras-attn serve", "litert-lm serve"):
            if name == "litert-lm serve":
                os.makedirs(os.path.join(home, "litert"))
                bundle = os.path.join(folders["one"], "model.litertlm")
                proc, base, model = start_theirs(
                    os.path.join(home, "litert"), log, bundle
                )
                url, endpoint = base[: -len("/v1")], "/v1/chat/completions"
            else:
                proc, port = start(folders["rows"], "--grpc-port", "0")
                model = os.path.basename(folders["rows"])
                url = f"http://127.0.0.1:{port}"
                endpoint = "/openai/v1/chat/completions"
            try:
                for concurrency in CONCURRENCY:
                    out = os.path.join(home, f"aiperf-{len(rows)}")
                    metrics = profile(
                        args, url, endpoint, model, tokenizer, concurrency, out
                    )
                    rows.append(row(name, concurrency, metrics))
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
    aiperf = subprocess.run(
        [args.aiperf, "--version"], capture_output=True, text=True
    ).stdout.strip()
    out = results.save(
        os.path.join(results.RESULTS, "aiperf_serving.json"),
        results.meta(
            "aiperf_serving",
            [  # the command's name, not where it lies
                os.path.basename(a) if a == args.aiperf else a
                for a in (sys.argv[1:] if argv is None else argv)
            ],
            aiperf=aiperf or "unknown",
            litert_lm=_version("litert-lm"),
        ),
        rows,
        goodput_targets=GOODPUT,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
