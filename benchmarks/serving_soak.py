"""`keras-attn serve` under a soak of mixed valid and hostile traffic:
does its memory stay flat, and does its log stay free of tracebacks?

A server of the full-integer classifier and both translators
(`keras-attn serve imdb_edge translation_en_fr translation_en_fr_lm`)
takes, from 4
clients for `--seconds`, a mix of valid requests (v1 `:predict`, v2
`infer`, OpenAI completions streamed and not) and hostile ones (the
malformed fields, lone surrogates, over-long prompts, bodies over the
limit, silent connections and half headers that the slow tier's
hostile-input suite sends one at a time). The server's resident memory
is sampled every `--every` seconds. Rows: each sample's time and RSS;
the summary gives the RSS after warm-up (the first sample past a
quarter of the run) and at the end, the requests sent by kind and their
statuses, and the tracebacks in the server's log.

    python -m benchmarks.serving_soak [--seconds 600] [--every 30]

Writes `benchmarks/results/serving_soak.json`.
"""

import argparse
import collections
import http.client
import json
import os
import random
import signal
import socket
import sys
import threading
import time

from benchmarks import results
from benchmarks.litert_engines import sentences
from tests.serving.live import output_all, start

MODELS = ("imdb_edge", "translation_en_fr", "translation_en_fr_lm")
LONG = " ".join(["word"] * 150)


def _post(port, path, body, kind="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", path, data, {"Content-Type": kind})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _silent(port, half=False):
    """A connection that sends nothing (or half a header) until the
    server closes it: the status is 0 when it did."""
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        if half:
            sock.sendall(b"POST /v1/models/imdb_edge:predict HTTP/1.1\r\n")
        sock.settimeout(60)
        return 0 if sock.recv(64) == b"" else -1
    except (ConnectionResetError, TimeoutError):
        return 0
    finally:
        sock.close()


def requests():
    """`{kind: call(port) -> status}`: the traffic's mix; a valid
    request's text is a random sentence (one to three of them joined)."""
    lm, completions = "translation_en_fr_lm", "/openai/v1/completions"
    # Valid texts of every length the models take: Tatoeba's English side
    # (`benchmarks.litert_engines.sentences`), drawn for each request.
    pool, rng = sentences(100_000), random.Random(0)

    def any_text():
        return " ".join(rng.sample(pool, rng.randint(1, 3)))

    text = {"name": "text", "datatype": "BYTES", "shape": [1]}
    return {
        "valid v1 predict": lambda p: _post(
            p,
            "/v1/models/imdb_edge:predict",
            {"instances": [any_text()], "output_filter": ["probability"]},
        ),
        "valid v2 infer": lambda p: _post(
            p,
            "/v2/models/imdb_edge/infer",
            {"inputs": [{**text, "data": [any_text()]}]},
        ),
        "valid completion": lambda p: _post(
            p, completions, {"model": lm, "prompt": rng.choice(pool)}
        ),
        "valid translation": lambda p: _post(
            p,
            completions,
            {"model": "translation_en_fr", "prompt": any_text()},
        ),
        "valid stream": lambda p: _post(
            p,
            completions,
            {"model": lm, "prompt": rng.choice(pool), "stream": True},
        ),
        "hostile model list": lambda p: _post(
            p, completions, {"model": [], "prompt": "x"}
        ),
        "hostile content part": lambda p: _post(
            p,
            "/openai/v1/chat/completions",
            {
                "model": lm,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": 5}]}
                ],
            },
        ),
        "hostile surrogate": lambda p: _post(
            p,
            "/v1/models/imdb_edge:predict",
            b'{"instances": ["A \\udc80 film"]}',
            "application/x-www-form-urlencoded",
        ),
        "hostile long prompt": lambda p: _post(
            p, completions, {"model": lm, "prompt": LONG, "stream": True}
        ),
        "hostile body over limit": lambda p: _post(
            p, "/v1/models/imdb_edge:predict", b"x" * (2 << 20)
        ),
        "hostile silent connection": lambda p: _silent(p),
        "hostile half header": lambda p: _silent(p, half=True),
    }


def rss_mib(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--every", type=float, default=30)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    proc, port = start(*MODELS, "--header-timeout", "2", "--log-level", "info")
    kinds = requests()
    statuses = collections.defaultdict(collections.Counter)
    stop = threading.Event()

    def client(seed):
        rng = random.Random(seed)
        names = sorted(kinds)
        while not stop.is_set():
            name = rng.choice(names)
            try:
                statuses[name][kinds[name](port)] += 1
            except OSError as err:
                statuses[name][type(err).__name__] += 1

    threads = [
        threading.Thread(target=client, args=(i,), daemon=True)
        for i in range(args.clients)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    rows = []
    try:
        while (elapsed := time.monotonic() - started) < args.seconds:
            rss = rss_mib(proc.pid)
            rows.append({"seconds": round(elapsed), "rss_mib": rss})
            print(rows[-1], flush=True)
            time.sleep(args.every)
        rows.append(
            {
                "seconds": round(time.monotonic() - started),
                "rss_mib": rss_mib(proc.pid),
            }
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=150)
        log = output_all(proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    warm = next(r for r in rows if r["seconds"] >= args.seconds / 4)
    summary = {
        "rss_after_warm_up_mib": round(warm["rss_mib"], 1),
        "rss_at_end_mib": round(rows[-1]["rss_mib"], 1),
        "growth_after_warm_up_mib": round(
            rows[-1]["rss_mib"] - warm["rss_mib"], 1
        ),
        "requests": {k: dict(v) for k, v in sorted(statuses.items())},
        "requests_total": sum(sum(v.values()) for v in statuses.values()),
        "tracebacks_in_log": log.count("Traceback"),
        "warning_lines": sum("WARNING" in x for x in log.splitlines()),
    }
    print(json.dumps(summary, indent=2))
    path = os.path.join(results.RESULTS, "serving_soak.json")
    meta = results.meta(
        "serving_soak", argv, models=list(MODELS), clients=args.clients
    )
    results.save(path, meta, rows, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
