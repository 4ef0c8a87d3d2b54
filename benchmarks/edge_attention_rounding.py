"""How much of the full-integer edge file's attention disagreement comes
from rounding its `attention` output to int8?

    python -m benchmarks.edge_attention_rounding DIR [--reviews 3000]

`DIR`: the folder `python recipes/imdb_edge.py --out OUT` writes
(`OUT/imdb_edge`, with `model.keras` and `model_full_int8.tflite`). On the
first `--reviews` test reviews it compares the float model's top-8 tokens
(`keras_attn.explain.top_tokens`) with those of the int8 file, and with
those of the float attention rounded as the int8 output is (steps of
1/255 of the calibrated range [0, 1]), and rounded after dividing each
hop by its own maximum (what a per-hop scale would keep). Prints, per
row, the share of reviews with the same top-8 set and the mean share of
the 8 tokens in common.

Four rows more take the two-level pooling apart (`ChunkedAttentionPooling`:
softmax within chunks, softmax across chunks, their product). The float
model's two logit tensors rounded to int8 (symmetric, scale from their
largest magnitude on 500 training reviews), or its two softmax outputs
rounded to steps of 1/256 (an int8 `SOFTMAX`'s), each composed in float:
what an int8 file could give at best if its logits were the float
model's. And the int8 file's own logits and softmax outputs (read with
LiteRT's `experimental_preserve_all_tensors`), composed in float on the
host: what an output of the factors, composed outside the file, would
give.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def agreement(a_results, b_results, k=8):
    from keras_attn import explain

    same = common = 0
    for a, b in zip(a_results, b_results, strict=True):
        top_a = {w for w, _ in explain.top_tokens(a, k)}
        top_b = {w for w, _ in explain.top_tokens(b, k)}
        same += top_a == top_b
        common += len(top_a & top_b) / max(len(top_a), 1)
    return same / len(a_results), common / len(a_results)


def rounded(results, fn):
    return [{**r, "attention": fn(r["attention"])} for r in results]


def per_hop(a, steps=255):
    top = np.maximum(a.max(axis=1, keepdims=True), 1e-12)
    return np.round(a / top * steps) / steps * top


def _softmax(logits, mask):
    logits = np.where(mask, logits, -np.inf)
    top = np.max(logits, -1, keepdims=True)
    e = np.where(mask, np.exp(logits - np.where(np.isfinite(top), top, 0)), 0)
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def _logits(layer, hidden):
    """`StructuredSelfAttention`'s logits `(B, hops, T)`, as in its call."""
    x = np.tanh(np.asarray(layer._hidden_dense(hidden)))
    return np.asarray(layer._hop_dense(x)).transpose(0, 2, 1)


class TwoLevel:
    """The float model's two-level pooling, factor by factor, in NumPy."""

    def __init__(self, model, vectorizer, pooling_class):
        import keras

        self.pool = next(
            layer for layer in model.layers if isinstance(layer, pooling_class)
        )
        inputs = self.pool.input
        inputs = inputs[0] if isinstance(inputs, list | tuple) else inputs
        self.features = keras.Model(model.input, inputs)
        self.vectorizer = vectorizer

    def factors(self, texts):
        """Within-chunk logits `(B·n, hops, chunk)` and their mask, and a
        function of the within weights giving the across logits and mask."""
        ids = np.asarray(self.vectorizer(np.array(texts, dtype=object)))
        x = np.asarray(self.features.predict(ids, verbose=0, batch_size=250))
        chunk = self.pool.chunk
        batch, length, width = x.shape
        n = length // chunk
        rows = x.reshape(batch * n, chunk, width)
        mask = ids != 0
        within = _logits(self.pool.within, rows)
        row_mask = mask.reshape(batch * n, 1, chunk)
        chunk_mask = mask.reshape(batch, n, chunk).any(-1)[:, None, :]
        weights = _softmax(within, row_mask)  # the float forward pass
        pooled = (weights @ rows).reshape(batch, n, -1)
        across = _logits(self.pool.across, pooled)
        return within, row_mask, across, chunk_mask

    def attention(self, texts, within_fn=_softmax, across_fn=_softmax):
        within, row_mask, across, chunk_mask = self.factors(texts)
        return compose(
            within_fn(within, row_mask), across_fn(across, chunk_mask)
        )


def compose(within, across):
    """Token weights `(B, hops, T)` from within-chunk weights `(B·n, h, c)`
    (averaged over their hops) and chunk weights `(B, hops, n)`."""
    batch, hops, n = across.shape
    mean = within.mean(1).reshape(batch, 1, n, -1)
    return (across[..., None] * mean).reshape(batch, hops, -1)


def int8_logits(scale):
    return lambda logits, mask: _softmax(np.round(logits / scale) * scale, mask)


def softmax_steps(logits, mask, steps=256):
    return np.round(_softmax(logits, mask) * steps) / steps


def file_factors(path, ids):
    """The int8 file's two logit tensors and two softmax outputs for one
    review's ids `(1, T)`, dequantized (tensors found by name)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(
        model_path=path, experimental_preserve_all_tensors=True, num_threads=1
    )
    runner = interpreter.get_signature_runner()
    (name,) = runner.get_input_details()
    details = interpreter.get_tensor_details()

    def find(level, kind):
        for d in details:
            if f"{level}_chunks_1/{kind}" in d["name"] and len(d["shape"]) == 3:
                return d
        raise ValueError(f"no {level} {kind} tensor in {path!r}")

    wanted = {
        "within_logits": find("within", "hops_1/Tensordot"),
        "across_logits": find("across", "hops_1/Tensordot"),
        "within_weights": find("within", "Softmax1"),
        "across_weights": find("across", "Softmax1"),
    }
    dtype = runner.get_input_details()[name]["dtype"]

    def run(row):
        runner(**{name: row.astype(dtype)})
        out = {}
        for key, d in wanted.items():
            scale, zero = d["quantization"]
            value = interpreter.get_tensor(d["index"]).astype("float32")
            value = (value - zero) * scale
            out[key] = value.transpose(0, 2, 1) if "logits" in key else value
        return out

    return [run(ids[i : i + 1]) for i in range(len(ids))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("--reviews", type=int, default=3000)
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, "..", "recipes"))
    import imdb_classification as base
    import imdb_edge
    import keras

    from keras_attn import explain
    from keras_attn_runtime import LiteRTClassifier

    hp = imdb_edge.HPARAMS
    data = base.load_imdb(None, hp["val_fraction"], hp["seed"])
    vectorizer = base.make_vectorizer(data["train"][0], hp)
    model = keras.saving.load_model(os.path.join(args.folder, "model.keras"))
    text_model = base.text_model_of(vectorizer, model)
    texts = [t.decode() for t in data["test"][0][: args.reviews]]
    lite_path = os.path.join(args.folder, "model_full_int8.tflite")
    lite = LiteRTClassifier(lite_path)
    float_results = explain.attend(text_model, texts)
    rows = {
        "int8 file": explain.attend(lite, texts),
        "float, output rounded to 1/255": rounded(
            float_results, lambda a: np.round(a * 255) / 255
        ),
        "float, each hop rounded to 1/255 of its maximum": rounded(
            float_results, per_hop
        ),
    }
    two = TwoLevel(model, vectorizer, imdb_edge.ChunkedAttentionPooling)
    calibration = [t.decode() for t in data["train"][0][: hp["calibration"]]]
    within, _, across, _ = two.factors(calibration)
    scales = (np.abs(within).max() / 127, np.abs(across).max() / 127)

    def factored(attention_of):
        out = []
        for i in range(0, len(texts), 500):
            weights = attention_of(texts[i : i + 500])
            for j, r in enumerate(float_results[i : i + 500]):
                n = r["attention"].shape[1]
                out.append({**r, "attention": weights[j][:, :n]})
        return out

    rows["float logits rounded to int8 (calibrated scales)"] = factored(
        lambda t: two.attention(
            t, int8_logits(scales[0]), int8_logits(scales[1])
        )
    )
    rows["float softmaxes rounded to 1/256, composed in float"] = factored(
        lambda t: two.attention(t, softmax_steps, softmax_steps)
    )
    ids = lite.tokenizer(texts)
    chunk = two.pool.chunk
    inside = file_factors(lite_path, ids)
    from_logits, from_weights = [], []
    for k, (r, f) in enumerate(zip(float_results, inside, strict=True)):
        mask = ids[k] != 0
        n_chunks = mask.size // chunk
        row_mask = mask.reshape(n_chunks, 1, chunk)
        chunk_mask = mask.reshape(n_chunks, chunk).any(-1)[None, None, :]
        a = compose(
            _softmax(f["within_logits"], row_mask),
            _softmax(f["across_logits"], chunk_mask),
        )
        b = compose(f["within_weights"], f["across_weights"])
        n = r["attention"].shape[1]
        from_logits.append({**r, "attention": a[0][:, :n]})
        from_weights.append({**r, "attention": b[0][:, :n]})
    rows["int8 file's own logits, softmax and product on the host"] = (
        from_logits
    )
    rows["int8 file's own softmax outputs, product on the host"] = from_weights
    for name, results in rows.items():
        same, common = agreement(float_results, results)
        print(f"{name:58s} same top-8 {same:.1%}  in common {common:.1%}")


if __name__ == "__main__":
    main()
