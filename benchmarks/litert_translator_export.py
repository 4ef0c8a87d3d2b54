"""How the translation recipe's ensemble is exported to LiteRT decides its
speed: per-sentence beam-search latency of one architecture, untrained
(random weights, so every search runs `--steps` steps), exported four
ways.

    python -m benchmarks.litert_translator_export [--steps 20] [--sentences 30]

- `keras_int8`: Keras's weight-only int8 applied first (as the SavedModel
  ships), then converted: each int8 layer becomes a dequantization that
  runs in every search step.
- `keras_int8_dynamic`: the same, then LiteRT's dynamic range on what is
  still float (the GRU kernels).
- `float_dynamic`: converted from the float weights with LiteRT's own
  dynamic-range int8 (what the recipe ships).
- `float16`: float weights stored as float16 (dequantized inside the
  loop).

Reads the training pairs only for the vocabularies (`--pairs`, the
recipe's default). Prints size and median milliseconds per sentence on
one thread over the first `--sentences` validation sentences.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def export(variant, hp, vectorizers, folder):
    import keras
    import translation

    from keras_attn.text import split_sentence
    from keras_attn.translation import Translator
    from keras_attn_runtime import DETOKENIZERS

    vec_en, vec_fr = vectorizers
    trainer, encode, step_fn = translation.build_models(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    if variant.startswith("keras_int8"):
        layers = (
            keras.layers.Embedding,
            keras.layers.Dense,
            keras.layers.EinsumDense,
        )
        trainer.quantize(
            config=keras.quantizers.Int8QuantizationConfig(
                activation_quantizer=None
            ),
            filters=lambda x: isinstance(x, layers),
        )
    translator = Translator(
        vec_en,
        vec_fr.get_vocabulary(),
        encode,
        step_fn,
        hp["target_length"],
        trackable=trainer,
        standardize=split_sentence,
        detokenize=DETOKENIZERS["french_wordpiece"],
        beam_width=hp["beam_width"],
        length_penalty=hp["length_penalty"],
        coverage_penalty=hp["coverage_penalty"],
    )
    quantize = {
        "keras_int8": "none",
        "keras_int8_dynamic": "dynamic",
        "float_dynamic": "dynamic",
        "float16": "float16",
    }[variant]
    path = os.path.join(folder, variant + ".tflite")
    translator.export_tflite(path, quantize=quantize, search_method="beam")
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sentences", type=int, default=30)
    p.add_argument("--pairs", default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, "..", "recipes"))
    import translation

    from keras_attn.translation import read_pairs, references, split_by_source
    from keras_attn_runtime import LiteRTTranslator

    hp = {**translation.HPARAMS, "target_length": args.steps}
    pairs = read_pairs(args.pairs or translation.DEFAULT_PAIRS)
    train, val = split_by_source(pairs, hp["val_fraction"], hp["seed"])
    sentences = references(val)[0][: args.sentences]
    with tempfile.TemporaryDirectory() as folder:
        vectorizers = translation.make_vectorizers(train, hp)
        for variant in (
            "keras_int8",
            "keras_int8_dynamic",
            "float_dynamic",
            "float16",
        ):
            path = export(variant, hp, vectorizers, folder)
            lite = LiteRTTranslator(path, num_threads=1)
            lite.translate(sentences[0])
            times = []
            for sentence in sentences:
                start = time.perf_counter()
                lite.translate(sentence)
                times.append(1000 * (time.perf_counter() - start))
            print(
                f"{variant:20s} {os.path.getsize(path) / 1e6:6.1f} MB  "
                f"median {statistics.median(times):7.2f} ms"
            )


if __name__ == "__main__":
    main()
