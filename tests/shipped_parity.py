"""The shipped IMDB model's `.keras` file against its SavedModel.

`python -m tests.shipped_parity [N]` loads
`saved_models/imdb_ssa/model.keras` with the Keras that is installed,
scores the first N (default 200) IMDB test reviews, and compares the
probabilities with the SavedModel's (TensorFlow only, no Keras inside).
It prints one JSON line (Keras's version, max |Δp|, the attention's
largest weight on padding) and exits 1 when |Δp| exceeds 1e-4. The
next-Keras check runs it under the pinned nightly.
"""

import json
import os
import sys

import numpy as np

from tests.paths import ROOT

FOLDER = os.path.join(ROOT, "saved_models", "imdb_ssa")
SHARED = os.path.join(ROOT, "..", "shared", "data", "tensorflow_datasets")
TOLERANCE = 1e-4


def reviews(count):
    import tensorflow_datasets as tfds

    split = tfds.load(
        "imdb_reviews",
        split=f"test[:{count}]",
        data_dir=os.environ.get("TFDS_DATA_DIR") or SHARED,
        download=False,  # the offline copy only
    )
    return [x["text"].numpy() for x in split]


def compare(count=200):
    import keras
    import tensorflow as tf

    import keras_attn  # noqa: F401  (registers the layers)
    from keras_attn.export import split_text_model

    texts = tf.constant(reviews(count))
    model = keras.models.load_model(os.path.join(FOLDER, "model.keras"))
    got = model.predict(texts, verbose=0)
    serve = tf.saved_model.load(os.path.join(FOLDER, "saved_model"))
    want = serve.signatures["serving_default"](text=texts)
    delta = np.abs(got["probability"] - want["probability"].numpy())
    vectorizer = split_text_model(model)[0]
    padding = np.asarray(vectorizer(texts)) == 0  # (N, T)
    on_padding = np.where(padding[:, None, :], got["attention"], 0.0)
    return {
        "keras": keras.version(),
        "reviews": count,
        "max_abs_dp": float(delta.max()),
        "max_attention_on_padding": float(on_padding.max()),
    }


if __name__ == "__main__":
    result = compare(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    print(json.dumps(result))
    sys.exit(0 if result["max_abs_dp"] <= TOLERANCE else 1)
