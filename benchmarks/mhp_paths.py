"""MultiHeadPositional on TensorFlow: explicit einsum path vs the fused op.

`keras.ops.dot_product_attention` has no fused kernel on TensorFlow: it runs
the two einsums of the explicit path but multiplies the `(B, H, Tq, Tv)`
logits by the scale instead of the `(B, Tq, H, K)` query. This script times,
in one run with interleaved repetitions (`benchmarks.layer_speed.time_pair`),
the training step of

1. the layer as it is (explicit path on TF) against a subclass forced onto
   `dot_product_attention`, and
2. the layer against `keras.layers.MultiHeadAttention` (figure 1's pair),

and, under `jit_compile=True`, counts the instructions of the optimized
XLA HLO of both figure-1 steps, to show whether the compiled programs
differ.

    python -m benchmarks.mhp_paths [--seq 64 256] [--reps 15]
"""

import argparse
import collections
import json
import os
import re
import sys

import keras
import numpy as np
import tensorflow as tf

import keras_attn
from benchmarks.layer_speed import step_fn, time_pair


class FusedOpMHP(keras_attn.MultiHeadPositional):
    """The layer forced onto `keras.ops.dot_product_attention` on TF too."""

    _fused_backends = ("jax", "torch", "tensorflow")


def hlo_opcodes(layer, x):
    """Opcode counts of the optimized HLO of one jit-compiled train step."""
    step = step_fn(layer, "self", True)
    step(x)  # build
    hlo = step.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    ops = re.findall(r"=\s*\S+\s+([a-z][a-z0-9-]*)\(", hlo)
    return collections.Counter(ops)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, nargs="+", default=[64, 256])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", default="benchmarks/results/mhp_paths.json")
    args = p.parse_args(argv)
    heads = 4
    key_dim = args.width // heads

    def ours():
        return keras_attn.MultiHeadPositional(
            heads, key_dim, position=None, feed_forward=None
        )

    def fused():
        return FusedOpMHP(heads, key_dim, position=None, feed_forward=None)

    def builtin():
        return keras.layers.MultiHeadAttention(heads, key_dim)

    rng = np.random.default_rng(0)
    rows = []
    for seq in args.seq:
        x = tf.constant(
            rng.normal(size=(args.batch, seq, args.width)).astype("float32")
        )
        for label, make_b in (("fused op", fused), ("keras MHA", builtin)):
            for jit in (False, True):
                keras.utils.set_random_seed(0)
                r = time_pair(ours, make_b, "self", x, jit, args.reps)
                rows.append({"vs": label, "seq": seq, "jit": jit, **r})
                print(
                    f"explicit vs {label:9s} T={seq:5d} jit={jit!s:5s} "
                    f"explicit={r['ours_ms']:8.2f}ms "
                    f"other={r['keras_ms']:8.2f}ms ratio={r['ratio']:.3f}",
                    flush=True,
                )
    x = tf.constant(
        rng.normal(size=(args.batch, args.seq[0], args.width)).astype("float32")
    )
    counts = {
        "ours": hlo_opcodes(ours(), x),
        "keras MHA": hlo_opcodes(builtin(), x),
        "fused op": hlo_opcodes(fused(), x),
    }
    heavy = ("dot", "convolution", "fusion", "reduce", "custom-call")
    hlo = {
        name: {
            "instructions": sum(c.values()),
            **{op: c.get(op, 0) for op in heavy},
        }
        for name, c in counts.items()
    }
    for name, row in hlo.items():
        print(f"optimized HLO (T={args.seq[0]}) {name:9s} {row}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "command": "python -m benchmarks.mhp_paths "
                + " ".join(sys.argv[1:] if argv is None else argv),
                "tensorflow": tf.__version__,
                "keras": keras.__version__,
                "rows": rows,
                "hlo": hlo,
            },
            f,
            indent=2,
        )
    return rows, hlo


if __name__ == "__main__":
    main()
