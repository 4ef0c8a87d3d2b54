"""Figure 2: time and peak memory of a training step as the sequence grows.

Layers (self-attention, batch 1, width 128, float32, TensorFlow, CPU):

- `MultiHeadPositional` (4 heads, no positions) forced onto
  `keras.ops.dot_product_attention` (no weights returned; on TensorFlow
  the layer itself takes its explicit path, see `benchmarks.mhp_paths`);
- the same layer asked for its weights (explicit softmax path);
- `AdditiveAttention(128)` in one block: a `(B, T, T, units)` hidden tensor;
- `AdditiveAttention(128, chunk_size=64)`: 64 queries at a time, each chunk
  recomputed in the backward pass (`keras.remat`).

Each (layer, length) runs in a fresh process: it builds the step, runs it
once, then reports the median of `--reps` timed steps and the growth of the
process's peak resident memory (`ru_maxrss`) during the first step. Runs
whose estimated size exceeds `--max-gib` are skipped, not attempted.

    python -m benchmarks.scaling [--lengths 64 128 ... 4096] [--reps 3]

Writes `benchmarks/results/scaling.json` and `scaling.png`.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np

LAYERS = {
    "MultiHeadPositional (fused)": "mhp_fused",
    "MultiHeadPositional (weights returned)": "mhp_explicit",
    "AdditiveAttention (one block)": "additive",
    "AdditiveAttention (chunk_size=64)": "additive_chunked",
}
WIDTH, UNITS, HEADS, BATCH = 128, 128, 4, 1


def estimate_gib(kind, t):
    """Rough size of the largest live tensors of one step, in GiB."""
    if kind == "additive":
        return 3 * BATCH * t * t * UNITS * 4 / 2**30
    if kind == "additive_chunked":
        return 3 * BATCH * 64 * t * UNITS * 4 / 2**30
    return 4 * BATCH * HEADS * t * t * 4 / 2**30


CHILD = r"""
import json, resource, sys, time
import numpy as np, tensorflow as tf, keras
import keras_attn
kind, t, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
W, U, H, B = {width}, {units}, {heads}, {batch}
if kind.startswith("mhp"):
    layer = keras_attn.MultiHeadPositional(H, W // H, position=None)
    if kind == "mhp_fused":
        layer._fused_backends = (*layer._fused_backends, "tensorflow")
elif kind == "additive":
    layer = keras_attn.AdditiveAttention(U)
else:
    layer = keras_attn.AdditiveAttention(U, chunk_size=64)
x = tf.constant(np.random.default_rng(0).normal(size=(B, t, W)), "float32")
explicit = kind == "mhp_explicit"

@tf.function
def step(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        if explicit:
            out, _ = layer(x, x, return_attention_scores=True)
        else:
            out = layer(x, x)
        loss = tf.reduce_sum(tf.square(out))
    return loss, tape.gradient(loss, [x, *layer.trainable_weights])

layer(x[:, :2], x[:, :2])  # build on a tiny input
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tf.nest.map_structure(lambda v: v.numpy(), step(x))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(reps):
    start = time.perf_counter()
    tf.nest.map_structure(lambda v: v.numpy(), step(x))
    times.append(time.perf_counter() - start)
print(json.dumps({{"ms": float(np.median(times) * 1e3),
                  "peak_mib": (peak - before) / 1024}}))
"""


def run_one(kind, t, reps):
    code = CHILD.format(width=WIDTH, units=UNITS, heads=HEADS, batch=BATCH)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", code, kind, str(t), str(reps)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label in LAYERS:
        pts = [r for r in rows if r["layer"] == label and "ms" in r]
        if not pts:
            continue
        t = [r["seq"] for r in pts]
        axes[0].loglog(t, [r["ms"] for r in pts], "o-", label=label)
        axes[1].loglog(
            t, [max(r["peak_mib"], 1) for r in pts], "o-", label=label
        )
    axes[0].set(xlabel="sequence length T", ylabel="training step (ms)")
    axes[1].set(xlabel="sequence length T", ylabel="peak memory growth (MiB)")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"batch {BATCH}, width {WIDTH}, CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    import keras
    import tensorflow as tf

    p = argparse.ArgumentParser()
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[64, 128, 256, 512, 1024, 2048, 4096],
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-gib", type=float, default=12.0)
    p.add_argument("--out", default="benchmarks/results/scaling.json")
    args = p.parse_args(argv)
    rows = []
    for label, kind in LAYERS.items():
        for t in args.lengths:
            row = {"layer": label, "seq": t}
            if estimate_gib(kind, t) > args.max_gib:
                row["skipped"] = (
                    f"needs about {estimate_gib(kind, t):.0f} GiB "
                    f"(> --max-gib {args.max_gib})"
                )
            else:
                row.update(run_one(kind, t, args.reps))
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {
        "command": "python -m benchmarks.scaling "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "batch": BATCH,
        "width": WIDTH,
        "units": UNITS,
        "heads": HEADS,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    plot(rows, os.path.splitext(args.out)[0] + ".png")
    # Growth exponents between the two longest measured lengths.
    for label in LAYERS:
        pts = [r for r in rows if r["layer"] == label and "ms" in r]
        if len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            k = np.log(b["ms"] / a["ms"]) / np.log(b["seq"] / a["seq"])
            print(f"{label}: time grows as T^{k:.2f} near T={b['seq']}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
