"""
Title: A full-integer attention classifier for edge hardware
Author: keras_attn contributors
Description: An attention-only IMDB model (embeddings of words and
hashed word pairs, pooled by `StructuredSelfAttention`) whose LiteRT file
is full-integer: int8 weights and int8 activations, for NPUs, the Edge TPU
and microcontrollers.

Run it: `python recipes/imdb_edge.py --out saved_models` (about ten
minutes on two CPU cores, most of it measuring the LiteRT files;
`--limit 2000 --epochs 1` for a quick look). It measures the file on
every edge target: `pip install -e ./runtime -e ".[cpu,examples,export,edge]"`.
Results: docs/results.md.
"""

"""
## Why not the BiLSTM

The shipped `imdb_ssa` model reads reviews with a BiLSTM. Its recurrent
loop becomes a LiteRT `WHILE`, which the full-integer calibrator cannot
run; unrolled, the file grows with the review length. Attention has no
loop: every step is a matrix product, a softmax or an elementwise op, all
of which have int8 kernels. The data, vectorizer and training loop are
those of `imdb_classification.py`.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import imdb_classification as base
import keras
import numpy as np
from keras import ops

import keras_attn
from keras_attn import export
from keras_attn.export import edge_targets as edge
from keras_attn_runtime import LiteRTClassifier

HPARAMS = {
    **base.HPARAMS,
    "max_tokens": 20_000,
    "length": 500,
    "embed_dim": 32,
    "bigram_bins": 100_000,  # hashed word pairs; 0 for words only
    "blocks": 0,  # MultiHeadPositional blocks before the pooling
    "chunk": 25,  # tokens per chunk of the two-level pooling; 0: one level
    "chunk_hops": 2,  # hops within each chunk
    "heads": 4,
    "num_hops": 8,
    "dropout": 0.3,
    "word_dropout": 0.2,
    "learning_rate": 1e-3,
    "epochs": 8,
    "calibration": 500,  # training reviews that calibrate the int8 ranges
    # The largest column norm of the attention kernels (Keras's MaxNorm;
    # 0: no bound), chosen on validation reviews (docs/edge.md).
    "attention_max_norm": 0.5,
}

"""
## The model

A review's verdict often sits in a pair of words ("not good", "well
worth"), which a bag of single words cannot see. `HashedBigrams` gives
every pair of neighbouring words an id: `(w_i · 7919 + w_{i+1})` hashed
into `bigram_bins − 2` bins, computed in the graph with integer ops (which
LiteRT runs as int32 builtins, so the tokenizer stays the plain word
tokenizer); id `1` marks the last word, which has no pair, and `0`
padding.

Each position's word and word-pair embeddings are added, and
`StructuredSelfAttention` pools the review into a few hops whose weights
explain the verdict. Both embeddings use `mask_zero=True`: Keras's `Add`
drops the mask unless every input carries one. `blocks` adds
`MultiHeadPositional` self-attention blocks (sinusoidal positions, a
residual connection and a layer normalization) before the pooling; one
block was the previous edge model (docs/results.md).
"""


@keras.saving.register_keras_serializable(package="imdb_edge")
class HashedBigrams(keras.layers.Layer):
    """Ids of neighbouring word pairs, `(B, T)` int32: `0` at padding, `1`
    for the last word, `2 … num_bins − 1` for the hashed pairs.

    Integer ops that every edge target runs: the remainder by long
    division (subtract `m · 2^j` where it fits, `j` from high to low)
    rather than `FLOOR_MOD`, and selections as products with 0/1 rather
    than `where` on int32, which microcontrollers lack."""

    def __init__(self, num_bins, **kwargs):
        super().__init__(**kwargs)
        self.num_bins = num_bins

    def call(self, tokens):
        first = ops.cast(tokens, "int32")
        second = ops.pad(first[:, 1:], [[0, 0], [0, 1]])  # the next word
        pair = first * 7919 + second  # < 2^31 for ids below 271,000
        ids = remainder(pair, self.num_bins - 2) + 2
        has_next = ops.cast(second > 0, "int32")
        ids = ids * has_next + (1 - has_next)  # 1: the last word
        return ids * ops.cast(first > 0, "int32")  # 0: padding

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins}


def remainder(x, m, bits=31):
    """`x mod m` for int32 `0 ≤ x < 2^bits` by long division: comparisons,
    products and differences only."""
    for j in reversed(range(bits)):
        step = m * 2**j
        if step < 2**31:
            x = x - step * ops.cast(x >= step, "int32")
    return x


@keras.saving.register_keras_serializable(package="imdb_edge")
class ChunkedAttentionPooling(keras.layers.Layer):
    """`StructuredSelfAttention` within each chunk of `chunk` tokens, then
    over the chunks; returns the pooled `(B, num_hops, chunk_hops · D)`
    and each token's weight `(B, num_hops, T)` (chunk weight times the
    token's mean weight within its chunk)."""

    def __init__(
        self,
        chunk,
        units,
        chunk_hops,
        num_hops,
        penalty,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.chunk, self.units, self.penalty = chunk, units, penalty
        self.chunk_hops, self.num_hops = chunk_hops, num_hops
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.within, self.across = (
            keras_attn.StructuredSelfAttention(
                units,
                hops,
                penalty,
                kernel_constraint=self.kernel_constraint,
                name=name,
            )
            for hops, name in (
                (chunk_hops, "within_chunks"),
                (num_hops, "across_chunks"),
            )
        )

    def build(self, input_shape):
        length, d = input_shape[1], input_shape[2]
        if length % self.chunk:
            raise ValueError(
                f"The length ({length}) must be a multiple of `chunk` "
                f"({self.chunk})."
            )
        self.within.build((None, self.chunk, d))
        self.across.build((None, length // self.chunk, self.chunk_hops * d))

    def call(self, x, mask=None):
        length, d = x.shape[1], x.shape[2]
        n = length // self.chunk
        rows = ops.reshape(x, (-1, self.chunk, d))  # (B·n, chunk, D)
        row_mask = chunk_mask = None
        if mask is not None:
            row_mask = ops.reshape(mask, (-1, self.chunk))
            # Whether a chunk has a token: a max, which edge targets run
            # (not `any`).
            chunk_mask = ops.reshape(
                ops.cast(mask, "float32"), (-1, n, self.chunk)
            )
            chunk_mask = ops.max(chunk_mask, axis=-1) > 0
        m, a = self.within(rows, mask=row_mask, return_attention_scores=True)
        pooled = ops.reshape(m, (-1, n, self.chunk_hops * d))
        m, top = self.across(
            pooled, mask=chunk_mask, return_attention_scores=True
        )  # m: (B, hops, chunk_hops·D), top: (B, hops, n)
        a = ops.reshape(ops.mean(a, axis=1), (-1, 1, n, self.chunk))
        weights = ops.reshape(top[..., None] * a, (-1, self.num_hops, length))
        return m, weights

    def compute_mask(self, x, mask=None):
        return None

    def get_config(self):
        names = ("chunk", "units", "chunk_hops", "num_hops", "penalty")
        constraint = keras.constraints.serialize(self.kernel_constraint)
        return {
            **super().get_config(),
            **{k: getattr(self, k) for k in names},
            "kernel_constraint": constraint,
        }


def build_model(vocab_size, hp):
    d = hp["embed_dim"]
    tokens = keras.Input((hp["length"],), dtype="int32", name="tokens")
    mask = keras.ops.not_equal(tokens, 0)  # (B, T), handed on by name
    x = keras.layers.Embedding(vocab_size, d, mask_zero=True)(tokens)
    if hp["bigram_bins"]:
        pairs = HashedBigrams(hp["bigram_bins"])(tokens)
        embed = keras.layers.Embedding(hp["bigram_bins"], d, mask_zero=True)
        x = keras.layers.Add()([x, embed(pairs)])
    x = keras.layers.Dropout(hp["word_dropout"], noise_shape=(None, None, 1))(x)
    for _ in range(hp["blocks"]):
        positions = keras_attn.SinusoidalPositionEncoding()(x)
        x = keras.layers.Add()([keras.layers.Rescaling(d**0.5)(x), positions])
        x = keras.layers.Dropout(hp["dropout"] / 2)(x)
        h = keras_attn.MultiHeadPositional(
            hp["heads"], d // hp["heads"], position=None, dropout=0.1
        )(x, query_mask=mask, value_mask=mask)
        x = keras.layers.LayerNormalization()(keras.layers.Add()([x, h]))
    bound = hp["attention_max_norm"]
    constraint = keras.constraints.MaxNorm(bound, axis=0) if bound else None
    if hp["chunk"]:
        m, a = ChunkedAttentionPooling(
            hp["chunk"],
            hp["attention_units"],
            hp["chunk_hops"],
            hp["num_hops"],
            hp["penalty"],
            kernel_constraint=constraint,
        )(x, mask=mask)
    else:
        m, a = keras_attn.StructuredSelfAttention(
            hp["attention_units"],
            hp["num_hops"],
            hp["penalty"],
            kernel_constraint=constraint,
        )(x, mask=mask, return_attention_scores=True)
    x = keras.layers.Dropout(hp["dropout"])(keras.layers.Flatten()(m))
    x = keras.layers.Dense(64, activation="relu")(x)
    prob = keras.layers.Dense(1, activation="sigmoid", name="probability")(x)
    return keras.Model(tokens, {"probability": prob, "attention": a})


"""
## Full-integer export

`export.export_text_model(quantize="int8")` calibrates the activation
ranges on a few hundred training reviews and keeps only int8 builtin ops
(`TFLITE_BUILTINS_INT8`: the conversion fails rather than fall back to
float). Both files carry their vocabulary, so `keras-attn predict` and
`LiteRTClassifier` run them with no TensorFlow.

Int8 runtimes round differently: TFLM's reference kernels, LiteRT's
optimized ones, OpenVINO and each NPU. Compared tensor by tensor, they
first part at the attention's hidden projection (one unit in the last
place), and the softmax across chunks amplifies it: its input's int8 step
is 0.33. `attention_max_norm` bounds every column of the attention
kernels (Keras's `MaxNorm`, applied after each training step), which
narrows the scores: TFLM and OpenVINO then stay close to LiteRT.

A bound also spreads the attention, so the calibration reviews, all long,
never show a weight near 1. The converter used to requantize each
softmax to the range calibration saw, and a short review's weights were
clipped there (a 12-word review kept 0.59 of its weight).
`export.convert_tflite` now keeps the softmax's own grid, [0, 1) in
steps of 1/256 (`export.flatbuffer.keep_probability_ranges`). docs/edge.md has
the figures.
"""


def calibration_texts(data, hp):
    """The first `calibration` training reviews."""
    return [t.decode() for t in data["train"][0][: hp["calibration"]]]


def litert_accuracy(path, texts, labels):
    clf = LiteRTClassifier(path)
    batches = [list(texts[i : i + 500]) for i in range(0, len(texts), 500)]
    probs = np.concatenate(
        [clf.predict(b)["probability"][:, 0] for b in batches]
    )
    return float(np.mean((probs > 0.5) == (labels > 0.5))), probs


def latency(paths, texts, rounds=3):
    """Median seconds per review at batch 1, the models interleaved."""
    clfs = {name: LiteRTClassifier(path) for name, path in paths.items()}
    ids = {name: clf.tokenizer(texts) for name, clf in clfs.items()}
    times = {name: [] for name in clfs}
    for _ in range(rounds):
        for i in range(len(texts)):
            for name, clf in clfs.items():
                start = time.perf_counter()
                clf.predict_ids(ids[name][i : i + 1])
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def measure(text_model, data, hp, folder, split):
    """Write both LiteRT files to `folder`; their accuracy, size, latency."""
    paths = {
        q: os.path.join(folder, f"model_{name}.tflite")
        for q, name in (("none", "float32"), ("int8", "full_int8"))
    }
    calibration = calibration_texts(data, hp)
    for quantize, path in paths.items():
        export.export_text_model(
            text_model,
            tflite=path,
            quantize=quantize,
            calibration_texts=calibration,
            verbose=sys.stdout.isatty(),  # a progress bar on a terminal
        )
    texts = [t.decode() for t in data[split][0]]
    metrics = {
        "sizes_bytes": {q: os.path.getsize(p) for q, p in paths.items()},
        "ops_full_int8": export.tflite_op_names(paths["int8"]),
    }
    for quantize, path in paths.items():
        acc, _ = litert_accuracy(path, texts, data[split][1])
        metrics[f"{split}_accuracy_litert_{quantize}"] = acc
    metrics["attention_top8_agreement"] = attention_agreement(
        text_model, paths["int8"], texts
    )
    metrics["edge_targets"] = edge_targets(paths["int8"], texts)
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "..", "saved_models", "imdb_ssa")
    shipped = os.path.join(shipped, "model_dynamic_int8.tflite")
    if os.path.isfile(shipped):
        timed = {"edge_full_int8": paths["int8"], "bilstm_int8": shipped}
        metrics["latency_s_per_review"] = latency(timed, texts[:200])
    return metrics


"""
## Attention from the int8 file

The full-integer file keeps the pooling weights as a second output
(`attention`, int8 inside, dequantized at the output), so
`keras-attn explain model_full_int8.tflite "..."` highlights words on the
device. How close are its highlights to the float model's? For each
review, the 8 tokens with the most attention summed over hops
(`explain.top_tokens`) from both.
"""


def attention_agreement(text_model, int8_path, texts, k=8, batch=500):
    """The share of `texts` whose top-`k` tokens are the same set in the
    float Keras model and the int8 LiteRT file, and the mean share of the
    `k` tokens they have in common."""
    from keras_attn import explain

    lite = LiteRTClassifier(int8_path)
    same = common = 0
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        for a, b in zip(
            explain.attend(text_model, chunk),
            explain.attend(lite, chunk),
            strict=True,
        ):
            top_a = {w for w, _ in explain.top_tokens(a, k)}
            top_b = {w for w, _ in explain.top_tokens(b, k)}
            same += top_a == top_b
            common += len(top_a & top_b) / max(len(top_a), 1)
    return {
        "k": k,
        "reviews": len(texts),
        "same_top_k_set": same / len(texts),
        "mean_share_in_common": common / len(texts),
    }


"""
## Every edge target

The same int8 file on each runtime a device may have: TensorFlow Lite
Micro (microcontrollers), OpenVINO (Intel CPUs and NPUs; it reads the
`.tflite` itself), LiteRT's NPU compiler with Intel's plugin (how many
ops it takes, in how many pieces) and TensorFlow's verdict on LiteRT's
GPU delegate. Each integer runtime rounds its own way, so agreement is
measured on the probabilities LiteRT gives, review by review. The
exported masks, word-pair hashing and "no key" handling use only ops
that all of them run (`edge_targets.TARGETS` lists what each refuses).
"""


def edge_targets(path, texts, micro_reviews=300, openvino_reviews=1000):
    """TFLM and OpenVINO against LiteRT on the first reviews of `texts`,
    the NPU compiler's partitions, the GPU analyzer's verdict, the TFLM
    arena and the op resolver a firmware registers."""
    clf = LiteRTClassifier(path)
    n = max(micro_reviews, openvino_reviews)
    ids = clf.tokenizer(list(texts[:n]))
    lite = clf.predict_ids(ids)["probability"][:, 0]
    micro = edge.MicroModel(path)
    on_micro = micro.run(ids[:micro_reviews])["probability"][:, 0]
    on_openvino = edge.openvino_run(path, ids[:openvino_reviews])
    return {
        "tflm": {
            **agreement(on_micro, lite),
            "arena_bytes": micro.arena_bytes(),
            "op_resolver": edge.micro_op_resolver(path),
        },
        "openvino_cpu": agreement(on_openvino["probability"][:, 0], lite),
        "intel_npu_lnl": edge.npu_partitions(path),
        "gpu_delegate_compatible": edge.gpu_delegate_compatible(path),
        "refused_ops": {t: edge.edge_problems(path, t) for t in edge.TARGETS},
    }


def agreement(probs, reference):
    """How close `probs` are to the first `len(probs)` of `reference`."""
    reference = reference[: len(probs)]
    return {
        "reviews": len(probs),
        "max_abs_diff": round(float(np.max(np.abs(probs - reference))), 5),
        "label_agreement": float(np.mean((probs > 0.5) == (reference > 0.5))),
    }


def litert_report(metrics, split, command):
    """`litert.json`: per LiteRT file, what it is, its ops, size, accuracy
    and latency, and the command that made it."""
    files = {"none": "model_float32.tflite", "int8": "model_full_int8.tflite"}
    latency = metrics.get("latency_s_per_review", {})
    report = {"command": command, "split": split}
    for quantize, name in files.items():
        report[name] = {
            "quantize": quantize,
            "kind": "full integer: int8 weights and activations"
            if quantize == "int8"
            else "float32",
            "size_bytes": metrics["sizes_bytes"][quantize],
            f"{split}_accuracy": metrics[f"{split}_accuracy_litert_{quantize}"],
        }
    report["model_full_int8.tflite"]["ops"] = metrics["ops_full_int8"]
    report["model_full_int8.tflite"]["latency_s_per_review"] = latency.get(
        "edge_full_int8"
    )
    report["bilstm_dynamic_int8_latency_s_per_review"] = latency.get(
        "bilstm_int8"
    )
    return report


def main(out=None, limit=None, evaluate_test=True, verbose=2, **overrides):
    """Train, export, measure; files go to `out/imdb_edge` (a temporary
    folder, removed afterwards, without `out`)."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    data = base.load_imdb(limit, hp["val_fraction"], hp["seed"])
    start = time.time()
    vectorizer = base.make_vectorizer(data["train"][0], hp)
    model = build_model(vectorizer.vocabulary_size(), hp)
    train_ds = base.token_dataset(
        vectorizer, *data["train"], hp["batch_size"], hp["seed"]
    )
    val_ds = base.token_dataset(vectorizer, *data["val"], 256)
    _, history = base.train(model, train_ds, val_ds, hp, verbose)
    wall = time.time() - start
    text_model = base.text_model_of(vectorizer, model)
    split = "test" if evaluate_test else "val"
    metrics = {
        "model": "edge: word and word-pair embeddings, StructuredSelfAttention",
        "versions": export.versions(),
        "hyperparameters": hp,
        "params": model.count_params(),
        "train_wall_time_s": round(wall, 1),
        "history": {
            k: [round(float(v), 5) for v in vs] for k, vs in history.items()
        },
        "val_accuracy_keras": base.accuracy(text_model, *data["val"]),
        f"{split}_accuracy_keras": base.accuracy(text_model, *data[split]),
    }
    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(out or scratch, "imdb_edge")
        os.makedirs(folder, exist_ok=True)
        metrics.update(measure(text_model, data, hp, folder, split))
        print(json.dumps(metrics, indent=2))
        if out:
            model.save(os.path.join(folder, "model.keras"))
            with open(os.path.join(folder, "metrics.json"), "w") as f:
                json.dump(metrics, f, indent=2)
            command = "python recipes/imdb_edge.py --out DIR"
            with open(os.path.join(folder, "litert.json"), "w") as f:
                json.dump(litert_report(metrics, split, command), f, indent=2)
    return metrics


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--out", help="write OUT/imdb_edge/")
    parser.add_argument("--limit", type=int, help="use only this many reviews")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    parser.add_argument("--no-test", action="store_true", help="no test set")
    args = parser.parse_args()
    main(args.out, args.limit, not args.no_test, epochs=args.epochs)
