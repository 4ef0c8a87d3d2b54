"""The decoder-only translator served to OpenAI streaming clients:
`keras-attn serve translation_en_fr_lm` against Google's `litert-lm
serve` on the same `.litertlm` bundle, in one run on one machine.

Both answer OpenAI's `/chat/completions` with `"stream": true`, greedy;
ours runs the bundle's own signatures in the runtime (no TensorFlow),
theirs in LiteRT-LM's engine. Each request is one held-out sentence
(`tests/data/everyday_sentences.txt`, in order). Closed loop: 1, 4 and
16 clients, each sending its next sentence when its answer is done, in
`--rounds` rounds that alternate which server goes first (a load's row
sums its rounds).
Open loop: requests at Poisson arrival times, `--rate` a second for
`--seconds`. Reported: streams a second (and requests a server failed:
a refusal, a reset connection), the time to the first token
(TTFT) and between tokens, p50 and p99, and how many answers equal the
other server's answer for the same sentence. The clients' cyclic
garbage collector is paused while a load runs (a full pass in this
process once held one request's first token for about 70 ms, whichever
server answered).

    python -m benchmarks.serving_generation [--requests 8] [--rounds 3]

Needs `litert-lm` (`pip install litert-lm`). Writes
`benchmarks/results/serving_generation.json`.
"""

import argparse
import concurrent.futures
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import results
from tests.serving.live import free_port, start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "translation_en_fr_lm"
BUNDLE = os.path.join(ROOT, "saved_models", NAME, "model.litertlm")
CLIENTS = (1, 4, 16)


def sentences():
    path = os.path.join(ROOT, "tests", "data", "everyday_sentences.txt")
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def wait_for(url, proc, seconds=240):
    import httpx

    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server stopped ({proc.returncode})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no answer from {url}")


def start_ours():
    """`keras-attn serve NAME` (as the serving tests start it), once it
    answers."""
    proc, port = start(NAME, "--grpc-port", "0")
    return proc, f"http://127.0.0.1:{port}/openai/v1", NAME


def start_theirs(home, log, source=BUNDLE):
    """`litert-lm serve` of the bundle at `source` (imported as `fr`
    under `home`), once it answers."""
    env = {**os.environ, "HOME": home}
    bundle = os.path.join(home, "model.litertlm")
    shutil.copy(source, bundle)
    subprocess.run(
        ["litert-lm", "import", bundle, "fr"],
        env=env,
        check=True,
        capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        ["litert-lm", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
    return proc, f"http://127.0.0.1:{port}/v1", "fr"


def streamed(client, base, model, text):
    """`(text, TTFT s, [gaps between tokens, s])` of one streamed chat
    completion."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
    }
    sent = time.perf_counter()
    first, stamps, pieces = None, [], []
    with client.stream("POST", f"{base}/chat/completions", json=body) as got:
        got.raise_for_status()
        for line in got.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    now = time.perf_counter()
                    first = first if first is not None else now - sent
                    stamps.append(now)
                    pieces.append(piece)
    return "".join(pieces), first, list(np.diff(stamps))


def attempt(client, base, model, text):
    """`streamed`, or `None` where the server failed the request (a
    refusal, a connection it reset)."""
    import httpx

    try:
        return streamed(client, base, model, text)
    except httpx.HTTPError:
        return None


def _summary(server, load, out, seconds):
    failed = sum(o is None for o in out)
    out = [o for o in out if o is not None]
    first = [o[1] for o in out if o[1] is not None]
    gaps = [g for o in out for g in o[2]]

    def ms(values, q):
        return round(float(np.percentile(values, q)) * 1e3, 2)

    return {
        "server": server,
        "load": load,
        "streams": len(out),
        "failed": failed,
        "streams_per_s": round(len(out) / seconds, 1),
        "ttft_p50_ms": ms(first, 50),
        "ttft_p99_ms": ms(first, 99),
        "inter_token_p50_ms": ms(gaps, 50),
        "inter_token_p99_ms": ms(gaps, 99),
    }


@contextlib.contextmanager
def collector_paused():
    """The clients' garbage collector paused, after a full pass."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def closed_loop(base, model, clients, texts):
    import httpx

    out = [None] * len(texts)
    turn = iter(range(len(texts)))
    lock = threading.Lock()

    def client():
        with httpx.Client(timeout=300) as http:
            while True:
                with lock:
                    i = next(turn, None)
                if i is None:
                    return
                out[i] = attempt(http, base, model, texts[i])

    with collector_paused():
        begin = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - begin
    return out, took


def open_loop(base, model, rate, seconds, texts, seed=0):
    import httpx

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, int(rate * seconds * 2)))
    arrivals = arrivals[arrivals < seconds]
    http = httpx.Client(
        timeout=300, limits=httpx.Limits(max_connections=len(arrivals))
    )

    def one(i):
        delay = begin + arrivals[i] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return attempt(http, base, model, texts[i % len(texts)])

    with (
        collector_paused(),
        concurrent.futures.ThreadPoolExecutor(len(arrivals)) as pool,
    ):
        begin = time.perf_counter()
        out = list(pool.map(one, range(len(arrivals))))
        took = time.perf_counter() - begin
    http.close()
    return out, took


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--rate", type=float, default=16.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import httpx

    texts = sentences()
    rows, answers = [], {}
    with tempfile.TemporaryDirectory() as home:
        log = open(os.path.join(home, "servers.log"), "w")  # noqa: SIM115
        servers = {
            "keras-attn serve": start_ours(),
            "litert-lm serve": start_theirs(home, log),
        }
        try:
            for _, base, model in servers.values():  # warm-up
                with httpx.Client(timeout=300) as http:
                    streamed(http, base, model, texts[0])
            for clients in CLIENTS:
                batch = texts[: clients * args.requests]
                runs = {name: ([], 0.0) for name in servers}
                # Rounds alternate which server goes first, so that what
                # drifts in the machine falls on both.
                for turn in range(args.rounds):
                    names = list(servers)[:: 1 if turn % 2 == 0 else -1]
                    for name in names:
                        _, base, model = servers[name]
                        out, took = closed_loop(base, model, clients, batch)
                        done, seconds = runs[name]
                        runs[name] = (done + out, seconds + took)
                        answers.setdefault(name, {}).update(
                            {
                                t: o[0]
                                for t, o in zip(batch, out, strict=True)
                                if o is not None
                            }
                        )
                for name, (out, took) in runs.items():
                    rows.append(_summary(name, f"{clients} clients", out, took))
                    print(json.dumps(rows[-1]), flush=True)
            for name, (_, base, model) in servers.items():
                out, took = open_loop(
                    base, model, args.rate, args.seconds, texts
                )
                load = f"Poisson {args.rate:g}/s"
                rows.append(_summary(name, load, out, took))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            for proc, _, _ in servers.values():
                proc.terminate()
                proc.wait(30)
    ours, theirs = answers["keras-attn serve"], answers["litert-lm serve"]
    both = [t for t in ours if t in theirs]
    same = sum(ours[t] == theirs[t] for t in both)
    out = results.save(
        os.path.join(results.RESULTS, "serving_generation.json"),
        results.meta(
            "serving_generation",
            sys.argv[1:] if argv is None else argv,
            litert_lm=_version("litert-lm"),
            ai_edge_litert=_version("ai-edge-litert"),
        ),
        rows,
        answers_equal=f"{same} of {len(both)}",
    )
    print("answers equal:", same, "of", len(both))
    print("wrote", out)


def _version(distribution):
    from importlib import metadata

    return metadata.version(distribution)


if __name__ == "__main__":
    main()
