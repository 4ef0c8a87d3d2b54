"""The Transformer translator of `recipes/translation_transformer.py`
under each cache policy, and as a streaming LiteRT file.

For trained weights (`--weights`, written by the recipe) on its own
validation split:

- BLEU (cased, sacrebleu) of greedy and beam search with the decoder's
  self-attention caches kept in full, in int8, or as a window (with or
  without sinks);
- the streaming file (`export_streaming_tflite`: `start` and `step`,
  the caches explicit inputs and outputs; float and dynamic-int8
  weights) against Keras's cached greedy search, token for token, on the
  first `--sentences` validation sentences, under LiteRT's
  `CompiledModel`;
- one thread: the streaming file's first-token latency (start and one
  step) and tokens per second, against the recipe's one-call LiteRT file
  (`--litert`, beam search inside one call) per sentence.

    python -m benchmarks.translator_streaming --weights W [--litert F]

Writes `benchmarks/results/translator_streaming.json`.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks import results
from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "recipes"))

POLICIES = ("full", "int8", "window:8", "sinks:2:6", "window:4")
BATCH = 8


def setup(weights, policy):
    import translation
    import translation_transformer as recipe

    from keras_attn.translation import read_pairs, split_by_source

    hp = {**recipe.HPARAMS, "cache_policy": policy}
    _, val = split_by_source(
        read_pairs(translation.DEFAULT_PAIRS), hp["val_fraction"], hp["seed"]
    )
    saved = weights + ".vocabularies.json"
    vec_en, vec_fr = translation.make_vectorizers([], hp, saved, False)
    trainer, encode, step_fn = recipe.build_transformer(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    trainer.load_weights(weights)
    translator = translation.make_translator(
        trainer, encode, step_fn, vec_en, vec_fr, hp
    )
    unknown = vec_fr.get_vocabulary().index("[UNK]")
    search = translation.favour_copies(
        encode, step_fn, unknown, hp["copy_bonus"]
    )  # what the translator searches
    return hp, val, vec_en, translator, search


def bleu(weights, policy, beam):
    import translation

    _, val, _, translator, _ = setup(weights, policy)
    row = {"policy": policy}
    greedy, _ = translation.evaluate(translator, val, greedy=True)
    row["greedy BLEU"] = round(greedy["bleu_cased"], 2)
    if beam:
        scores, _ = translation.evaluate(translator, val)
        row["beam BLEU"] = round(scores["bleu_cased"], 2)
    return row


def beam_equal(hp, ids, translator, encode, step_fn, decoder):
    """Sentences whose beam search through the streaming file (the
    runtime's NumPy beam, `BATCH // beam_width` sentences a call) gives
    Keras's cached beam search's ids."""
    import keras

    from keras_attn import seq2seq

    beam = {
        "beam_width": hp["beam_width"],
        "length_penalty": hp["length_penalty"],
        "coverage_penalty": hp["coverage_penalty"],
    }
    args = (translator.start_id, translator.end_id, translator.max_length)
    want = seq2seq.beam_search(
        step_fn,
        encode(ids),
        *args,
        **beam,
        source_mask=ids != 0,
        banned_ids=translator.banned,
    )["ids"]
    want = keras.ops.convert_to_numpy(want)
    same, rows = 0, BATCH // hp["beam_width"]
    for i in range(0, len(ids), rows):
        chunk = ids[i : i + rows]
        got = decoder.beam_search(
            {"source": chunk},
            *args,
            **beam,
            source_mask=chunk != 0,
            banned_ids=translator.banned,
        )["ids"]
        width = got.shape[1]
        same += int(
            (
                (got == want[i : i + rows, :width]).all(axis=1)
                & ~want[i : i + rows, width:].any(axis=1)
            ).sum()
        )
    return same


def stream_rows(weights, policy, sentences, quantize, folder):
    """Sentences whose streamed greedy ids equal Keras's, and timings."""
    import keras
    import tensorflow as tf

    from keras_attn import export, seq2seq
    from keras_attn_runtime import StreamingDecoder

    hp, val, vec_en, translator, (encode, step_fn) = setup(weights, policy)
    texts = [s for s, _ in val[:sentences]]
    ids = keras.ops.convert_to_numpy(vec_en(tf.constant(texts))).astype("int32")
    start, end = translator.start_id, translator.end_id
    length = translator.max_length
    spec = {"source": tf.TensorSpec([BATCH, ids.shape[1]], tf.int32)}
    path = os.path.join(folder, f"{policy}_{quantize}.tflite")
    export.export_streaming_tflite(
        (encode, step_fn), path, start_signature=spec, quantize=quantize
    )
    decoder = StreamingDecoder(path, num_threads=1)
    same = 0
    for i in range(0, len(ids), BATCH):
        chunk = ids[i : i + BATCH]
        want = seq2seq.greedy_search(
            step_fn,
            encode(chunk),
            start,
            end,
            length,
            banned_ids=translator.banned,
        )["ids"]
        want = keras.ops.convert_to_numpy(want)
        got = np.zeros_like(want)
        steps = decoder.stream(
            {"source": chunk},
            start,
            end,
            length,
            banned_ids=translator.banned,
        )
        for t, tokens in enumerate(steps):
            got[:, t] = tokens
        same += int((got == want).all(axis=1).sum())
    same_beam = beam_equal(hp, ids, translator, encode, step_fn, decoder)
    first, rates = [], []
    for row in ids[:50]:
        t0 = time.perf_counter()
        steps = decoder.stream({"source": row[None]}, start, end, length)
        next(steps)
        t1 = time.perf_counter()
        count = 1 + sum(1 for _ in steps)
        t2 = time.perf_counter()
        first.append((t1 - t0) * 1e3)
        if count > 1:
            rates.append((count - 1) / (t2 - t1))
    return {
        "policy": policy,
        "weights": "int8 (dynamic)" if quantize == "dynamic" else "float32",
        "sentences": len(texts),
        "equal to Keras greedy": same,
        "equal to Keras beam": same_beam,
        "first token ms": round(statistics.median(first), 2),
        "tokens/s": round(statistics.median(rates), 1),
        "file MB": round(os.path.getsize(path) / 1e6, 2),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    args = parser.parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    rows = []
    for policy in args.policies:
        rows.append(bleu(args.weights, policy, beam=policy in ("full", "int8")))
        print(rows[-1], flush=True)
    streaming = []
    with tempfile.TemporaryDirectory() as folder:
        for policy, quantize in (
            ("full", "none"),
            ("full", "dynamic"),
            ("int8", "none"),
            ("window:8", "none"),
        ):
            streaming.append(
                stream_rows(
                    args.weights, policy, args.sentences, quantize, folder
                )
            )
            print(streaming[-1], flush=True)
    meta = results.meta(
        "translator_streaming",
        sys.argv[1:] if argv is None else argv,
        threads=1,
    )
    results.save(
        os.path.join(results.RESULTS, "translator_streaming.json"),
        meta,
        rows,
        streaming=streaming,
    )


if __name__ == "__main__":
    main()
