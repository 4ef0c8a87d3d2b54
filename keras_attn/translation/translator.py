"""Serving an encoder-decoder: strings in, translation and alignment out.

TensorFlow-only by nature (a `tf.Module` for SavedModel, a LiteRT
converter). The model is given in the form `keras_attn.seq2seq`'s searches
take:

- `encode(source_ids (B, S) int32) -> state`, a nest of batch-first
  tensors (RNN states, the encoder memory and its mask, caches...);
- `step_fn(tokens (B,), state, index) -> (logits (B, V), state,
  alignment (B, S))`.
"""

import os
import shutil

import tensorflow as tf

from keras_attn.export import translator_file
from keras_attn.seq2seq import samplers
from keras_attn.translation import search_methods, segmenting
from keras_attn_runtime import DETOKENIZERS
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

# Joining French output tokens (the runtime's named rules).
DETOKENIZE = DETOKENIZERS["french"]


def copy_positions(attention, source, unknown_id=1):
    """The source position each output step copies from, `(B, L)`.

    The most attended source position among the source's own unknown
    words (numbers, names: what an output `[UNK]` stands for), or among
    all positions when the source has none.
    """
    unknown = tf.equal(source, unknown_id)[:, None, :]  # (B, 1, S)
    has = tf.reduce_any(unknown, axis=-1, keepdims=True)  # (B, 1, 1)
    keep = tf.logical_or(unknown, tf.logical_not(has))
    scores = tf.where(keep, attention, -1.0)  # (B, L, S)
    return tf.argmax(scores, axis=-1, output_type=tf.int32)


class Translator(tf.Module):
    """A SavedModel-ready translator with its search in-graph.

    An `[UNK]` in the output is replaced by a source word (unknown-word
    replacement, Luong et al. 2015): the most attended of the source's own
    unknown words at that step (see `copy_positions`), so numbers and
    names outside the vocabulary come through. An input with no words
    gives an empty translation.

    Args:
        source_vectorizer: a `TextVectorization` layer for the source text,
            with a fixed `output_sequence_length`.
        target_vocabulary: the target tokens, index = id.
        encode, step_fn: the model, as in the module docstring (kept).
        max_length: the most output tokens.
        trackable: the Keras model (or layer) holding the variables
            `encode` and `step_fn` use, so they are saved (its optimizer's
            are not; variables added later, as by `model.quantize`, are
            read at export). Quantize before the first `translate` or
            `export`: the searches are traced once. Defaults to `None`.
        standardize: the source vectorizer's standardization, to recover
            the source words that `[UNK]` copies. Defaults to `None`
            (no copying: `[UNK]` is banned).
        beam_width: beams for `translate`. Defaults to `4`.
        length_penalty: GNMT length penalty `α`. Defaults to `0.6`.
        coverage_penalty: GNMT coverage penalty `β`. Defaults to `0.0`.
        sampler: the search of `translate`, a `keras_attn.seq2seq.samplers`
            strategy or anything `samplers.get` takes (`"greedy"`,
            `"top_k"`, a config dict...). Defaults to `None`: a
            `BeamSampler` with `beam_width`, `length_penalty` and
            `coverage_penalty` (which must then keep their defaults).
        start, end, unknown: the target's special tokens. Default to
            `"[start]"`, `"[end]"` and `"[UNK]"`.
        detokenize: `(regex, rewrite)` pairs joining the output tokens.
            Defaults to the French rules of `DETOKENIZE`.
        segmenter: the name of a `keras_attn_runtime.SEGMENTERS` entry:
            an input of more than `segment_longer_than` words is cut into
            pieces (sentences, clauses) translated one by one and joined,
            for a model trained on short sentences. Defaults to `None`
            (never cut).
        segment_longer_than: see `segmenter`. Defaults to `8`.

    Signatures (each takes a batch of strings): `translate` (`sampler`,
    also `serving_default`) and `translate_greedy`, returning
    `translation`, `target_tokens`, `source_tokens`, `attention`
    `(B, target, source)` and `source_truncated` (the input had more words
    than the model reads); with a `segmenter`, also `pieces` and
    `source_length` (`translation.segmenting.join` says what each becomes).
    """

    def __init__(
        self,
        source_vectorizer,
        target_vocabulary,
        encode,
        step_fn,
        max_length,
        trackable=None,
        standardize=None,
        beam_width=4,
        length_penalty=0.6,
        coverage_penalty=0.0,
        start="[start]",
        end="[end]",
        unknown="[UNK]",
        detokenize=DETOKENIZE,
        segmenter=None,
        segment_longer_than=8,
        sampler=None,
    ):
        super().__init__()
        beam = (beam_width, length_penalty, coverage_penalty)
        if sampler is None:
            sampler = samplers.BeamSampler(*beam)
        elif beam != (4, 0.6, 0.0):
            raise ValueError(
                "Pass either sampler or the beam settings (beam_width, "
                f"length_penalty, coverage_penalty). Received: sampler="
                f"{sampler!r} and {beam}"
            )
        try:
            sampler = samplers.get(sampler)
        except ValueError:
            raise ValueError(
                "Expected sampler to be a sampler, one of "
                f"{sorted(samplers.NAMES)} or a config dict. "
                f"Received: sampler={sampler!r}"
            ) from None
        self.sampler = search_methods.token_sampler(sampler, "sampler")
        segmenting.check(segmenter, segment_longer_than)
        self.segmenter = segmenter
        self.segment_longer_than = segment_longer_than
        vocab = list(target_vocabulary)
        for name, token in (("start", start), ("end", end)):
            if token not in vocab:
                raise ValueError(
                    f"Expected {name}={token!r} in target_vocabulary. "
                    f"Received: {len(vocab)} tokens without it"
                )
        self.source_length = source_vectorizer.get_config()[
            "output_sequence_length"
        ]
        if not self.source_length:
            raise ValueError(
                "Expected source_vectorizer to have an output_sequence_length. "
                "Received: output_sequence_length=None"
            )
        self.vectorizer = source_vectorizer
        # The model's variables, not the model: a compiled model would
        # bring its optimizer's slots into the SavedModel too. Read again
        # at export: `model.quantize` after this adds variables.
        self._variables_of = lambda: (
            [] if trackable is None else (trackable.variables)
        )
        self.model_variables = self._variables_of()
        self.encode, self.step_fn = encode, step_fn  # the model's search form
        self.standardize = standardize
        self.start_id, self.end_id = vocab.index(start), vocab.index(end)
        self.unknown_id = vocab.index(unknown) if unknown in vocab else -1
        banned = [self.start_id]
        if standardize is None and self.unknown_id >= 0:
            banned.append(self.unknown_id)
        self.banned = tuple(banned)
        self.max_length = max_length
        self.detokenize = tuple(detokenize)
        self.target_vocabulary = vocab
        self.vocab = tf.constant(vocab)
        self.source_vocab = tf.constant(source_vectorizer.get_vocabulary())

    def _source_words(self, text):
        """The standardized source words (or subwords), `(B, S)`, and
        their counts."""
        if hasattr(self.vectorizer, "tokens"):  # WordPieceVectorizer
            return self.vectorizer.tokens(text)[1], self.vectorizer.count(text)
        if self.standardize is None:
            ids = self.vectorizer(text)
            return tf.gather(self.source_vocab, ids), None
        words = tf.strings.split(self.standardize(text))
        counts = words.row_lengths()
        shape = [None, self.source_length]
        return words.to_tensor("", shape=shape), counts

    def _decode(self, source, sampler, unroll_first_step=False, uniforms=None):
        """`sampler`'s search on the source ids `(B, S)`."""
        return sampler.decode_tokens(
            self.step_fn,
            self.encode(source),
            self.start_id,
            self.end_id,
            self.max_length,
            banned_ids=self.banned,
            source_mask=source != 0,
            alignment_length=tf.shape(source)[1],
            unroll_first_step=unroll_first_step,
            uniforms=uniforms,
        )

    def _search(self, text, sampler):
        source = tf.cast(self.vectorizer(text), "int32")  # (B, S)
        out = self._decode(source, sampler)
        source_words, counts = self._source_words(text)
        ids, attention = out["ids"], out["alignment"]
        empty = tf.reduce_all(source == 0, axis=1)  # (B,)
        return self._strings(
            ids, attention, source, source_words, counts, empty
        )

    def _strings(self, ids, attention, source, source_words, counts, empty):
        words = tf.gather(self.vocab, ids)
        if self.standardize is not None and self.unknown_id >= 0:
            at = copy_positions(attention, source)  # (B, L)
            copied = tf.gather(source_words, at, batch_dims=1)
            words = tf.where(ids == self.unknown_id, copied, words)
        ended = tf.cast(ids == self.end_id, "int32")
        keep = tf.cumsum(ended, axis=1, exclusive=True) == 0
        keep &= (ids != self.end_id) & (ids != 0) & ~empty[:, None]
        words = tf.where(keep, words, "")
        joined = tf.strings.reduce_join(words, axis=1, separator=" ")
        for pattern, rewrite in self.detokenize:
            joined = tf.strings.regex_replace(joined, pattern, rewrite)
        truncated = tf.zeros_like(empty)
        if counts is not None:
            truncated = counts > self.source_length
        return {
            "translation": tf.strings.strip(joined),
            "target_tokens": words,
            "source_tokens": source_words,
            "attention": attention,  # (B, target, source)
            "source_truncated": truncated,
        }

    def _run(self, text, sampler):
        if self.segmenter is None:
            return self._search(text, sampler)
        pieces, rows = segmenting.cut(
            text, self.segmenter, self.segment_longer_than
        )
        return segmenting.join(
            self._search(pieces, sampler),
            rows,
            tf.size(text, tf.int64),
            self.source_length,
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate(self, text):
        return self._run(text, self.sampler)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate_greedy(self, text):
        return self._run(text, samplers.GreedySampler())

    def translate_texts(self, sentences, greedy=False, batch_size=256):
        """Translate a list of Python strings, `batch_size` at a time, with
        `translate` (or greedy search with `greedy=True`); returns a list
        of strings."""
        if batch_size < 1:
            raise ValueError(
                f"`batch_size` must be at least 1; received {batch_size!r}."
            )
        run = self.translate_greedy if greedy else self.translate
        sentences = list(sentences)
        out = []
        for i in range(0, len(sentences), batch_size):
            batch = tf.constant(sentences[i : i + batch_size], tf.string)
            out += [t.decode() for t in run(batch)["translation"].numpy()]
        return out

    def check_litert(self, path, sentences, greedy=True):
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
        expected = self.translate_texts(sentences, greedy=greedy)
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

    def export(self, path, overwrite=False):
        """SavedModel with `translate` (also `serving_default`) and
        `translate_greedy`, through `export.export_module`'s checks."""
        from keras_attn.export import export_module

        signatures = {
            DEFAULT_SIGNATURE: self.translate,
            "translate": self.translate,
            "translate_greedy": self.translate_greedy,
        }
        self.model_variables = self._variables_of()
        return export_module(self, path, signatures, overwrite)

    def save(
        self,
        folder,
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
            self._check_litert_file(litert_file)
        quantize = quantize or "none"
        check_signature_quantize(quantize)

        os.makedirs(folder, exist_ok=True)
        saved, lite = (
            os.path.join(folder, name)
            for name in ("saved_model", "model.tflite")
        )
        vocabularies = {
            os.path.join(folder, f"{name}_vocabulary.txt"): tokens
            for name, tokens in (
                ("source", self.vectorizer),
                ("target", self.target_vocabulary),
            )
        }
        # Every destination is checked before anything is written.
        check_destination(saved, "saved_model", overwrite)
        check_destination(lite, "tflite", overwrite)
        for path, tokens in vocabularies.items():
            check_vocabulary_file(tokens, path, overwrite)
        for path, tokens in vocabularies.items():
            write_vocabulary(tokens, path, overwrite)
        self.export(saved, overwrite)
        if litert_file is None:
            self.export_tflite(
                lite,
                overwrite,
                quantize,
                search_method or "greedy",
                bool(pad_source),
            )
        else:
            with atomic_path(lite) as tmp:
                shutil.copyfile(litert_file, tmp)
        return folder

    def _check_litert_file(self, path):
        """`path` is a LiteRT translator with this translator's
        vocabularies and settings (a `ValueError` otherwise)."""
        from keras_attn_runtime import LiteRTTranslator

        lite = LiteRTTranslator(path)
        theirs = (lite.source_vocab, lite.target_vocab, lite.max_length)
        ours = (
            list(self.vectorizer.get_vocabulary()),
            list(self.target_vocabulary),
            self.max_length,
        )
        if lite.length != self.source_length or theirs != ours:
            raise ValueError(
                "Expected litert_file to be written by this translator's "
                "export_tflite (same vocabularies, source_length and "
                f"max_length). Received: litert_file={path!r}"
            )

    def export_tflite(
        self,
        path,
        overwrite=False,
        quantize="none",
        search_method="greedy",
        pad_source=False,
        unroll_first_step=True,
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

        The vocabularies and the settings the numpy-only runtime
        (`keras_attn_runtime.LiteRTTranslator`) needs travel inside the file
        as metadata.
        """
        from keras_attn.export import export_signatures_tflite

        for name, value in (
            ("pad_source", pad_source),
            ("unroll_first_step", unroll_first_step),
        ):
            if not isinstance(value, bool):
                raise ValueError(
                    f"Expected {name} to be True or False. "
                    f"Received: {name}={value!r}"
                )
        sampler = search_methods.litert_sampler(self, search_method)
        translate = self._litert_function(
            sampler, pad_source, unroll_first_step
        )
        metadata = translator_file.litert_metadata(
            self, search_methods.sampler_name(sampler)
        )
        return export_signatures_tflite(
            {"translate": translate}, path, overwrite, metadata, quantize
        )

    def _litert_function(self, sampler, pad_source, unroll_first_step):
        """The `translate` `tf.function` of `export_tflite`'s file."""
        from keras_attn.export import at_static_sizes

        width = self.source_length if pad_source else None

        def static_alignment(out):
            # LiteRT's CompiledModel sizes outputs before the run: the
            # alignment's source axis, computed in the loop, is padded to
            # `source_length` so that its declared size is true.
            align = out["alignment"]
            if width is None:
                align = at_static_sizes(align, {2: self.source_length})
            return {"ids": out["ids"], "alignment": align}

        specs = [tf.TensorSpec([1, width], tf.int32, "source")]
        if isinstance(sampler, samplers.RandomSampler):
            # LiteRT has no stateless random op: the numbers are an input.
            specs.append(
                tf.TensorSpec([self.max_length, 1], tf.float32, "uniforms")
            )

        @tf.function(input_signature=specs)
        def translate(source, uniforms=None):
            out = self._decode(source, sampler, unroll_first_step, uniforms)
            return static_alignment(out)

        return translate
