"""What the kernels alone allow a decoder's streams on this machine: the
ceilings that a call of `R` rows puts on "16 clients against one" and on
the gap between tokens, before any serving cost.

For the 21.4M-parameter decoder of `benchmarks.serving_rows` (and the
shipped decoder's shape), two parts of a decode call are timed alone,
one thread, under the Interpreter and XNNPACK (as the server's copies
run them), at `R` = 1, 2, 4, 8 and 16 rows:

- **the weight matmuls**: every layer's query, key, value and output
  projections and its feed-forward, then the output layer, as int8-weight
  dense layers chained one after another (the model's own shapes, one
  multiply-add a parameter a row): what a call costs if nothing else
  did;
- **the attention over the cache**: each layer's scores against a
  `[R, H_kv, S, key_dim]` float32 cache, the softmax and the weighted
  sum of the values (grouped heads read their shared key head).

From them, for `C` copies on `C` cores and `N` clients spread over
them (`N / C` rows a call):

- `clients_ratio_ceiling`: `N` clients' tokens a second against one
  client's, if a call cost only its matmuls and attention and serving
  cost nothing: `C x (N / C) / t(N / C)` against `1 / t(1)`;
- `itl_ratio_ceiling`: the gap between tokens at `N` clients against one
  client's: `t(N / C) / t(1)`.

    python -m benchmarks.decode_kernels

Writes `benchmarks/results/decode_kernels.json`.
"""

import argparse
import os
import sys
import time

import numpy as np

from benchmarks import results
from benchmarks.serving_rows import CONTEXT
from benchmarks.serving_rows import SHAPE as LARGE

ROWS = (1, 2, 4, 8, 16)
COPIES, CLIENTS = 2, 16


def _convert(fn, quantize):
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [fn.get_concrete_function()]
    )
    if quantize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights
    return converter.convert()


def matmuls(shape, rows, seed=0):
    """The LiteRT file of `shape`'s weight matmuls at `rows` rows, and
    its parameter count."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    hidden = shape["hidden_dim"]
    key_dim = hidden // shape["num_heads"]
    kv = shape["num_key_value_heads"] * key_dim

    def weight(a, b):
        return tf.constant((rng.normal(size=(a, b)) * 0.02).astype("float32"))

    layers = [
        {
            "query": weight(hidden, hidden),
            "key": weight(hidden, kv),
            "value": weight(hidden, kv),
            "output": weight(hidden, hidden),
            "up": weight(hidden, shape["intermediate_dim"]),
            "down": weight(shape["intermediate_dim"], hidden),
        }
        for _ in range(shape["num_layers"])
    ]
    logits = weight(hidden, shape["vocabulary_size"])
    parameters = sum(
        int(np.prod(w.shape))
        for w in [logits] + [w for layer in layers for w in layer.values()]
    )

    @tf.function(input_signature=[tf.TensorSpec([rows, hidden])])
    def call(x):
        for w in layers:
            keys = tf.concat([x @ w["key"], x @ w["value"]], -1)
            keys = tf.reduce_sum(keys, -1, keepdims=True)  # kept, cheaply
            x = x + (x @ w["query"]) @ w["output"] + keys
            x = x + tf.nn.gelu(x @ w["up"]) @ w["down"]
        return x @ logits

    return _convert(call, quantize=True), parameters


def attention(shape, rows, context=CONTEXT):
    """The LiteRT file of `shape`'s attention over a `context`-long
    float32 cache at `rows` rows, every layer reading its own cache."""
    import tensorflow as tf

    heads, kv = shape["num_heads"], shape["num_key_value_heads"]
    layers, key_dim = shape["num_layers"], shape["hidden_dim"] // heads
    query = tf.TensorSpec([rows, kv, heads // kv, key_dim])
    cache = tf.TensorSpec([rows, kv, context, key_dim])

    @tf.function(input_signature=[query] + [cache] * (2 * layers))
    def call(q, *caches):
        out = q
        for keys, values in zip(caches[::2], caches[1::2], strict=True):
            scores = tf.matmul(out, keys, transpose_b=True)
            out = tf.matmul(tf.nn.softmax(scores), values)
        return out

    return _convert(call, quantize=False)


def call_ms(data, repeats=40):
    """The median time of a call of `data`'s model (random inputs), in
    milliseconds, one thread, XNNPACK."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data, num_threads=1)
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(
            detail["index"],
            rng.normal(size=detail["shape"]).astype(detail["dtype"]),
        )
    interpreter.invoke()
    took = []
    for _ in range(repeats):
        began = time.perf_counter()
        interpreter.invoke()
        took.append(time.perf_counter() - began)
    return sorted(took)[repeats // 2] * 1e3


def floors(label, shape):
    """The rows of one model: each row count's times, and the ceilings."""
    rows, times = [], {}
    for r in ROWS:
        data, parameters = matmuls(shape, r)
        weights, attend = call_ms(data), call_ms(attention(shape, r))
        times[r] = (weights, weights + attend)
        rows.append(
            {
                "model": label,
                "parameters": parameters,
                "rows": r,
                "matmuls_ms": round(weights, 3),
                "attention_ms": round(attend, 3),
                "matmul_gmac_per_s": round(r * parameters / weights / 1e6, 1),
                "ms_a_row": round((weights + attend) / r, 3),
            }
        )
    each = CLIENTS // COPIES
    for key, at in (("matmuls only", 0), ("matmuls and attention", 1)):
        one, many = times[1][at], times[each][at]
        rows.append(
            {
                "model": label,
                "ceiling of": key,
                "clients_ratio_ceiling": round(CLIENTS / many / (1 / one), 2),
                "itl_ratio_ceiling": round(many / one, 2),
            }
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    from benchmarks.litertlm_engine import SHAPE as SMALL

    rows = []
    for label, shape in (("21.4M", LARGE), ("shipped shape", SMALL)):
        for row in floors(label, shape):
            print(row, flush=True)
            rows.append(row)
    out = results.save(
        os.path.join(results.RESULTS, "decode_kernels.json"),
        results.meta("decode_kernels", sys.argv[1:] if argv is None else argv),
        rows,
        copies=COPIES,
        clients=CLIENTS,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
