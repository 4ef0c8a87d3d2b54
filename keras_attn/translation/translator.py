"""Serving an encoder-decoder: strings in, translation and alignment out.

TensorFlow-only by nature (a `tf.Module` for SavedModel, a LiteRT
converter). The model is given in the form `keras_attn.seq2seq`'s searches
take:

- `encode(source_ids (B, S) int32) -> state`, a nest of batch-first
  tensors (RNN states, the encoder memory and its mask, caches...);
- `step_fn(tokens (B,), state, index) -> (logits (B, V), state,
  alignment (B, S))`.
"""

import tensorflow as tf

from keras_attn.seq2seq import samplers
from keras_attn.translation import files, search_methods, segmenting
from keras_attn_runtime import DETOKENIZERS

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
        encode: the encoder, as in the module docstring (kept).
        step_fn: the decoder's step, as in the module docstring (kept).
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
        start: the target's start token. Defaults to `"[start]"`.
        end: the target's end token. Defaults to `"[end]"`.
        unknown: the target's unknown token. Defaults to `"[UNK]"`.
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
        """`keras_attn.translation.files.check_litert` of this
        translator: a LiteRT file compared with its search, sentence by
        sentence."""
        return files.check_litert(self, path, sentences, greedy)

    def export(self, path, overwrite=False):
        """SavedModel with `translate` (also `serving_default`) and
        `translate_greedy` (`keras_attn.translation.files.
        export_saved_model`)."""
        return files.export_saved_model(self, path, overwrite=overwrite)

    def save(
        self,
        folder,
        overwrite=False,
        quantize=None,
        search_method=None,
        pad_source=None,
        litert_file=None,
    ):
        """Write the folder `keras-attn translate` and `align` read
        (`keras_attn.translation.files.save`, which says what it holds).
        Returns `folder`."""
        return files.save(
            self,
            folder,
            overwrite=overwrite,
            quantize=quantize,
            search_method=search_method,
            pad_source=pad_source,
            litert_file=litert_file,
        )

    def export_tflite(
        self,
        path,
        overwrite=False,
        quantize="none",
        search_method="greedy",
        pad_source=False,
        unroll_first_step=True,
        *,
        stream_batch=None,
        prefill_lengths=None,
    ):
        """A LiteRT file whose `translate` signature runs the whole search
        (`keras_attn.translation.files.export_tflite`, which says how)."""
        return files.export_tflite(
            self,
            path,
            overwrite=overwrite,
            quantize=quantize,
            search_method=search_method,
            pad_source=pad_source,
            unroll_first_step=unroll_first_step,
            stream_batch=stream_batch,
            prefill_lengths=prefill_lengths,
        )
