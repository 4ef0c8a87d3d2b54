"""Which int8 arithmetic makes the LiteRT beam search give the
SavedModel's translations?

    python -m benchmarks.translator_int8_agreement FOLDER W [--limit N]

`FOLDER`: a translator folder of `recipes/translation.py` (the shipped
`saved_models/translation_en_fr`); `W`: its float weights, as
`python tools/translator_weights_from_saved_model.py FOLDER W` writes
them. On the validation sentences (the first `--limit`), beam search:

- the folder's SavedModel (Keras's weight-only int8: float activations);
- the recipe's model with Keras's int8 *with* its activation quantizer
  (each row of each Dense input quantized to int8, symmetric), built
  from `W`;
- the folder's LiteRT file (dynamic-range int8: activations quantized on
  the fly) through `keras_attn_runtime.LiteRTTranslator`, with LiteRT's
  default XNNPACK delegate and with the builtin kernels only.

Prints how many translations each LiteRT run shares with each Keras
model, and the LiteRT runs' mean seconds per sentence (one thread).
"""

import argparse
import os
import sys
import time

import keras

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from keras_attn.translation import read_pairs, references, split_by_source  # noqa: E402, I001
from recipes import translation  # noqa: E402

QUANTIZED = (
    keras.layers.Embedding,
    keras.layers.Dense,
    keras.layers.EinsumDense,
)


def keras_translator(weights, hp, vec_en, vec_fr):
    """The recipe's translator from float `weights`, with Keras's int8
    and its activation quantizer."""
    trainer, encode, step_fn = translation.build_models(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    trainer.load_weights(weights)
    trainer.quantize(
        config=keras.quantizers.Int8QuantizationConfig(),
        filters=lambda x: isinstance(x, QUANTIZED),
    )
    return translation.make_translator(
        trainer, encode, step_fn, vec_en, vec_fr, hp
    )


def litert(path, sentences, builtin_only):
    from ai_edge_litert import interpreter

    from keras_attn_runtime import LiteRTTranslator

    original = interpreter.Interpreter
    if builtin_only:  # the runtime builds its interpreter with this name

        class Builtin(original):
            def __init__(self, **kwargs):
                kind = (
                    interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                )
                super().__init__(experimental_op_resolver_type=kind, **kwargs)

        interpreter.Interpreter = Builtin
    try:
        lite = LiteRTTranslator(path, num_threads=1)
    finally:
        interpreter.Interpreter = original
    start = time.perf_counter()
    got = [lite.translate(s) for s in sentences]
    return got, (time.perf_counter() - start) / len(sentences)


def main(argv=None):
    import tensorflow as tf

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("weights")
    p.add_argument("--pairs", default=translation.DEFAULT_PAIRS)
    p.add_argument("--limit", type=int)
    args = p.parse_args(argv)
    hp = dict(translation.HPARAMS)
    _, val_pairs = split_by_source(
        read_pairs(args.pairs),
        hp["val_fraction"],
        hp["seed"],
    )
    sentences, _ = references(val_pairs)
    sentences = sentences[: args.limit]
    vec_en, vec_fr = translation.make_vectorizers(
        [], hp, args.weights + ".vocabularies.json"
    )
    saved = tf.saved_model.load(os.path.join(args.folder, "saved_model"))
    fn = saved.signatures["translate"]
    keras_rows = {
        "SavedModel (weight-only int8)": [
            t.decode()
            for i in range(0, len(sentences), 256)
            for t in fn(tf.constant(sentences[i : i + 256]))[
                "translation"
            ].numpy()
        ],
        "Keras int8 with activation quantizer": keras_translator(
            args.weights, hp, vec_en, vec_fr
        ).translate_texts(sentences),
    }
    path = os.path.join(args.folder, "model.tflite")
    for name, builtin in (("XNNPACK", False), ("builtin kernels", True)):
        got, seconds = litert(path, sentences, builtin)
        for keras_name, expected in keras_rows.items():
            same = sum(a == b for a, b in zip(got, expected, strict=True))
            print(
                f"LiteRT {name:16s} = {keras_name:38s}: {same} of "
                f"{len(sentences)} ({same / len(sentences):.2%})"
            )
        print(f"LiteRT {name:16s} {1000 * seconds:.2f} ms per sentence (mean)")


if __name__ == "__main__":
    main()
