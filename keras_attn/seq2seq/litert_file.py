"""What a LiteRT translator file holds beyond its graph: the sampler it
runs and the metadata the numpy-only runtime reads
(`Translator.export_tflite` writes both)."""

import json

from keras_attn.seq2seq import samplers
from keras_attn_runtime import DETOKENIZERS, artifact


def sampler_name(sampler):
    """The name `samplers.get` knows `sampler`'s class by (else the
    class name)."""
    names = {cls: name for name, cls in samplers.NAMES.items()}
    return names.get(type(sampler), type(sampler).__name__)


def token_sampler(sampler, argument):
    """`sampler`, if a translator can run it: one that reads the decoder's
    logits alone (not contrastive search, which needs the decoder's
    representation, nor multi-label decoding)."""
    if isinstance(
        sampler, (samplers.ContrastiveSampler, samplers.MultiLabelSampler)
    ):
        raise ValueError(
            f"A Translator runs greedy, random, top-k, top-p or beam "
            f"search. Received: {argument}={sampler!r}"
        )
    return sampler


def subword_config(vectorizer):
    """A subword vectorizer's settings for the runtime (`{}` for a word
    vectorizer)."""
    if not hasattr(vectorizer, "tokens"):
        return {}
    config = vectorizer.get_config()
    keys = ("unknown_words", "max_chars_per_word")
    # Version 2: a runtime reading version 1 would ignore `subwords`.
    return {"subwords": {k: config[k] for k in keys}, "version": 2}


def litert_sampler(translator, search_method):
    """The sampler `Translator.export_tflite(search_method=...)` runs."""
    if search_method == "beam":
        if not isinstance(translator.sampler, samplers.BeamSampler):
            raise ValueError(
                "search_method='beam' exports the translator's beam "
                f"search; its sampler is {translator.sampler!r}. Pass that "
                "sampler, or a BeamSampler, as search_method instead. "
                f"Received: search_method={search_method!r}"
            )
        return translator.sampler
    try:
        sampler = samplers.get(search_method)
    except ValueError:
        raise ValueError(
            "Expected search_method to be 'greedy', 'beam' or a sampler "
            f"(samplers.get). Received: search_method={search_method!r}"
        ) from None
    return token_sampler(sampler, "search_method")


def litert_metadata(translator, sampler):
    """The settings and vocabularies a LiteRT translator file carries
    for the numpy-only runtime."""
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
        search=sampler_name(sampler),
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
