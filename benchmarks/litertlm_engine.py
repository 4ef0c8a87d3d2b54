"""Prefill and decode speed of one decoder-only model three ways:
Google's LiteRT-LM engine on its `.litertlm` bundle, the runtime's
`StreamingDecoder` on a streaming LiteRT file, and Keras's cached
greedy loop (`CausalLM.call_with_cache` in a `tf.function`), on one
thread and two.

The model has the shipped decoder-only translator's shape
(`recipes/translation_lm.py`'s settings: 3 blocks, width 256, 4 query
and 2 key/value heads, 4,000 tokens, a 128-token context), random
weights; both LiteRT files are written from it with int8 weights
(dynamic range, as shipped), Keras runs its float weights. Each runner
is a fresh process (its threads set before anything runs); it prefills
a 32-token prompt, then decodes 64 tokens (no stop token), `--repeats`
times, and reports medians, tokens per second, and its peak resident
memory (`VmHWM`). The engine runs twice: with its default activation
type (its log says float16 for a text decoder) and with float32.

    python -m benchmarks.litertlm_engine [--repeats 5]

Writes `benchmarks/results/litertlm_engine.json`.
"""

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks import results

PREFILL, DECODE = 32, 64
SHAPE = dict(
    vocabulary_size=4000,
    num_layers=3,
    num_heads=4,
    hidden_dim=256,
    intermediate_dim=768,
    num_key_value_heads=2,
)
CONTEXT = 128


def random_generator():
    """`(model, TextGenerator)`: the model of `SHAPE` with seeded random
    weights and a word-per-token tokenizer (`[start]` 2, `[end]` 3)."""
    import keras

    from keras_attn.models import CausalLM, TextGenerator
    from keras_attn.translation.tokenizer_json import wordpiece_tokenizer

    keras.utils.set_random_seed(0)
    model = CausalLM(**SHAPE)
    model(np.ones((1, 4), "int32"))
    words = ["[PAD]", "[UNK]", "[start]", "[end]"]
    words += [f"w{i}" for i in range(len(words), SHAPE["vocabulary_size"])]
    tokenizer = wordpiece_tokenizer(words, special_tokens=words[2:4])
    generator = TextGenerator(model, tokenizer, "[start]", ["[end]"], CONTEXT)
    return model, generator


def build(folder):
    """The model, its bundle and its streaming file, under `folder`."""
    from keras_attn.export import export_streaming_tflite

    model, generator = random_generator()
    generator.export_litertlm(
        os.path.join(folder, "model.litertlm"),
        prefill_lengths=(8, PREFILL),
        quantize="dynamic",
    )
    export_streaming_tflite(
        _prefill_and_step(model),
        os.path.join(folder, "streaming.tflite"),
        start_signature=[{"prompt": _spec(PREFILL)}],
        quantize="dynamic",
        padding="left",
    )
    model.save_weights(os.path.join(folder, "model.weights.h5"))


def _spec(length):
    import tensorflow as tf

    return tf.TensorSpec([1, length], tf.int32)


def _prefill_and_step(model):
    """`(start, step_fn)` of `export_streaming_tflite` for `model`: the
    prompt through the cache, then one token at `index` after it."""
    from keras import ops

    def start(prompt):
        cache = model.empty_cache(prompt, CONTEXT)
        _, cache = model.call_with_cache(prompt, cache, 0)
        length = ops.sum(ops.ones_like(prompt[0]))  # a value, not a constant
        return {"cache": cache, "length": ops.reshape(length, (1,))}

    def step_fn(tokens, state, index):
        logits, cache = model.call_with_cache(
            tokens[:, None], state["cache"], state["length"][0] + index
        )
        return logits[:, 0], {**state, "cache": cache}, None

    return start, step_fn


def _peak_mib():
    """This process's peak resident memory (`VmHWM`: unlike `ru_maxrss`,
    not carried over from the parent it was forked from)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def _engine(folder, threads, repeats, activations=None):
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    runs = []
    for _ in range(repeats):
        info = litert_lm.Benchmark(
            model_path=os.path.join(folder, "model.litertlm"),
            backend=litert_lm.Backend.CPU(thread_count=threads),
            prefill_tokens=PREFILL,
            decode_tokens=DECODE,
            prompt="w5 " * PREFILL,
            activation_data_type=activations
            and getattr(litert_lm.ActivationDataType, activations),
        ).run()
        runs.append(
            (
                info.last_prefill_token_count
                / info.last_prefill_tokens_per_second,
                info.last_decode_token_count
                / info.last_decode_tokens_per_second,
                info.last_prefill_token_count,
                info.last_decode_token_count,
            )
        )
    return runs


def _streaming(folder, threads, repeats):
    from keras_attn_runtime import StreamingDecoder

    decoder = StreamingDecoder(
        os.path.join(folder, "streaming.tflite"),
        num_threads=threads,
        cpu_kernels="xnnpack",
    )
    prompt = np.full((1, PREFILL), 5, "int32")
    runs = []
    for _ in range(repeats):
        begin = time.perf_counter()
        state = decoder.start(prompt=prompt)
        prefilled = time.perf_counter()
        token = np.array([5], "int32")
        for i in range(DECODE):
            logits, state, _ = decoder.step(token, i, state)
            token = np.argmax(logits, -1).astype("int32")
        decoded = time.perf_counter() - prefilled
        runs.append((prefilled - begin, decoded, PREFILL, DECODE))
    return runs


def _keras(folder, threads, repeats):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from keras_attn.models import CausalLM

    model = CausalLM(**SHAPE)
    model(np.ones((1, 4), "int32"))
    model.load_weights(os.path.join(folder, "model.weights.h5"))
    start, step_fn = _prefill_and_step(model)
    start = tf.function(start)
    step = tf.function(step_fn, reduce_retracing=True)
    prompt = tf.constant(np.full((1, PREFILL), 5, "int32"))
    runs = []
    for _ in range(repeats + 1):  # the first traces
        begin = time.perf_counter()
        state = start(prompt)
        state["length"].numpy()
        prefilled = time.perf_counter()
        token = tf.constant([5])
        for i in range(DECODE):
            logits, state, _ = step(token, state, tf.constant(i))
            token = tf.argmax(logits, -1, output_type=tf.int32)
        token.numpy()
        decoded = time.perf_counter() - prefilled
        runs.append((prefilled - begin, decoded, PREFILL, DECODE))
    return runs[1:]


def _engine_float32(folder, threads, repeats):
    return _engine(folder, threads, repeats, "FLOAT32")


RUNNERS = {
    "LiteRT-LM engine (.litertlm), its default activations": _engine,
    "LiteRT-LM engine (.litertlm), float32 activations": _engine_float32,
    "StreamingDecoder (XNNPACK)": _streaming,
    "Keras cached greedy (tf.function)": _keras,
}


def _child(name, folder, threads, repeats, queue):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    runs = RUNNERS[name](folder, threads, repeats)
    queue.put((runs, _peak_mib()))


def run_one(name, folder, threads, repeats):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(
        target=_child, args=(name, folder, threads, repeats, queue)
    )
    child.start()
    runs, peak = queue.get(timeout=1800)
    child.join()
    prefill = float(np.median([r[0] for r in runs]))
    decode = float(np.median([r[1] for r in runs]))
    return {
        "runner": name,
        "threads": threads,
        "prefill_tokens": runs[0][2],
        "decode_tokens": runs[0][3],
        "prefill_ms": round(prefill * 1e3, 2),
        "prefill_tokens_per_s": round(runs[0][2] / prefill, 1),
        "decode_ms_per_token": round(decode * 1e3 / runs[0][3], 3),
        "decode_tokens_per_s": round(runs[0][3] / decode, 1),
        "peak_resident_mib": peak,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import ai_edge_litert

    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        sizes = {
            name: os.path.getsize(os.path.join(folder, name))
            for name in ("model.litertlm", "streaming.tflite")
        }
        rows = []
        for threads in (1, 2):
            for name in RUNNERS:
                row = run_one(name, folder, threads, args.repeats)
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = results.save(
        os.path.join(results.RESULTS, "litertlm_engine.json"),
        results.meta(
            "litertlm_engine",
            sys.argv[1:] if argv is None else argv,
            ai_edge_litert=getattr(ai_edge_litert, "__version__", "2.3"),
            litert_lm=_version("litert-lm-api"),
            file_bytes=sizes,
        ),
        rows,
    )
    print("wrote", out)


def _version(distribution):
    from importlib import metadata

    return metadata.version(distribution)


if __name__ == "__main__":
    main()
