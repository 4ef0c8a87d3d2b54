"""Rotary and ALiBi positions, grouped-query decoding: their cost.

Two comparisons, each within one run (repetitions interleaved, medians):

- `train`: one training step (forward + gradients, `tf.function`) of a
  causal `MultiHeadPositional` self-attention layer, batch 8, width 256,
  4 heads, with `position=None`, `"rotary"` and `"alibi"`; ratio to
  `position=None` (the goal is ≤ 1.10 on CPU).
- `decode`: one cached decoding step at position `context − 1` of a
  `MultiHeadPositional(8, 64, position="rotary")` with `num_key_value_heads`
  8, 2 and 1, batch 1; step time and cache bytes, ratios to 8 heads
  (memory should fall by the group factor).

    python -m benchmarks.positions_heads --seq 256 1024 --context 4096 \\
        --out benchmarks/results/positions_heads.json
"""

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.results import meta, save


def timed(fn, reps):
    """Median seconds of `fn()` over `reps` calls per round, interleaved
    by the caller."""
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def train_rows(lengths, reps, rounds):
    import tensorflow as tf

    from keras_attn import MultiHeadPositional

    rows = []
    for length in lengths:
        x = tf.constant(
            np.random.default_rng(0).normal(size=(8, length, 256)), "float32"
        )
        steps = {}
        for position in (None, "rotary", "alibi"):
            layer = MultiHeadPositional(4, 64, position=position)
            layer(x, use_causal_mask=True)

            @tf.function
            def step(x, layer=layer):
                with tf.GradientTape() as tape:
                    y = layer(x, use_causal_mask=True)
                    loss = tf.reduce_mean(tf.square(y))
                return tape.gradient(loss, layer.trainable_variables)

            step(x)
            steps[position] = step
        times = {p: [] for p in steps}
        for _ in range(rounds):
            for p, step in steps.items():
                times[p].append(timed(lambda s=step, x=x: s(x), reps))
        base = statistics.median(times[None])
        for p in ("rotary", "alibi"):
            ms = statistics.median(times[p])
            rows.append(
                {
                    "part": "train step",
                    "position": p,
                    "seq": length,
                    "ours_ms": 1000 * ms,
                    "keras_ms": 1000 * base,
                    "time_ratio": ms / base,
                }
            )
    return rows


def decode_rows(context, reps, rounds):
    import tensorflow as tf

    from keras_attn import MultiHeadPositional

    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(1, 1, 512)), "float32")
    steps, sizes = {}, {}
    for kv in (8, 2, 1):
        layer = MultiHeadPositional(
            8, 64, position="rotary", num_key_value_heads=kv
        )
        cache = layer.empty_cache(1, context)
        cache = tf.constant(rng.normal(size=cache.shape), "float32")
        layer(x, cache=cache, cache_update_index=0)

        @tf.function
        def step(x, cache, layer=layer):
            return layer(x, cache=cache, cache_update_index=context - 1)

        step(x, cache)
        steps[kv] = (step, cache)
        sizes[kv] = int(np.prod(cache.shape)) * 4
    times = {kv: [] for kv in steps}
    for _ in range(rounds):
        for kv, (step, cache) in steps.items():
            times[kv].append(timed(lambda s=step, c=cache: s(x, c), reps))
    base = statistics.median(times[8])
    return [
        {
            "part": "decode step",
            "num_key_value_heads": kv,
            "seq": context,
            "ours_ms": 1000 * statistics.median(times[kv]),
            "keras_ms": 1000 * base,
            "time_ratio": statistics.median(times[kv]) / base,
            "cache_mib": sizes[kv] / 2**20,
            "memory_ratio": sizes[kv] / sizes[8],
        }
        for kv in (2, 1)
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows = train_rows(args.seq, args.reps, args.rounds)
    rows += decode_rows(args.context, 10 * args.reps, args.rounds)
    for row in rows:
        print(row)
    if args.out:
        argv = sys.argv[1:] if argv is None else argv
        save(args.out, meta("positions_heads", argv, batch=8), rows)


if __name__ == "__main__":
    main()
