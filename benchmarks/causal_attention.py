"""Causal self-attention on long sequences: ours against Keras MHA.

One training step (forward + gradients) of a causal self-attention layer,
batch 1, width 256, 4 heads, at each length, for `MultiHeadPositional(4,
64, position=None, feed_forward=None)` and `keras.layers.MultiHeadAttention
(4, 64)`, on whatever backend (`KERAS_BACKEND`: jax or torch) and device
the process sees. Each (layer, length) runs in a fresh process, warms up
once, then reports the median of `--reps` steps and the peak memory: the
device's peak allocation on a GPU (JAX `memory_stats`, PyTorch
`max_memory_allocated`), the growth of the process's peak resident memory
on a CPU.

    KERAS_BACKEND=jax python -m benchmarks.causal_attention \\
        --lengths 512 1024 2048 4096 [--dtype bfloat16] [--reps 5]

`--kv-heads K` compares grouped-query attention instead: 8 query heads of
64 (width 512) sharing `K` key/value heads, `MultiHeadPositional(8, 64,
num_key_value_heads=K, position=None)` against
`keras.layers.GroupQueryAttention(64, 8, K)`.

Prints a Markdown table with the ratios ours / Keras (≤ 1.0 is the goal).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

WIDTH, HEADS = 256, 4


GQA_HEADS, GQA_HEAD_DIM = 8, 64


def make_layers(layer_name, kv_heads):
    """The layer and its input width: multi-head, or grouped-query with
    `kv_heads` key/value heads."""
    import keras

    import keras_attn

    if kv_heads:
        width = GQA_HEADS * GQA_HEAD_DIM
        if layer_name == "ours":
            return keras_attn.MultiHeadPositional(
                GQA_HEADS,
                GQA_HEAD_DIM,
                num_key_value_heads=kv_heads,
                position=None,
            ), width
        return keras.layers.GroupQueryAttention(
            GQA_HEAD_DIM, GQA_HEADS, kv_heads
        ), width
    if layer_name == "ours":
        return keras_attn.MultiHeadPositional(
            HEADS, WIDTH // HEADS, position=None, feed_forward=None
        ), WIDTH
    return keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS), WIDTH


def child(layer_name, length, dtype, reps, kv_heads=0):
    import keras
    import numpy as np

    backend = keras.backend.backend()
    keras.config.set_dtype_policy(dtype)
    layer, width = make_layers(layer_name, kv_heads)
    x = keras.ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=(1, length, width)), dtype
    )
    if layer_name == "ours":
        layer(x, use_causal_mask=True)
    else:
        layer(x, x, use_causal_mask=True)

    def loss(weights, x):
        if layer_name == "ours":
            out = layer.stateless_call(weights, [], x, use_causal_mask=True)[0]
        else:
            out = layer.stateless_call(weights, [], x, x, use_causal_mask=True)[
                0
            ]
        return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32")))

    weights = [v.value for v in layer.trainable_variables]
    if backend == "jax":
        import jax

        step = jax.jit(jax.grad(loss))

        def run():
            jax.block_until_ready(step(weights, x))

        device = jax.devices()[0]
    elif backend == "torch":
        import torch

        weights = [w.detach().requires_grad_(True) for w in weights]

        def run():
            grads = torch.autograd.grad(loss(weights, x), weights)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return grads

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        raise SystemExit(f"KERAS_BACKEND must be jax or torch; got {backend}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    peak = None
    if backend == "jax" and device.platform == "gpu":
        peak = device.memory_stats()["peak_bytes_in_use"]
    elif backend == "torch" and device.type == "cuda":
        import torch

        peak = torch.cuda.max_memory_allocated()
    if peak is None:  # CPU: growth of the peak resident set, KiB -> bytes
        peak = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        ) * 1024
    times.sort()
    print(
        json.dumps(
            {
                "ms": 1000 * times[len(times) // 2],
                "mib": peak / 2**20,
                "device": str(device),
            }
        )
    )


def compare_hlo(length):
    """JAX only: the compiled training steps' ops counted by type, ours
    and Keras's, so a timing gap can be told from a difference in work."""
    import collections
    import re

    import jax
    import keras
    import numpy as np

    import keras_attn

    counts = {}
    for name in ("ours", "keras"):
        if name == "ours":
            layer = keras_attn.MultiHeadPositional(
                HEADS, WIDTH // HEADS, position=None
            )
        else:
            layer = keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS)
        x = np.random.default_rng(0).normal(size=(1, length, WIDTH))
        x = keras.ops.convert_to_tensor(x, "float32")
        count = 1 if name == "ours" else 2  # self-attention: x, or x, x
        layer(*([x] * count), use_causal_mask=True)

        def loss(weights, x, layer=layer, n=count):
            out = layer.stateless_call(
                weights, [], *([x] * n), use_causal_mask=True
            )[0]
            return keras.ops.mean(keras.ops.square(out))

        weights = [v.value for v in layer.trainable_variables]
        text = jax.jit(jax.grad(loss)).lower(weights, x).compile().as_text()
        found = re.finditer(r"= \S+ (\w[\w-]*)\(", text)
        counts[name] = collections.Counter(m.group(1) for m in found)
    ours, theirs = counts["ours"], counts["keras"]
    print(
        f"compiled ops: ours {sum(ours.values())}, keras {sum(theirs.values())}"
    )
    for op in sorted(set(ours) | set(theirs)):
        if ours[op] != theirs[op]:
            print(f"  {op}: ours {ours[op]}, keras {theirs[op]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096]
    )
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument(
        "--kv-heads",
        type=int,
        default=0,
        help="grouped-query: key/value heads (against GroupQueryAttention)",
    )
    parser.add_argument(
        "--compare-hlo",
        type=int,
        metavar="LENGTH",
        help="JAX: compare the compiled steps' ops at LENGTH, then exit",
    )
    parser.add_argument(
        "--out", help="JSON file; default results/causal_attention_BACKEND"
    )
    args = parser.parse_args()
    if args.child:
        return child(
            args.child[0],
            int(args.child[1]),
            args.dtype,
            args.reps,
            args.kv_heads,
        )
    if args.compare_hlo:
        return compare_hlo(args.compare_hlo)
    rows = []
    for length in args.lengths:
        result = {}
        for name in ("ours", "keras"):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.causal_attention",
                    "--child",
                    name,
                    str(length),
                    "--dtype",
                    args.dtype,
                    "--reps",
                    str(args.reps),
                    "--kv-heads",
                    str(args.kv_heads),
                ],
                capture_output=True,
                text=True,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
            if proc.returncode:
                result[name] = None
                print(proc.stderr[-2000:], file=sys.stderr)
            else:
                result[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append((length, result))
    import keras

    device = next((r[n]["device"] for _, r in rows for n in r if r[n]), "?")
    backend = keras.backend.backend()
    table = []
    for length, r in rows:
        row = {"backend": backend, "length": length}
        if r["ours"] and r["keras"]:
            o, k = r["ours"], r["keras"]
            row.update(
                ours_ms=o["ms"],
                ours_mib=o["mib"],
                keras_ms=k["ms"],
                keras_mib=k["mib"],
                time_ratio=o["ms"] / k["ms"],
                memory_ratio=o["mib"] / max(k["mib"], 1e-9),
            )
        table.append(row)
        print(json.dumps(row))
    from benchmarks import results

    argv = sys.argv[1:]
    record = results.meta(
        "causal_attention",
        argv,
        backend=backend,
        device=device,
        dtype=args.dtype,
        batch=1,
        width=GQA_HEADS * GQA_HEAD_DIM if args.kv_heads else WIDTH,
        heads=GQA_HEADS if args.kv_heads else HEADS,
        **({"kv_heads": args.kv_heads} if args.kv_heads else {}),
    )
    record["command"] = f"KERAS_BACKEND={backend} " + record["command"]
    kind = f"_gqa{args.kv_heads}" if args.kv_heads else ""
    name = f"causal_attention{kind}_{backend}.json"
    out = args.out or os.path.join(results.RESULTS, name)
    print("wrote", results.save(out, record, table))


if __name__ == "__main__":
    main()
