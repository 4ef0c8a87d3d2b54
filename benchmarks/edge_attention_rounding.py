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
    lite = LiteRTClassifier(os.path.join(args.folder, "model_full_int8.tflite"))
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
    for name, results in rows.items():
        same, common = agreement(float_results, results)
        print(f"{name:50s} same top-8 {same:.1%}  in common {common:.1%}")


if __name__ == "__main__":
    main()
