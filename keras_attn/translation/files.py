"""A `Translator`'s files, written here and nowhere else: its folder
(`save`: a SavedModel, a LiteRT file and the vocabularies, named by
`keras_attn_runtime.artifact.TRANSLATOR_FOLDER`), its SavedModel, its
one-call LiteRT file and its streaming LiteRT file, with the settings
and vocabularies the numpy-only runtime reads from their metadata
(`keras_attn_runtime.translator`). Which search a file can run is
`search_methods`'."""

import json
import os
import shutil

import tensorflow as tf

from keras_attn.legacy import exports as legacy_exports
from keras_attn.seq2seq import samplers
from keras_attn.translation import search_methods
from keras_attn_runtime import DETOKENIZERS, artifact
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

FOLDER = artifact.TRANSLATOR_FOLDER


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


def check_litert(translator, path, sentences, greedy=True):
    """Compare a LiteRT file written by `export_tflite` (or `save`)
    with this translator's greedy (or, with `greedy=False`, beam)
    search, sentence by sentence,
    through the numpy-only runtime. Returns a dict: `size_bytes`,
    `ops` (the op types), `search` (`"greedy"` or `"beam"`),
    `agreement_with_keras` (the fraction of identical translations),
    `latency_ms_per_sentence` (one `translate` call each) and
    `sentences`."""
    import time

    from keras_attn.export import tflite_op_names
    from keras_attn_runtime import LiteRTTranslator

    sentences = list(sentences)
    if not sentences:
        raise ValueError("`sentences` must hold at least one sentence.")
    expected = translator.translate_texts(sentences, greedy=greedy)
    lite, start = LiteRTTranslator(path), time.perf_counter()
    got = [lite.translate(s) for s in sentences]
    seconds = (time.perf_counter() - start) / len(sentences)
    same = sum(a == b for a, b in zip(got, expected, strict=True))
    return {
        "size_bytes": os.path.getsize(path),
        "ops": tflite_op_names(path),
        "search": "greedy" if greedy else "beam",
        "agreement_with_keras": same / len(sentences),
        "latency_ms_per_sentence": round(1000 * seconds, 2),
        "sentences": len(sentences),
    }


def export_saved_model(translator, path, *, overwrite=False, protect=()):
    """SavedModel with `translate` (also `serving_default`) and
    `translate_greedy`, through `export.export_module`'s checks."""
    from keras_attn.export import export_module

    signatures = {
        DEFAULT_SIGNATURE: translator.translate,
        "translate": translator.translate,
        "translate_greedy": translator.translate_greedy,
    }
    translator.model_variables = translator._variables_of()
    return export_module(
        translator,
        path,
        signatures=signatures,
        overwrite=overwrite,
        protect=protect,
    )


def save(
    translator,
    folder,
    *,
    overwrite=False,
    quantize=None,
    search_method=None,
    pad_source=None,
    litert_file=None,
):
    """Write the folder `keras-attn translate` and `align` read (the
    translator contract, docs/export.md): `saved_model/` (`export`),
    `model.tflite` (`export_tflite`, with `quantize`, `search_method`
    and `pad_source`; defaults `"none"`, `"greedy"`, `False`),
    `source_vocabulary.txt` and `target_vocabulary.txt`. The folder is
    created if needed. An earlier export of the same kind is replaced;
    anything else there (a vocabulary with other tokens, a file that
    is not a LiteRT model) only with `overwrite`, and then nothing is
    written. Returns `folder`.

    `litert_file`: a file `export_tflite` already wrote for this
    translator, copied in as `model.tflite` instead of exporting one
    (then pass none of `quantize`, `search_method`, `pad_source`).
    Export it before quantizing the model's weights with Keras
    (`model.quantize("int8")`): LiteRT runs Keras's int8 layers as a
    dequantization inside every search step (2.4 times slower than
    the float file's own dynamic-range int8 on the translation
    recipe's ensemble: `benchmarks/litert_translator_export.py`)."""
    from keras_attn.export import (
        atomic_path,
        check_destination,
        check_signature_quantize,
        check_vocabulary_file,
        write_vocabulary,
    )

    options = (quantize, search_method, pad_source)
    if litert_file is not None:
        if options != (None, None, None):
            raise ValueError(
                "Pass either litert_file or the LiteRT export options "
                f"(quantize, search_method, pad_source). Received: "
                f"litert_file={litert_file!r} and {options}"
            )
        _check_litert_file(translator, litert_file)
    quantize = quantize or "none"
    check_signature_quantize(quantize)

    os.makedirs(folder, exist_ok=True)
    saved, lite = (
        os.path.join(folder, FOLDER[name]) for name in ("saved_model", "litert")
    )
    vocabularies = {
        os.path.join(folder, FOLDER[f"{name}_vocabulary"]): tokens
        for name, tokens in (
            ("source", translator.vectorizer),
            ("target", translator.target_vocabulary),
        )
    }
    # Every destination is checked before anything is written.
    check_destination(saved, "saved_model", overwrite)
    check_destination(lite, "tflite", overwrite)
    for path, tokens in vocabularies.items():
        check_vocabulary_file(tokens, path, overwrite)
    for path, tokens in vocabularies.items():
        write_vocabulary(tokens, path, overwrite)
    export_saved_model(translator, saved, overwrite=overwrite)
    if litert_file is None:
        export_tflite(
            translator,
            lite,
            overwrite=overwrite,
            quantize=quantize,
            search_method=search_method or "greedy",
            pad_source=bool(pad_source),
        )
    else:
        with atomic_path(lite) as tmp:
            shutil.copyfile(litert_file, tmp)
    return folder


def _check_litert_file(translator, path):
    """`path` is a LiteRT translator with this translator's
    vocabularies and settings (a `ValueError` otherwise)."""
    from keras_attn_runtime import LiteRTTranslator

    lite = LiteRTTranslator(path)
    theirs = (lite.source_vocab, lite.target_vocab, lite.max_length)
    ours = (
        list(translator.vectorizer.get_vocabulary()),
        list(translator.target_vocabulary),
        translator.max_length,
    )
    if lite.length != translator.source_length or theirs != ours:
        raise ValueError(
            "Expected litert_file to be written by this translator's "
            "export_tflite (same vocabularies, source_length and "
            f"max_length). Received: litert_file={path!r}"
        )


def _check_flags(**flags):
    """A `ValueError` naming the first flag that is not a bool."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(
                f"Expected {name} to be True or False. "
                f"Received: {name}={value!r}"
            )


def export_tflite(
    translator,
    path,
    *,
    overwrite=False,
    protect=(),
    quantize="none",
    search_method="greedy",
    pad_source=False,
    unroll_first_step=True,
    stream_batch=None,
    prefill_lengths=None,
):
    """LiteRT model whose `translate(source (1, S) int32)` signature
    runs the whole search (a builtin `WHILE`) and returns `ids (1, L)`
    and `alignment (1, L, source_length)`; builtin ops only. The input
    is the sentence's own `S` tokens (at most `source_length`): the
    encoder and the attention run on no padding, and the alignment's
    columns past `S` are zeros (so that every output's size is
    declared before the run, as LiteRT's `CompiledModel` needs).
    `pad_source=True` reads `source_length` tokens, zero-padded, as
    the SavedModel does: for
    an encoder whose output depends on padding (one that does not
    mask). `search_method`: `"greedy"`, `"beam"` (the translator's
    `sampler`, a `BeamSampler`), or a token sampler in any form
    `samplers.get` takes: the file runs it as one `WHILE`. A random
    sampler's file takes its random numbers as a second input,
    `uniforms (max_length, 1)` float32 in `[0, 1)` (LiteRT has no
    stateless random op; `LiteRTTranslator(seed=...)` draws them).
    `quantize`: `"none"`, `"float16"` or `"dynamic"` (int8 weights),
    as in `keras_attn.export.export_signatures_tflite`.
    `unroll_first_step=True` (the default) takes the first step
    before the `WHILE`: its tokens are the start id, a constant, so
    the converter computes what depends on them alone at conversion
    time, in float (for the example translator: 0.29 MB more, 3% less
    time on one thread). `False` runs it in the loop with the others:
    a smaller file, whose int8 weights (`quantize="dynamic"`) then
    serve the first step too.

    `stream_batch`: also write the streaming signatures of
    `export_streaming_translator` (its `batch_size`: one number of rows,
    or a list of them), which then read the one copy of the weights the
    `translate` signature reads: `LiteRTTranslator` translates with
    `translate` and streams (`stream`) with them. Defaults to `None`.
    `prefill_lengths`: the streaming signatures' shorter source lengths,
    as in `export_streaming_translator`.

    The vocabularies and the settings the numpy-only runtime
    (`keras_attn_runtime.LiteRTTranslator`) needs travel inside the file
    as metadata.
    """
    from keras_attn.export import export_signatures_tflite

    _check_flags(pad_source=pad_source, unroll_first_step=unroll_first_step)
    sampler = search_methods.litert_sampler(translator, search_method)
    translate = _litert_function(
        translator, sampler, pad_source, unroll_first_step
    )
    metadata = litert_metadata(translator, search_methods.sampler_name(sampler))
    functions = {"translate": translate}
    if stream_batch is not None:
        streaming, config = _streaming(
            translator, stream_batch, prefill_lengths
        )
        functions.update(streaming)
        metadata[artifact.METADATA_STREAMING] = json.dumps(config).encode()
    return export_signatures_tflite(
        functions,
        path,
        overwrite=overwrite,
        protect=protect,
        metadata=metadata,
        quantize=quantize,
        share_weights=stream_batch is not None,
    )


def _prefill_lengths(translator, prefill_lengths):
    """The source lengths of the `prefill` signatures, shortest first:
    `prefill_lengths` and `source_length`."""
    lengths = list(prefill_lengths or ())
    full = translator.source_length
    for n in lengths:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n < full:
            raise ValueError(
                f"Expected prefill_lengths to hold integers from 1 to "
                f"{full - 1} (source_length is {full}). Received: "
                f"prefill_lengths={prefill_lengths!r}"
            )
    return sorted({*lengths, full})


def _padded_encode(translator, sentences):
    """`translator.encode`, its state's source axes zero-padded to
    `source_length`: a `prefill` of a shorter source gives the state of
    the longest one (the step reads the source positions past a
    sentence as padding, as the one-call file's search does)."""
    full = tf.zeros([sentences, translator.source_length], tf.int32)
    shapes = tf.nest.map_structure(lambda t: t.shape, translator.encode(full))

    def encode(source):
        state = translator.encode(source)

        def pad(tensor, shape):
            sizes = zip(tensor.shape, shape, strict=True)
            pads = [[0, m - n] for n, m in sizes]
            return tf.pad(tensor, pads) if any(p[1] for p in pads) else tensor

        return tf.nest.map_structure(pad, state, shapes)

    return encode


def _streaming(translator, batch_size, prefill_lengths=None):
    """`(functions, config)` of `translator`'s streaming signatures with
    `batch_size` rows (a number, or a list: one decode signature each)
    and a `prefill` a source length (`prefill_lengths`, then
    `source_length`; the runtime runs the shortest that holds a
    sentence); `config` holds the search and token settings the runtime
    decodes with (`keras_attn_runtime.StreamingDecoder`)."""
    from keras_attn.export.streaming import streaming_functions

    lengths = _prefill_lengths(translator, prefill_lengths)
    search = search_methods.streaming_search(translator)
    width = search.get("beam_width", 1)
    sizes = [batch_size] if isinstance(batch_size, int) else list(batch_size)
    if not sizes or not all(isinstance(n, int) and n >= width for n in sizes):
        raise ValueError(
            f"Expected batch_size to be an integer of at least {width} (the "
            f"beam width), or a list of them. Received: batch_size="
            f"{batch_size!r}"
        )
    # The encoder runs once a sentence; the step once a beam.
    sentences = sizes[0] // width
    specs = [
        {"source": tf.TensorSpec([sentences, n], tf.int32, "source")}
        for n in lengths
    ]
    encode = lambda source: translator.encode(source)  # noqa: E731
    if len(lengths) > 1:
        encode = _padded_encode(translator, sentences)
    functions, config = streaming_functions(
        (encode, translator.step_fn),
        start_signature=specs if len(specs) > 1 else specs[0],
        step_batch=batch_size,
    )
    settings = {
        "start_id": translator.start_id,
        "end_id": translator.end_id,
        "banned_ids": list(translator.banned),
        "max_length": translator.max_length,
        **search,
    }
    config = artifact.artifact_config(
        artifact.STREAMING_DECODER, **config, **settings
    )
    return functions, config


def _litert_function(translator, sampler, pad_source, unroll_first_step):
    """The `translate` `tf.function` of `export_tflite`'s file."""
    from keras_attn.export import at_static_sizes

    width = translator.source_length if pad_source else None

    def static_alignment(out):
        # LiteRT's CompiledModel sizes outputs before the run: the
        # alignment's source axis, computed in the loop, is padded to
        # `source_length` so that its declared size is true.
        align = out["alignment"]
        if width is None:
            align = at_static_sizes(align, {2: translator.source_length})
        return {"ids": out["ids"], "alignment": align}

    specs = [tf.TensorSpec([1, width], tf.int32, "source")]
    if isinstance(sampler, samplers.RandomSampler):
        # LiteRT has no stateless random op: the numbers are an input.
        specs.append(
            tf.TensorSpec([translator.max_length, 1], tf.float32, "uniforms")
        )

    @tf.function(input_signature=specs)
    def translate(source, uniforms=None):
        out = translator._decode(source, sampler, unroll_first_step, uniforms)
        return static_alignment(out)

    return translate


@legacy_exports.options_by_position("batch_size", "overwrite", "quantize")
def export_streaming_translator(
    translator,
    path,
    *,
    batch_size=4,
    overwrite=False,
    protect=(),
    quantize="none",
    prefill_lengths=None,
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
            is greedy or a `BeamSampler` (see
            `search_methods.streaming_search`).
        path: the `.tflite` file.
        batch_size: the rows a step decodes: a beam search of width `K`
            decodes `batch_size // K` sentences at a time (its `prefill`
            encodes that many). Or a list of row counts, one decode
            signature each (the first sets the `prefill`'s sentences).
            Defaults to `4`.
        overwrite: as in `export_streaming_tflite`.
        protect: as in `export_streaming_tflite`.
        quantize: as in `export_streaming_tflite`.
        prefill_lengths: shorter source lengths, a `prefill` signature
            each (`prefill_0`, ... shortest first, the last reading
            `source_length`): the runtime encodes a sentence with the
            shortest that holds it, its state zero-padded to
            `source_length` (the step reads positions past a sentence as
            padding, as for the one-call file's `translate`). Defaults
            to `None` (one `prefill`).
    """
    from keras_attn.export import export_signatures_tflite

    search = search_methods.streaming_search(translator)
    functions, config = _streaming(translator, batch_size, prefill_lengths)
    entries = litert_metadata(translator, search["search"])
    config["translator"] = json.loads(entries.pop(artifact.METADATA_CONFIG))
    entries[artifact.METADATA_CONFIG] = json.dumps(config).encode()
    return export_signatures_tflite(
        functions,
        path,
        overwrite=overwrite,
        protect=protect,
        metadata=entries,
        quantize=quantize,
    )
