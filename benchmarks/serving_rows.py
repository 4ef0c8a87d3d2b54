"""Many streams in one call, served: a decoder-only model seven times
the shipped one, its streams decoded together (the bundle's
`decode_rows_<R>` signatures) or one a call, against `litert-lm serve`,
in one run on one machine.

The model is `CausalLM(8000, num_layers=6, hidden_dim=512, num_heads=8,
num_key_value_heads=4, intermediate_dim=2048)` (21.4M parameters),
seeded random weights, a word-per-token tokenizer, a 128-token context,
int8 weights (`quantize="dynamic"`). It is exported twice: with the
default `decode_rows` (served by `keras-attn serve`, its streams in one
call a copy) and with `decode_rows=()` (`keras-attn serve` runs LiteRT-LM's
`decode`, a stream a call, as before rows existed); `litert-lm serve`
runs the second bundle.

Each request is one of `--prompts` seeded prompts of 4 to 12 words, as
an OpenAI streaming chat completion, greedy; an answer runs to a stop
token or the end of the context. Loads: one client (every prompt in
turn: each prompt's answer alone), 16 clients in a closed loop, and
Poisson arrivals at `--rate` a second for `--seconds`, over the same
prompts. Reported for each server and load: streams and tokens a second
(tokens counted by the model's tokenizer), the time to the first token
(TTFT) and between tokens (ITL), p50 and p99, requests failed, and how
many answers under load equal the same prompt's answer alone.

    python -m benchmarks.serving_rows [--prompts 32] [--rate 4]

Needs `litert-lm`. Writes `benchmarks/results/serving_rows.json`.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from benchmarks import results
from benchmarks.serving_generation import (
    _summary,
    _version,
    closed_loop,
    open_loop,
    start_theirs,
    streamed,
)
from tests.serving.live import start

SHAPE = dict(
    vocabulary_size=8000,
    num_layers=6,
    hidden_dim=512,
    num_heads=8,
    num_key_value_heads=4,
    intermediate_dim=2048,
)
CONTEXT = 128
START, END = "[start]", "[end]"


def build(folder, decode_rows, shape=SHAPE):
    """The folder (`generation.json`, `tokenizer.json`, `model.litertlm`)
    of a `CausalLM` of `shape` (default: this benchmark's model), seeded
    random weights, at `folder`, with `decode_rows` signatures; returns
    the parameter count."""
    import keras

    from keras_attn.models import CausalLM, TextGenerator
    from keras_attn.translation.tokenizer_json import wordpiece_tokenizer

    keras.utils.set_random_seed(0)
    model = CausalLM(**shape)
    model(np.ones((1, 4), "int32"))
    words = ["[PAD]", "[UNK]", START, END]
    words += [f"w{i}" for i in range(len(words), shape["vocabulary_size"])]
    tokenizer = wordpiece_tokenizer(words, special_tokens=[START, END])
    generator = TextGenerator(model, tokenizer, START, [END], CONTEXT)
    generator.save(folder)
    os.remove(os.path.join(folder, "model.keras"))  # served from its bundle
    generator.export_litertlm(
        os.path.join(folder, "model.litertlm"),
        prefill_lengths=(8, 32),
        quantize="dynamic",
        decode_rows=decode_rows,
    )
    return int(model.count_params())


def prompts(count, seed=0):
    rng = np.random.default_rng(seed)
    vocabulary = SHAPE["vocabulary_size"]
    return [
        " ".join(f"w{i}" for i in rng.integers(4, vocabulary, n))
        for n in rng.integers(4, 13, count)
    ]


def _tokens(tokenizer, out):
    return sum(
        len(tokenizer.encode(o[0], add_special_tokens=False).ids)
        for o in out
        if o is not None
    )


def run_loads(base, model, texts, args, tokenizer):
    """The rows of one server: one client, 16 clients, Poisson."""
    import httpx

    with httpx.Client(timeout=600) as http:  # warm-up
        streamed(http, base, model, texts[0])
    rows, alone = [], {}
    loads = [
        ("1 client", lambda: closed_loop(base, model, 1, texts)),
        ("16 clients", lambda: closed_loop(base, model, 16, texts)),
        (
            f"Poisson {args.rate:g}/s",
            lambda: open_loop(base, model, args.rate, args.seconds, texts),
        ),
    ]
    for load, run in loads:
        out, took = run()
        asked = texts if load != loads[2][0] else None
        if asked is None:  # Poisson: prompts in turn
            asked = [texts[i % len(texts)] for i in range(len(out))]
        if load == "1 client":
            alone = {t: o[0] for t, o in zip(asked, out, strict=True) if o}
        same = sum(
            o is not None and alone.get(t) == o[0]
            for t, o in zip(asked, out, strict=True)
        )
        row = _summary("", load, out, took)
        row["tokens_per_s"] = round(_tokens(tokenizer, out) / took, 1)
        row["equal_to_alone"] = f"{same} of {len(out)}"
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    texts = prompts(args.prompts)
    rows = []
    with tempfile.TemporaryDirectory() as home:
        folders = {}
        for kind, counts in (("rows", (1, 4, 16)), ("one", ())):
            folders[kind] = os.path.join(home, f"decoder_{kind}")
            parameters = build(folders[kind], counts)
        tokenizer = Tokenizer.from_file(
            os.path.join(folders["rows"], "tokenizer.json")
        )
        sizes = {
            k: os.path.getsize(os.path.join(f, "model.litertlm"))
            for k, f in folders.items()
        }
        servers = (
            ("keras-attn serve, streams in one call", "rows"),
            ("keras-attn serve, a stream a call", "one"),
            ("litert-lm serve", "litert-lm"),
        )
        log = open(os.path.join(home, "servers.log"), "w")  # noqa: SIM115
        for name, kind in servers:
            if kind == "litert-lm":
                bundle = os.path.join(folders["one"], "model.litertlm")
                os.makedirs(os.path.join(home, "litert"))
                proc, base, model = start_theirs(
                    os.path.join(home, "litert"), log, bundle
                )
            else:
                proc, port = start(folders[kind], "--grpc-port", "0")
                model = os.path.basename(folders[kind])
                base = f"http://127.0.0.1:{port}/openai/v1"
            try:
                for row in run_loads(base, model, texts, args, tokenizer):
                    row["server"] = name
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
        shutil.rmtree(os.path.join(home, "litert"), ignore_errors=True)
    out = results.save(
        os.path.join(results.RESULTS, "serving_rows.json"),
        results.meta(
            "serving_rows",
            sys.argv[1:] if argv is None else argv,
            litert_lm=_version("litert-lm"),
            ai_edge_litert=_version("ai-edge-litert"),
        ),
        rows,
        parameters=parameters,
        bundle_bytes=sizes,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
