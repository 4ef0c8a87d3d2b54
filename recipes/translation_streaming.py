"""
Title: The shipped translator as a streaming LiteRT file
Author: keras_attn contributors
Description: The GRU ensemble of `saved_models/translation_en_fr`, rebuilt
from its SavedModel, written as a LiteRT file with `start` and `step`
signatures, its recurrent state explicit, checked against the Keras
translator's beam search and timed against the shipped one-call file.

Run it: `python recipes/translation_streaming.py --out runs/streaming.tflite`
(a few minutes on two CPU cores), then
`keras-attn translate --stream --model runs/streaming.tflite "Good morning."`.
Without the English-French pairs (`--pairs`, else `../shared/data`), the
file is written and the check against the Keras translator is skipped,
saying so.
"""

"""
## Why a streaming file

The shipped `model.tflite` runs the whole beam search in one call (a
`WHILE` loop inside the file): the caller sees nothing until the last
token. A streaming file leaves the loop to the caller: `start` encodes
the sentence, `step` decodes one token for every beam, and
`keras_attn_runtime` ranks the beams in NumPy as `BeamSampler` does, so
the words that every beam agrees on can be shown at once. The decoder's
state (three GRU states, the encoder memories and the source mask) goes
out of one call and into the next as plain arrays, which LiteRT's
`CompiledModel` runs with buffers of its own.

The Transformer translator (`translation_transformer.py`) would be the
natural streaming decoder, but it does not earn a place beside the GRU
ensemble (docs/results.md): this file streams the GRU's decoder instead.
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
import translation

from keras_attn.export import versions
from keras_attn.text import split_sentence
from keras_attn.translation import (
    export_streaming_translator,
    read_pairs,
    references,
    split_by_source,
)
from keras_attn.translation.subwords import WordPieceVectorizer
from keras_attn_runtime import read_vocabulary

SHIPPED = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "saved_models",
    "translation_en_fr",
)

"""
## Rebuild the shipped model

The folder holds the settings (`metrics.json`), the vocabularies and the
SavedModel's variables, each under its Keras path: the recipe's model is
built again, quantized as it was (Keras's weight-only int8), and given
those values. A check follows: the rebuilt translator's beam search gives
the SavedModel's translations.
"""


def dequantized(values, path, kind):
    """The float weight of a Keras int8 weight at `path` (`q / s`, the
    scale `s` one per embedding row or per kernel column), else the
    weight itself."""
    value = values[path].numpy()
    scale = values.get(path + "_scale")
    if scale is None:
        return value
    scale = scale.numpy()
    if kind == "embeddings":  # (V, e), one scale a row
        return value.astype("float32") / scale.reshape(-1, 1)
    return value.astype("float32") / scale.reshape(1, -1)  # (in, out)


def rebuild(folder, dequantize=False):
    """`(translator, hp, SavedModel)` of the shipped translator: its
    Keras int8 layers as they are, or (`dequantize`) a float model of
    their dequantized weights, for LiteRT's own int8."""
    with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
        hp = {**translation.HPARAMS, **json.load(f)["hyperparameters"]}
    # Fresh layer names: the SavedModel names its variables by them.
    keras.backend.clear_session()
    tokens = {}
    for side in ("source", "target"):
        path = os.path.join(folder, f"{side}_vocabulary.txt")
        tokens[side] = read_vocabulary(path)[2:]  # after "" and [UNK]
    vec_en = WordPieceVectorizer(
        tokens["source"], split_sentence, hp["source_length"]
    )
    vec_fr = WordPieceVectorizer(
        tokens["target"], None, hp["target_length"] + 1
    )
    trainer, encode, step_fn = translation.build_models(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    if hp["int8_weights"] and not dequantize:
        translation.quantize_weights(trainer)
    saved = tf.saved_model.load(os.path.join(folder, "saved_model"))
    values = dict(saved.served_variables)
    # Dropout's random seeds are not the model's: the SavedModel has none.
    weights = [v for v in trainer.variables if "seed_generator" not in v.path]
    expected = sorted(values)
    if dequantize:
        expected = [k for k in expected if not k.endswith("_scale")]
    if expected != sorted(v.path for v in weights):
        raise ValueError(
            f"The SavedModel in {folder!r} holds other variables than the "
            "translation recipe builds with its metrics.json settings"
        )
    for variable in weights:
        path = variable.path
        if dequantize:
            variable.assign(dequantized(values, path, path.split("/")[-1]))
        else:
            variable.assign(values[path])
    translator = translation.make_translator(
        trainer, encode, step_fn, vec_en, vec_fr, hp
    )
    return translator, hp, saved


"""
## Check and time

On validation sentences (the recipe's split; never the test data): the
SavedModel, the rebuilt Keras translator and the streaming file under
the NumPy runtime translate each; the streaming file is timed one
sentence at a time on one thread against the shipped one-call file, with
the time to its first words.
"""


def timed(translate, sentences):
    """Median seconds of `translate(sentence)` over `sentences`."""
    spent = []
    for sentence in sentences:
        begin = time.perf_counter()
        translate(sentence)
        spent.append(time.perf_counter() - begin)
    return float(np.median(spent))


def first_words(lite, sentence, greedy=False):
    """Seconds until `lite.stream` yields its first part."""
    begin = time.perf_counter()
    for _ in lite.stream(sentence, greedy=greedy):
        return time.perf_counter() - begin
    return time.perf_counter() - begin


def check(translator, saved, path, folder, sentences, timing):
    from keras_attn_runtime import LiteRTTranslator

    def same(a, b):
        return sum(x == y for x, y in zip(a, b, strict=True))

    batch = tf.constant(sentences)
    shipped = saved.signatures["translate"](batch)["translation"].numpy()
    shipped = [t.decode() for t in shipped]
    greedy = saved.signatures["translate_greedy"](batch)["translation"]
    greedy = [t.decode() for t in greedy.numpy()]
    keras_out = translator.translate(batch)["translation"].numpy()
    keras_out = [t.decode() for t in keras_out]
    lite = LiteRTTranslator(path, num_threads=1)
    streamed = [lite.translate(s) for s in sentences]
    joined = ["".join(lite.stream(s)) for s in sentences[:timing]]
    one_call = LiteRTTranslator(
        os.path.join(folder, "model.tflite"), num_threads=1
    )
    subset = sentences[:timing]
    return {
        "sentences": len(sentences),
        "rebuilt_equals_saved_model": same(keras_out, shipped),
        "streaming_equals_keras_beam": same(streamed, keras_out),
        "streaming_equals_saved_model": same(streamed, shipped),
        "one_call_file_equals_saved_model": same(
            [one_call.translate(s) for s in sentences], shipped
        ),
        "stream_parts_join_to_translation": same(joined, streamed[:timing]),
        "streaming_greedy_equals_saved_model_greedy": same(
            ["".join(lite.stream(s, greedy=True)) for s in sentences], greedy
        ),
        "engine": lite.decoder.engine,
        "timed_sentences": len(subset),
        "one_call_file_s": timed(one_call.translate, subset),
        "streaming_file_s": timed(lite.translate, subset),
        "streaming_first_words_s": float(
            np.median([first_words(lite, s) for s in subset])
        ),
        "streaming_greedy_first_word_s": float(
            np.median([first_words(lite, s, greedy=True) for s in subset])
        ),
        "one_call_file_mb": os.path.getsize(
            os.path.join(folder, "model.tflite")
        )
        / 2**20,
        "streaming_file_mb": os.path.getsize(path) / 2**20,
    }


"""
## One file that translates and streams

The streaming signatures need not live in a file of their own. Written
beside the one-call `translate` signature (`Translator.export_tflite`'s
`stream_batch`), they read the same frozen weights and the same int8
scales, so the file that streams is no larger than the one that does
not: `keras-attn translate` keeps its one-call answers, and `keras-attn
translate --stream` and `serve`'s streamed answers need nothing more.
Three decode signatures (4, 16 and 32 rows: one, four and eight
sentences' beams) let a server decode many requests in one call, and a
`prefill` per source length (8, 16 and 64 tokens) encodes a clause
without the padding of the longest one.
"""


# The validation clauses hold 6 source tokens at the median, 10 at most:
# a `prefill` of 8 or 16 tokens encodes one with little padding.
PREFILL_LENGTHS = (8, 16)


def one_file(folder, out, pairs=None, sentences=None):
    """Write `out`, the shipped translator's one-call file with its
    streaming signatures, and compare it on the validation sentences
    (all, or the first `sentences`) with the one-call file in `folder`:
    its `translate` answers, and its streamed ones."""
    from keras_attn.translation import files
    from keras_attn_runtime import LiteRTTranslator

    translator, hp, _ = rebuild(folder, dequantize=True)
    width = hp["beam_width"]
    files.export_tflite(
        translator,
        out,
        quantize="dynamic",
        search_method=hp["litert_search"],
        stream_batch=[width, 4 * width, 8 * width],
        prefill_lengths=PREFILL_LENGTHS,
    )
    pairs = pairs or translation.DEFAULT_PAIRS
    _, val_pairs = split_by_source(
        read_pairs(pairs), hp["val_fraction"], hp["seed"]
    )
    chosen = references(val_pairs)[0][:sentences]
    before = LiteRTTranslator(os.path.join(folder, "model.tflite"))
    after = LiteRTTranslator(out)
    old = [before.translate(s) for s in chosen]
    new = [after.translate(s) for s in chosen]
    streamed = ["".join(after.stream(s)) for s in chosen]
    return {
        "sentences": len(chosen),
        "translate_equal_to_one_call_file": sum(
            a == b for a, b in zip(old, new, strict=True)
        ),
        "stream_joined_equal_to_translate": sum(
            a == b for a, b in zip(streamed, new, strict=True)
        ),
        "signatures": sorted(after.litert.signatures),
        "one_call_file_bytes": os.path.getsize(
            os.path.join(folder, "model.tflite")
        ),
        "file_bytes": os.path.getsize(out),
        "versions": versions(),
    }


def main(
    out,
    folder=SHIPPED,
    pairs=None,
    sentences=200,
    timing=50,
    weights="litert_int8",
):
    """Write the streaming file `out` and check it. `weights`:
    `"litert_int8"` (the dequantized weights, quantized by LiteRT as the
    shipped one-call file is) or `"keras_int8"` (Keras's int8 layers,
    dequantized inside every step: the SavedModel's exact numbers)."""
    dequantize = weights == "litert_int8"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    translator, hp, saved = rebuild(folder, dequantize)
    export_streaming_translator(
        translator,
        out,
        batch_size=hp["beam_width"],
        quantize="dynamic" if dequantize else "none",
    )
    pairs = pairs or translation.DEFAULT_PAIRS
    if not os.path.isfile(pairs):
        print(
            f"wrote {out}; no English-French pairs at {pairs} (--pairs): "
            "the check against the Keras translator is skipped"
        )
        return {"streaming_file_mb": os.path.getsize(out) / 2**20}
    _, val_pairs = split_by_source(
        read_pairs(pairs), hp["val_fraction"], hp["seed"]
    )
    chosen = references(val_pairs)[0][:sentences]
    report = check(translator, saved, out, folder, chosen, timing)
    report["weights"] = weights
    report["versions"] = versions()
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("--out", required=True, help="the .tflite to write")
    parser.add_argument("--model", default=SHIPPED, help="translator folder")
    parser.add_argument("--pairs", default=None, help="the English-French TSV")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--timing", type=int, default=50)
    parser.add_argument("--report", help="write the figures to this JSON")
    parser.add_argument(
        "--one-file",
        action="store_true",
        help="write the one-call file with its streaming signatures "
        "instead, checked on every validation sentence (or --sentences)",
    )
    args = parser.parse_args()
    if args.one_file:
        report = one_file(args.model, args.out, args.pairs, args.sentences)
        print(json.dumps(report, indent=2))
    else:
        report = main(
            args.out, args.model, args.pairs, args.sentences or 200, args.timing
        )
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
