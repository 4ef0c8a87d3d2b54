"""One process's digest of a LiteRT file's answers, for the determinism
checks (`test_cpu_settings.py`): the file run by the runtime's reader on
every input twice, from `callers` threads at once, every output hashed
in input order, so that one bit anywhere changes it.

    python -m tests.runtime.cpu_digest PATH THREADS TF_FIRST < texts.json

prints `[digest, cpu_settings]` (TF_FIRST: `yes` imports
TensorFlow before the runtime, as a served process does)."""

import concurrent.futures
import hashlib
import json
import sys

import numpy as np


def digest(path, texts, num_threads=1, callers=4, cpu_kernels="auto"):
    """`(digest, the reader's cpu_settings)`. `path`: a `.tflite` file, or
    a decoder-only folder (its bundle's greedy and seeded answers)."""
    import os

    from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator
    from keras_attn_runtime.generator import BundleGenerator

    if os.path.isdir(path):
        reader = BundleGenerator(path, num_threads, cpu_kernels=cpu_kernels)
        settings = reader.cpu_settings
    else:
        translator = "translation" in path
        kind = LiteRTTranslator if translator else LiteRTClassifier
        reader = kind(path, num_threads=num_threads, cpu_kernels=cpu_kernels)
        settings = reader.litert.cpu_settings

    def run(text):
        if isinstance(reader, BundleGenerator):
            sampled = {"temperature": 1.0, "top_p": 0.95, "seed": len(text)}
            return [
                np.asarray(list(reader.token_ids(text)), "int64"),
                np.asarray(
                    list(reader.token_ids(text, None, sampled)), "int64"
                ),
            ]
        if translator:
            ids, align, _ = reader.translate_ids(text)
            return [np.asarray(ids, "int64"), np.asarray(align)]
        out = reader.predict([text])
        return [np.asarray(out[k]) for k in sorted(out)]

    with concurrent.futures.ThreadPoolExecutor(callers) as pool:
        outputs = list(pool.map(run, list(texts) * 2))
    hashed = hashlib.sha256()
    for arrays in outputs:
        for array in arrays:
            hashed.update(np.ascontiguousarray(array).tobytes())
    return hashed.hexdigest()[:16], settings


if __name__ == "__main__":
    path, threads, tensorflow_first = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if tensorflow_first == "yes":
        import tensorflow  # noqa: F401

    texts = json.loads(sys.stdin.read())
    print(json.dumps(digest(path, texts, threads)))
