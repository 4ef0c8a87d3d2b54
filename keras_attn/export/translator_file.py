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


def streaming_search(translator):
    """The search settings a streaming translator file carries: the
    translator's greedy or beam search (`keras_attn_runtime.search` runs
    them with `BeamSampler`'s default ranking)."""
    from keras_attn.seq2seq import samplers

    sampler = translator.sampler
    if isinstance(sampler, samplers.GreedySampler):
        return {"search": "greedy"}
    config = (
        sampler.get_config()
        if isinstance(sampler, samplers.BeamSampler)
        else None
    )
    if (
        config is None
        or config["count_end_token"] is not True
        or config["coverage_on_finished_only"]
    ):
        raise ValueError(
            "A streaming translator file runs greedy search or a "
            "BeamSampler ranking as GNMT does (count_end_token=True, "
            "coverage_on_finished_only=False). Received: the translator's "
            f"sampler={sampler!r}"
        )
    keys = ("beam_width", "length_penalty", "coverage_penalty")
    return {"search": "beam", **{k: config[k] for k in keys}}


def export_streaming_translator(
    translator, path, batch_size=4, overwrite=False, quantize="none"
):
    """Write `path`, `translator`'s model as a streaming LiteRT decoder
    (`keras_attn.export.export_streaming_tflite`: a `prefill` signature
    that encodes `source (batch_size, source_length)` int32, zero-padded,
    and a `decode` signature decoding one token) with the translator's
    vocabularies, text settings and search in its metadata:
    `keras_attn_runtime.LiteRTTranslator` translates with it, and streams
    the words (`stream`) as they are decoded.

    Args:
        translator: a `keras_attn.translation.Translator` whose sampler
            is greedy or a `BeamSampler` (see `streaming_search`).
        path: the `.tflite` file.
        batch_size: the rows a step decodes: a beam search of width `K`
            decodes `batch_size // K` sentences at a time (its `prefill`
            encodes that many). Defaults to `4`.
        overwrite, quantize: as in `export_streaming_tflite`.
    """
    import tensorflow as tf

    from keras_attn.export.streaming import export_streaming_tflite

    search = streaming_search(translator)
    width = search.get("beam_width", 1)
    if not isinstance(batch_size, int) or batch_size < width:
        raise ValueError(
            f"Expected batch_size to be an integer of at least {width} (the "
            f"beam width). Received: batch_size={batch_size!r}"
        )
    entries = litert_metadata(translator, search["search"])
    settings = {
        "translator": json.loads(entries.pop(artifact.METADATA_CONFIG)),
        "start_id": translator.start_id,
        "end_id": translator.end_id,
        "banned_ids": list(translator.banned),
        "max_length": translator.max_length,
        **search,
    }
    # The encoder runs once a sentence; the step once a beam.
    spec = tf.TensorSpec(
        [batch_size // width, translator.source_length], tf.int32, "source"
    )
    return export_streaming_tflite(
        path,
        lambda source: translator.encode(source),
        translator.step_fn,
        {"source": spec},
        overwrite=overwrite,
        quantize=quantize,
        settings=settings,
        metadata=entries,
        step_batch=batch_size,
    )
