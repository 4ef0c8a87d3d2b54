"""Training-step time of keras_attn layers vs the Keras built-ins.

Each pair does the same math; the two are timed interleaved (A, B, A, B...)
in one process, and we report the median time of each and the median of
the per-repetition ratios ours / built-in.

    python -m benchmarks.layer_speed [--seq 64 256 1024] [--reps 15]

Writes `benchmarks/results/layer_speed.json` and prints a table.
"""

import argparse
import json
import os
import platform
import shlex
import sys
import time

import numpy as np


def make_pairs(width, units=128):
    import keras
    from keras import ops

    import keras_attn

    class DenseAdditive(keras.layers.Layer):
        """Dense(units) on query and key + keras AdditiveAttention."""

        def __init__(self):
            super().__init__()
            self.wq = keras.layers.Dense(units, use_bias=False)
            self.wk = keras.layers.Dense(units, use_bias=True)
            self.att = keras.layers.AdditiveAttention(use_scale=True)

        def call(self, q, v):
            return self.att([self.wq(q), v, self.wk(v)])

    class FormulaSSA(keras.layers.Layer):
        """A = softmax(W_s2 tanh(W_s1 Hᵀ)), M = AH with Dense + einsum."""

        def __init__(self, hops=30, da=350):
            super().__init__()
            self.d1 = keras.layers.Dense(da, use_bias=False, activation="tanh")
            self.d2 = keras.layers.Dense(hops, use_bias=False)

        def call(self, h):
            a = ops.softmax(ops.transpose(self.d2(self.d1(h)), (0, 2, 1)))
            return ops.einsum("brt,btd->brd", a, h)

    heads = 4
    return {
        "MultiHeadPositional vs MultiHeadAttention": (
            lambda: keras_attn.MultiHeadPositional(
                heads, width // heads, position=None, feed_forward=None
            ),
            lambda: keras.layers.MultiHeadAttention(heads, width // heads),
            "self",
        ),
        "AdditiveAttention vs Dense+AdditiveAttention": (
            lambda: keras_attn.AdditiveAttention(units),
            DenseAdditive,
            "cross",
        ),
        "Attention(dot) vs keras Attention": (
            lambda: keras_attn.Attention("dot"),
            lambda: _ListCall(keras.layers.Attention()),
            "cross",
        ),
        "StructuredSelfAttention vs Dense+softmax+einsum": (
            lambda: keras_attn.StructuredSelfAttention(
                350, 30, penalty_coefficient=0.0
            ),
            FormulaSSA,
            "single",
        ),
    }


class _ListCall:
    """Call a built-in that takes `[query, value]` with (query, value)."""

    def __init__(self, layer):
        self.layer = layer

    def __call__(self, q, v):
        return self.layer([q, v])

    @property
    def trainable_weights(self):
        return self.layer.trainable_weights


def step_fn(layer, kind, jit):
    import tensorflow as tf

    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            if kind == "self":
                out = layer(x, x)
            elif kind == "cross":
                out = layer(x, x)
            else:
                out = layer(x)
            loss = tf.reduce_sum(tf.square(out))
        grads = tape.gradient(loss, [x, *layer.trainable_weights])
        return loss, grads

    return step


def time_pair(make_a, make_b, kind, x, jit, reps):
    import tensorflow as tf

    a, b = make_a(), make_b()
    fa, fb = step_fn(a, kind, jit), step_fn(b, kind, jit)
    for f in (fa, fb):  # build, trace, warm up
        for _ in range(2):
            tf.nest.map_structure(lambda t: t.numpy(), f(x))
    ta, tb = [], []
    for _ in range(reps):
        for f, acc in ((fa, ta), (fb, tb)):
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), f(x))
            acc.append(time.perf_counter() - start)
    ta, tb = np.array(ta), np.array(tb)
    return {
        "ours_ms": float(np.median(ta) * 1e3),
        "keras_ms": float(np.median(tb) * 1e3),
        "ratio": float(np.median(ta / tb)),
    }


def main(argv=None):
    import keras
    import tensorflow as tf

    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--jit", choices=["both", "off", "on"], default="both")
    p.add_argument(
        "--only", default=None, help="run the pairs whose name contains this"
    )
    p.add_argument("--out", default="benchmarks/results/layer_speed.json")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    jits = {"both": [False, True], "off": [False], "on": [True]}[args.jit]
    for seq in args.seq:
        x = tf.constant(
            rng.normal(size=(args.batch, seq, args.width)).astype("float32")
        )
        for name, (make_a, make_b, kind) in make_pairs(args.width).items():
            if args.only and args.only not in name:
                continue
            if "Additive" in name and seq > 256:
                # (B, T, T, units) floats: 16 GiB at T=1024 for both.
                rows.append(
                    {
                        "pair": name,
                        "seq": seq,
                        "skipped": "B*T*T*units tensor exceeds memory",
                    }
                )
                continue
            for jit in jits:
                keras.utils.set_random_seed(0)
                r = time_pair(make_a, make_b, kind, x, jit, args.reps)
                rows.append({"pair": name, "seq": seq, "jit": jit, **r})
                print(
                    f"{name:48s} T={seq:5d} jit={jit!s:5s} "
                    f"ours={r['ours_ms']:8.2f}ms keras={r['keras_ms']:8.2f}ms "
                    f"ratio={r['ratio']:.3f}",
                    flush=True,
                )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = {
        "command": "python -m benchmarks.layer_speed "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "batch": args.batch,
        "width": args.width,
        "reps": args.reps,
    }
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
