"""Key/value cache policies of `MultiHeadPositional`: memory, one decode
step's time and the int8 cache's error.

For one layer (8 key/value heads of 64, batch 1, float32):

- memory: the bytes of `empty_cache`'s real state for sequences of 1k,
  8k and 32k positions, under each policy;
- time: one cached decode step (a compiled `tf.function`, one thread) at
  position `length - 1` of a 4,096-position sequence, median of
  `--reps`, and its ratio to the full cache's in the same run;
- error: decoding 256 random steps through `Int8Cache` against the full
  float cache, the largest difference over the largest output.

    python -m benchmarks.cache_policies [--reps 50]

Writes `benchmarks/results/cache_policies.json`.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

from benchmarks import results  # noqa: E402

HEADS, KEY_DIM, WIDTH = 8, 64, 512
LENGTHS = (1024, 8192, 32768)
WINDOW = 1024


def policies():
    from keras_attn.layers import Int8Cache, SinkCache, SlidingWindowCache

    return {
        "full (float32, no policy)": None,
        "Int8Cache()": Int8Cache(),
        f"SlidingWindowCache({WINDOW})": SlidingWindowCache(WINDOW),
        f"SinkCache(4, {WINDOW})": SinkCache(4, WINDOW),
        f"Int8Cache({WINDOW})": Int8Cache(WINDOW),
    }


def layer_for(policy):
    from keras_attn import MultiHeadPositional

    window = None if policy is None else policy.window
    layer = MultiHeadPositional(
        num_heads=HEADS,
        key_dim=KEY_DIM,
        position="rotary",
        sliding_window=window if policy is None or not policy.sinks else None,
        cache_policy=policy,
        seed=1,
    )
    layer.build((1, None, WIDTH))
    return layer


def state_bytes(state):
    import keras

    return sum(
        int(np.asarray(keras.ops.convert_to_numpy(part)).nbytes)
        for part in keras.tree.flatten(state)
    )


def step_ms(layer, length, reps):
    import tensorflow as tf

    state = layer.empty_cache(1, length)
    x = tf.random.stateless_normal((1, 1, WIDTH), (1, 2))
    step = tf.function(
        lambda x, s, i: layer(x, cache=s, cache_update_index=i),
        jit_compile=True,
    )
    index = tf.constant(length - 1)
    for _ in range(3):
        out, _ = step(x, state, index)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        out, _ = step(x, state, index)
        np.asarray(out)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def int8_error(steps=256):
    import keras

    from keras_attn.layers import Int8Cache

    float_layer = layer_for(None)
    int8_layer = layer_for(Int8Cache())
    int8_layer.set_weights(float_layer.get_weights())
    x = np.random.default_rng(0).normal(size=(1, steps, WIDTH)).astype("f")
    outs = {}
    for name, layer in (("float", float_layer), ("int8", int8_layer)):
        state, rows = layer.empty_cache(1, steps), []
        for t in range(steps):
            y, state = layer(x[:, t : t + 1], cache=state, cache_update_index=t)
            rows.append(keras.ops.convert_to_numpy(y))
        outs[name] = np.concatenate(rows, 1)
    return float(
        np.abs(outs["int8"] - outs["float"]).max() / np.abs(outs["float"]).max()
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rows, base = [], None
    for name, policy in policies().items():
        layer = layer_for(policy)
        mib = [state_bytes(layer.empty_cache(1, n)) / 2**20 for n in LENGTHS]
        ms = step_ms(layer, 4096, args.reps)
        base = ms if base is None else base
        rows.append(
            {
                "policy": name,
                **{
                    f"MiB at {n // 1024}k": round(m, 2)
                    for n, m in zip(LENGTHS, mib, strict=True)
                },
                "step ms at 4k": round(ms, 3),
                "time ratio": round(ms / base, 3),
            }
        )
    error = int8_error()
    meta = results.meta(
        "cache_policies",
        sys.argv[1:] if argv is None else argv,
        reps=args.reps,
        threads=1,
    )
    meta["int8_max_relative_error"] = round(error, 5)
    path = os.path.join(results.RESULTS, "cache_policies.json")
    results.save(path, meta, rows)
    for row in rows:
        print(row)
    print("int8 max |Δ| / max |y| over 256 steps:", error)


if __name__ == "__main__":
    main()
