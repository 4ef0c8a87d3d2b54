"""What a decoder-only bundle's streams could get on this machine, and
what they get: tokens a second at 1, 4 and 16 streams against two
ceilings.

- **Memory**: a call reads every weight once, whatever its rows, so a
  call takes at least `weight bytes / bandwidth`; the bandwidth is one
  core's read rate of a 256 MiB array (NumPy's `sum`).
- **Arithmetic**: a row costs about one multiply-add a parameter (the
  output layer is tied to the embedding), so a call of `R` rows takes at
  least `R x parameters / rate`; the rate is one core's int8
  multiply-adds a second in LiteRT's own int8-weight kernels (a
  `2048 x 2048` dense layer with int8 weights on 256 rows, under the
  Interpreter and XNNPACK, as the copies run).

The ceiling of `R` rows a call on `C` copies (a core each) is
`C x R / max(memory floor, arithmetic floor)` tokens a second; a stream
a call has `R = 1`. Measured in-process (`BundleGenerator`, no HTTP),
closed loop: `S` threads each decoding seeded prompts of 4 to 12 words
to a stop token or the end of the context.

Also: the median time of a call of each decode signature (LiteRT-LM's
`decode`, `decode_rows_<R>`), one copy.

Models: the shipped decoder-only translator (its bundle, a stream a
call: it has no `decode_rows_<R>` signatures), a model of its shape with
seeded random weights exported with them, and the model seven times
larger of `benchmarks.serving_rows` (21.4M parameters), both ways.

    python -m benchmarks.decode_floors [--seconds 6]

Writes `benchmarks/results/decode_floors.json`.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import results
from benchmarks.serving_generation import sentences
from benchmarks.serving_rows import SHAPE as LARGE
from benchmarks.serving_rows import build, prompts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models", "translation_en_fr_lm")
STREAMS = (1, 4, 16)


def bandwidth():
    """One core's read rate, bytes a second (the best of five sums of a
    256 MiB array)."""
    data = np.ones(64 << 20, "float32")
    best = min(_timed(data.sum) for _ in range(5))
    return data.nbytes / best


def _timed(fn):
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def int8_rate():
    """One core's int8-weight multiply-adds a second in LiteRT (the
    best of ten calls)."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    rows, width = 256, 2048
    layer = tf.keras.layers.Dense(width, use_bias=False)
    layer.build((None, width))
    fn = tf.function(
        lambda x: layer(x),
        input_signature=[tf.TensorSpec([rows, width], tf.float32)],
    )
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [fn.get_concrete_function()], layer
    )
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights
    interpreter = Interpreter(model_content=converter.convert(), num_threads=1)
    runner = interpreter.get_signature_runner()
    (name,) = runner.get_input_details()
    x = np.random.default_rng(0).normal(size=(rows, width)).astype("float32")
    runner(**{name: x})
    best = min(_timed(lambda: runner(**{name: x})) for _ in range(10))
    return rows * width * width / best


def weight_bytes(folder):
    """The bytes of the bundle's LiteRT model (its weights, mostly)."""
    from keras_attn_runtime.generator import bundle_model

    data, _ = bundle_model(os.path.join(folder, "model.litertlm"))
    return len(data)


def call_costs(folder):
    """`{signature: ms}`: the median of 20 calls of each of the bundle's
    decode signatures on one copy (caches of zeros, rows at position
    60)."""
    from keras_attn_runtime.engine import LiteRTModel
    from keras_attn_runtime.generator import bundle_model

    data, model = bundle_model(os.path.join(folder, "model.litertlm"))
    litert = LiteRTModel(data, model, folder, interpreter=True)
    costs = {}
    for name in sorted(litert.signatures):
        if not name.startswith("decode"):
            continue
        inputs = litert.signatures[name]["inputs"]
        feed = {k: np.zeros(v["shape"], v["dtype"]) for k, v in inputs.items()}
        feed["tokens"][...] = 5
        if name != "decode":
            feed["input_pos"][...] = 60
        runner = litert.runner(name)
        runner(**feed)
        took = sorted(
            _timed(lambda r=runner, f=feed: r(**f)) for _ in range(20)
        )
        costs[name] = round(took[10] * 1e3, 2)
    return costs


def tokens_per_second(folder, streams, loops, rows, seconds):
    """`(tokens a second, rows a call)` of `streams` threads for
    `seconds` on `loops` copies."""
    from keras_attn_runtime.generator import BundleGenerator

    generator = BundleGenerator(folder, loops=loops, rows=rows)
    texts = (
        prompts(64) if "w4" in generator.tokenizer.get_vocab() else sentences()
    )
    list(generator.token_ids(texts[0]))  # warm-up
    counts, stop = [0] * streams, threading.Event()

    def client(i):
        turn = i
        while not stop.is_set():
            for _ in generator.token_ids(texts[turn % len(texts)], stop):
                counts[i] += 1
            turn += streams

    threads = [
        threading.Thread(target=client, args=(i,)) for i in range(streams)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    total = sum(counts)
    took = time.perf_counter() - began
    stop.set()
    for t in threads:
        t.join()
    loops_ = generator.row_loops
    per_call = (
        sum(r.rows_decoded for r in loops_)
        / max(sum(r.calls for r in loops_), 1)
        if loops_
        else 1.0
    )
    return total / took, per_call


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args(argv)
    from benchmarks.litertlm_engine import SHAPE as SMALL

    memory, rate = bandwidth(), int8_rate()
    print(f"read {memory / 1e9:.1f} GB/s, int8 {rate / 1e9:.1f} GMAC/s")
    with open(os.path.join(SHIPPED, "metrics.json"), encoding="utf-8") as f:
        shipped = json.load(f)["parameters"]
    rows, costs = [], {}
    with tempfile.TemporaryDirectory() as home:
        models = [("shipped decoder (a stream a call)", SHIPPED, shipped, 1)]
        for label, shape in (("shipped shape", SMALL), ("21.4M", LARGE)):
            folder = os.path.join(home, label.replace(" ", "_"))
            parameters = build(folder, (1, 4, 16), shape)
            models.append(
                (f"{label}, streams in one call", folder, parameters, None)
            )
            models.append(
                (f"{label}, a stream a call", folder, parameters, False)
            )
        for label, folder, parameters, mode in models:
            size = weight_bytes(folder)
            if mode is None:
                costs[label.split(",")[0]] = call_costs(folder)
                print(json.dumps(costs), flush=True)
            for loops in (1, 2):
                for streams in STREAMS:
                    got, per_call = tokens_per_second(
                        folder, streams, loops, mode, args.seconds
                    )
                    r = per_call if mode is None else 1.0
                    call = max(size / memory, r * parameters / rate)
                    row = {
                        "model": label,
                        "parameters": parameters,
                        "weight_mb": round(size / 1e6, 1),
                        "copies": loops,
                        "streams": streams,
                        "tokens_per_s": round(got, 1),
                        "rows_a_call": round(r, 2),
                        "memory_ceiling": round(loops * r * memory / size, 1),
                        "arithmetic_ceiling": round(
                            loops * rate / parameters, 1
                        ),
                        "of_ceiling": round(got / (loops * r / call), 3),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = results.save(
        os.path.join(results.RESULTS, "decode_floors.json"),
        results.meta("decode_floors", sys.argv[1:] if argv is None else argv),
        rows,
        call_ms=costs,
        read_gb_per_s=round(memory / 1e9, 2),
        int8_gmac_per_s=round(rate / 1e9, 2),
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
