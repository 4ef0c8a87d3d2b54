"""The translator artifact, as `Translator.export_tflite` writes it: the
`keras_attn.config` object and the vocabularies in the LiteRT file's
metadata. `keras_attn_runtime.translator` reads the same keys."""

import json

from keras_attn_runtime import DETOKENIZERS, artifact


def subword_config(vectorizer):
    """A subword vectorizer's settings for the runtime (`{}` for a word
    vectorizer)."""
    if not hasattr(vectorizer, "tokens"):
        return {}
    config = vectorizer.get_config()
    keys = ("unknown_words", "max_chars_per_word")
    # Version 2: a runtime reading version 1 would ignore `subwords`.
    return {"subwords": {k: config[k] for k in keys}, "version": 2}


def litert_metadata(translator, search):
    """The settings and vocabularies a LiteRT file of `translator`
    (`keras_attn.translation.Translator`) running the search named
    `search` carries for the numpy-only runtime
    (`keras_attn_runtime.LiteRTTranslator` reads them)."""
    named = [n for n, r in DETOKENIZERS.items() if r == translator.detokenize]
    if not named:
        raise ValueError(
            "A LiteRT translator names its detokenizer (patterns never "
            "travel in a model file): give one of the rule sets of "
            "keras_attn_runtime.DETOKENIZERS. Received: "
            f"detokenize={translator.detokenize!r}"
        )
    config = artifact.artifact_config(
        artifact.TRANSLATOR,
        standardize=getattr(translator.standardize, "__name__", None),
        source_length=translator.source_length,
        max_length=translator.max_length,
        start_id=translator.start_id,
        end_id=translator.end_id,
        unknown_id=translator.unknown_id,
        copy_unknown=translator.standardize is not None,
        detokenizer=named[0],
        search=search,
        **subword_config(translator.vectorizer),
        segmenter=translator.segmenter,
        segment_longer_than=translator.segment_longer_than,
    )
    return {
        artifact.METADATA_CONFIG: json.dumps(config).encode(),
        artifact.METADATA_SOURCE_VOCABULARY: "\n".join(
            translator.vectorizer.get_vocabulary()
        ).encode(),
        artifact.METADATA_TARGET_VOCABULARY: "\n".join(
            translator.target_vocabulary
        ).encode(),
    }
