"""The LiteRT translator written by `keras_attn.translation.Translator`, run
with LiteRT and NumPy: no Keras, no TensorFlow."""

import contextlib
import re
import threading

import numpy as np

from keras_attn_runtime import legacy
from keras_attn_runtime.artifact import (
    METADATA_CONFIG,
    METADATA_SOURCE_VOCABULARY,
    METADATA_TARGET_VOCABULARY,
    ONE_CALL_AND_STREAMING,
    STREAMING_FILE,
    TRANSLATOR,
    check_format,
    config_object,
    load_verified,
    metadata,
    metadata_length,
    stream_layout,
)
from keras_attn_runtime.engine import LiteRTModel
from keras_attn_runtime.search import BeamSearch, Handover, TokenSearch
from keras_attn_runtime.streaming import StreamingDecoder
from keras_attn_runtime.text import (
    STANDARDIZERS,
    UNKNOWN_WORDS,
    Kept,
    PieceByPiece,
    as_texts,
    detokenizer,
    parse_vocabulary,
    segmenter,
    segments,
    wordpiece,
)


class LiteRTTranslator:
    """Translation with a LiteRT model, NumPy and LiteRT only.

    Reads a file written by `keras_attn.translation.Translator.export_tflite`:
    one `translate` signature runs the whole search (one call per
    sentence), and the vocabularies and settings travel inside the file as
    metadata. Or a streaming file (`keras_attn.export.
    export_streaming_translator`: `prefill` and `decode` signatures), decoded
    here one token at a time with the translator's greedy or beam search;
    `stream` then yields the words as they are decoded. An `[UNK]` in the
    output is replaced by the source word the attention points at; an
    input with no words gives `""`.

    Safe to share between threads (one lock around each translation).

    Args:
        model_path: the `.tflite` file.
        num_threads: LiteRT's CPU threads (`None`: LiteRT's choice).
            Defaults to `1`.
        seed: for a file that samples (exported with a random sampler,
            whose `uniforms` input takes one number in `[0, 1)` per output
            token): the seed of NumPy's generator that draws them. Defaults
            to `None` (fresh entropy).
        accelerator: `"cpu"` (the default), `"gpu"` or `"npu"` (see
            `keras_attn_runtime.engine.LiteRTModel`).
        cpu_kernels: `"auto"` (the default: for the file's kind, the
            fastest settings that give the same numbers for the same
            input, whatever the process, threads, load or callers),
            `"builtin"` or `"xnnpack"` (see `keras_attn_runtime.engine.
            LiteRTModel`).
    """

    def __init__(
        self,
        model_path,
        num_threads=1,
        seed=None,
        accelerator="cpu",
        cpu_kernels="auto",
    ):
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or seed < 0
        ):
            raise ValueError(
                "Expected seed to be None or a non-negative integer. "
                f"Received: seed={seed!r}"
            )
        # What pickling carries (`__reduce__`): the file is opened again.
        self._arguments = (
            model_path,
            num_threads,
            seed,
            accelerator,
            cpu_kernels,
        )
        data, model = load_verified(model_path)
        entries = metadata(model)
        config = None
        if METADATA_CONFIG in entries:
            config = config_object(entries[METADATA_CONFIG], model_path)
        self.decoder = None  # a streaming file's
        layout = stream_layout(entries)
        if layout == STREAMING_FILE and isinstance(config, dict):
            self.decoder = StreamingDecoder(
                model_path, num_threads, accelerator, cpu_kernels
            )
            self.litert = self.decoder.litert
            config = self.decoder.config.get("translator")
        else:
            self.litert = LiteRTModel(
                data, model, model_path, num_threads, accelerator, cpu_kernels
            )
        if self.decoder is None and layout == ONE_CALL_AND_STREAMING:
            # A one-call file that also streams: one copy of the model.
            self.decoder = StreamingDecoder(model_path, litert=self.litert)
        self._lock = threading.Lock()
        self.batcher = None  # `batch_streams`'s
        signatures = self.litert.signatures
        one_call = "translate" in signatures
        if config is None or (self.decoder is None and not one_call):
            raise ValueError(
                "Expected a LiteRT translator written by keras_attn."
                "translation.Translator.export_tflite (a 'translate' "
                "signature and keras_attn.config metadata) or by "
                "keras_attn.translation.export_streaming_translator. "
                f"Received: {model_path!r} with signatures {sorted(signatures)}"
            )
        check_format(config, TRANSLATOR, model_path)
        try:
            self._read_config(config, entries, model_path)
        except (KeyError, TypeError, AttributeError, OverflowError) as err:
            raise ValueError(
                f"Not a valid LiteRT translator: {model_path!r} (its "
                f"keras_attn.config metadata is malformed: "
                f"{type(err).__name__} {err})"
            ) from None
        self.dynamic, self.uniforms, self.runner = False, None, None
        if one_call:
            self.runner = self.litert.runner("translate")
            # Files written since 0.3 read the sentence's own length.
            inputs = self.runner.get_input_details()
            self.dynamic = not legacy.fixed_source_length(inputs)
            # A sampling file's random numbers, `(max_length, 1)`.
            self.uniforms = inputs.get("uniforms", {}).get("shape")
        self.rng = np.random.default_rng(seed)
        self.index = {t: i for i, t in enumerate(self.source_vocab) if i > 1}

    def _read_config(self, config, entries, model_path):
        self.source_vocab = parse_vocabulary(
            entries.get(METADATA_SOURCE_VOCABULARY, b""), model_path
        )
        self.target_vocab = parse_vocabulary(
            entries.get(METADATA_TARGET_VOCABULARY, b""), model_path
        )
        name = config.get("standardize") or "standardize_sentence"
        if name not in STANDARDIZERS:
            raise ValueError(
                f"Unknown standardization {name!r} in {model_path!r}; "
                f"expected one of {sorted(STANDARDIZERS)}"
            )
        self.standardize = STANDARDIZERS[name]
        self.length = metadata_length(
            config.get("source_length"), "source_length", model_path
        )
        self.max_length = metadata_length(
            config.get("max_length"), "max_length", model_path
        )
        self.end = int(config["end_id"])
        self.unknown = (
            int(config["unknown_id"]) if config.get("copy_unknown") else -1
        )
        self.detokenize = detokenizer(config, model_path)
        self.segmenter = config.get("segmenter")
        if self.segmenter is not None:
            self.segmenter = segmenter(
                self.segmenter, f"the segmenter of {model_path!r}"
            )
            self.segment_longer_than = metadata_length(
                config.get("segment_longer_than"),
                "segment_longer_than",
                model_path,
            )
        self.subwords = config.get("subwords")
        if self.subwords is not None:
            rule = self.subwords.get("unknown_words")
            if rule is not None and rule not in UNKNOWN_WORDS:
                raise ValueError(
                    f"Unknown unknown_words rule {rule!r} in {model_path!r}; "
                    f"expected one of {sorted(UNKNOWN_WORDS)}"
                )
            self.subwords = {
                "unknown_words": rule,
                "max_chars_per_word": metadata_length(
                    self.subwords.get("max_chars_per_word"),
                    "max_chars_per_word",
                    model_path,
                ),
            }

    def __reduce__(self):
        """Pickled as its arguments, opened again when unpickled (a
        LiteRT interpreter cannot be pickled). A sampling file's
        generator starts again from `seed`; `batch_streams`' loops are
        not carried."""
        return type(self), self._arguments

    def source_tokens(self, text, truncate=False):
        """The source tokens of `text` (words, or subwords for a subword
        model; an `[UNK]` subword is its whole word) and their ids; a
        `ValueError` when there are more than the model reads, unless
        `truncate`."""
        found, ids = self._all_tokens(text)
        if len(found) > self.length and not truncate:
            kind = self.token_unit
            raise ValueError(
                f"Expected at most {self.length} {kind} (the translator "
                f"reads no more). Received: text with {len(found)} {kind}; "
                "pass truncate=True to translate the first ones"
            )
        return found[: self.length], ids[: self.length]

    def check_window(self, text):
        """A `PromptTooLong` when a piece of `text` (a clause, for a file
        that cuts long inputs: `pieces`) has more source tokens than the
        file reads: the one window check of a LiteRT translator, made by
        the server, the command line and the Beam handler before any
        call."""
        from keras_attn_runtime.signature import PromptTooLong

        for piece in self.pieces(text):
            count = self.token_count(piece)
            if count > self.length:
                per = " per clause" if self.segmenter is not None else ""
                raise PromptTooLong(self.length, count, self.token_unit, per)

    @property
    def token_unit(self):
        """What the file reads: `"words"`, or `"subword tokens"`."""
        return "words" if self.subwords is None else "subword tokens"

    def token_count(self, text):
        """How many source tokens `text` has, all of them (`length` is
        how many the file reads)."""
        return len(self._all_tokens(text)[0])

    def _all_tokens(self, text):
        """`(tokens, ids)` of `text`, all of them. A text is tokenized
        once: the window check (`check_window`) and the search read the
        same tokens (the last `TEXTS_KEPT` texts' are kept)."""
        (text,) = as_texts([text], "text")
        kept = self.__dict__.setdefault("_tokens_kept", Kept(TEXTS_KEPT))
        found, ids = kept.get(text, self._tokenized)
        return list(found), list(ids)

    def _tokenized(self, text):
        found = [t for t in self.standardize(text).split(" ") if t]
        if self.subwords is None:
            ids = [self.index.get(t, 1) for t in found]
        else:
            ids, found = wordpiece(found, self.index, **self.subwords)
        return tuple(found), tuple(ids)

    def source_words(self, text, truncate=False):
        """The source tokens of `text` (see `source_tokens`)."""
        return self.source_tokens(text, truncate)[0]

    def source_ids(self, tokens):
        """The model's `(1, S)` input for a list of source tokens (words
        or subwords: an unknown one is `[UNK]`): `S` is the number of
        tokens, or the file's `source_length` for a file that reads a
        fixed length (zero-padded)."""
        width = len(tokens) if self.dynamic else self.length
        ids = np.zeros((1, width), "int32")
        ids[0, : len(tokens)] = [self.index.get(t, 1) for t in tokens]
        return ids

    def translate_ids(self, text, truncate=False):
        """`(ids, alignment (L, S) or None, source words)` of `text`."""
        words = self.source_words(text, truncate)
        if not words:
            return [], None, words
        feed = {"source": self.source_ids(words)}
        if self.runner is None:  # a streaming file's search
            with self._decoding():
                *_, (ids, align) = self._decoded(feed["source"])
            return self._trimmed(ids, align, words)
        with self._lock:
            if self.uniforms is not None:
                shape = tuple(int(n) for n in self.uniforms)
                feed["uniforms"] = self.rng.random(shape, dtype="float32")
            out = self.runner(**feed)
            ids = [int(i) for i in np.asarray(out["ids"])[0]]
            align = np.array(out["alignment"][0], "float32")
        return self._trimmed(ids, align, words)

    def _trimmed(self, ids, align, words):
        """`(ids, alignment, words)`: the output up to its end token, its
        alignment over the source's words."""
        if self.end in ids:
            ids = ids[: ids.index(self.end)]
        ids = [i for i in ids if i > 0]
        # A file that reads the sentence's own length pads the alignment
        # to its `source_length` (a size declared before the run).
        width = len(words) if self.dynamic else align.shape[-1]
        return ids, align[: len(ids), :width], words

    def _decoded(self, source, greedy=False):
        """A streaming file's search (or greedy search) on `source (1,
        S)`: yield `(ids, alignment (n, S))` of the tokens decoded so far
        that stay (for a beam search, those its beams agree on); the last
        yield is the whole output."""
        config = self.decoder.config
        # The sentence's own tokens go to the shortest `prefill` that
        # holds them (zero-padded); the state, and so the alignment and
        # the source mask, span `source_length`.
        own = {"source": source[:, : np.count_nonzero(source[0])]}
        source = np.pad(source, ((0, 0), (0, self.length - source.shape[1])))
        if self.batcher is not None:
            yield from self.batcher.search(own, greedy)
            return
        banned = config["banned_ids"]
        search = TokenSearch(1, config["end_id"], banned_ids=banned)
        if not greedy and config["search"] == "beam":
            beam = {k: config[k] for k in BEAM_SETTINGS}
            search = BeamSearch(
                1,
                config["end_id"],
                **beam,
                source_mask=source != 0,
                banned_ids=banned,
            )
        handover, max_length = Handover(search), config["max_length"]
        steps = self.decoder.search_steps(
            own, search, config["start_id"], max_length
        )
        for search in steps:
            last = search.emitted.shape[1] == max_length
            (decided,) = handover.take(last)
            if decided is not None:
                yield decided

    def pieces(self, text):
        """The pieces `translate` translates one by one: `text` itself, or
        its clauses for a file written with a `segmenter` (a long input
        cut where the segmenter allows)."""
        (text,) = as_texts([text], "text")
        if self.segmenter is None:
            return [text]
        return segments(text, self.segmenter, self.segment_longer_than)

    def translate(self, text, truncate=False):
        """The translation of `text` (empty for an input with no words),
        or of each text of a list. A file written with a `segmenter` cuts
        a long input into pieces, translated one by one (`translate_ids`
        takes one piece)."""
        if not isinstance(text, str):
            texts = as_texts(text, "text")
            return [self.translate(t, truncate) for t in texts]
        parts = self.pieces(text)
        if self.segmenter is None:
            return self._translate_piece(text, truncate)
        joined = " ".join(self._translate_piece(p, truncate) for p in parts)
        return joined.strip()

    def answer(self, text):
        """The file's one answer to `text`, as every door gives it (the
        server, `keras-attn translate`, the Beam handler): its streams,
        joined, where the file streams, so that a streamed answer and a
        whole one agree; else its one call (`translate`). A file with
        both signatures ranks its beams in two ways, which differ on
        about 1% of sentences."""
        if self.decoder is None:
            return self.translate(text)
        return "".join(self.stream(text))

    def answer_ids(self, text, truncate=False):
        """`(ids, alignment (L, S) or None, source words)` of `text` (one
        piece), as `answer` decides them: the streams' final search where
        the file streams, else its one call (`translate_ids`)."""
        if self.decoder is None:
            return self.translate_ids(text, truncate)
        words = self.source_words(text, truncate)
        if not words:
            return [], None, words
        with self._decoding():
            *_, (ids, align) = self._decoded(self.source_ids(words))
        return self._trimmed(ids, align, words)

    def stream(self, text, truncate=False, greedy=False, stop=None):
        """Yield the translation of `text` in parts as a streaming file
        decodes it (each word once its search will not change it): joined,
        they are the streaming signatures' translation (`translate(text)`
        for a file without a one-call signature). `greedy=True` runs
        greedy search instead of the file's beam search: a word a step.
        `stop`: a `threading.Event`; once set, the decoding ends at its
        next step."""
        if self.decoder is None:
            raise ValueError(
                "Expected a streaming translator file (keras_attn.translation."
                "export_streaming_translator) to stream. Received: "
                f"{self.litert.model_path!r}, one call per sentence"
            )
        (text,) = as_texts([text], "text")
        pieces = [text]
        if self.segmenter is not None:
            pieces = segments(text, self.segmenter, self.segment_longer_than)
        done, out = [], PieceByPiece()
        for piece in pieces:
            words = self.source_words(piece, truncate)
            if words:
                with self._decoding():
                    source = self.source_ids(words)
                    decoded, seen = self._decoded(source, greedy), None
                    for ids, align in decoded:
                        if stop is not None and stop.is_set():
                            decoded.close()
                            return
                        if ids == seen:  # nothing new settled this step
                            continue
                        seen = ids
                        now = self._text(*self._trimmed(ids, align, words))
                        new = out.next(" ".join([*done, now]).strip())
                        if new:
                            yield new
            done.append(now if words else "")
        final = out.rest(" ".join(done).strip())
        if final:
            yield final

    def batch_streams(self, max_rows=None, loops=1):
        """Decode the streaming signatures of every caller in shared loops
        (`keras_attn_runtime.batching.Loops`: `loops` of them, one a core,
        each `max_rows` rows at once): `stream`, and `translate` on a
        file without a one-call signature, then run side by side, each
        sentence's search advancing one token a call with the others in
        its loop, with the answer it gets alone. Returns the loops."""
        from keras_attn_runtime.batching import Loops

        if self.decoder is None:
            raise ValueError(
                "Expected a translator file with streaming signatures to "
                f"batch streams. Received: {self.litert.model_path!r}, one "
                "call per sentence"
            )
        self.batcher = Loops(
            self.litert.model_path,
            loops,
            max_rows,
            # The loops' copies run the Interpreter: the kernels this file
            # runs on here, so that a stream is the sentence's translation.
            self.litert.cpu_settings.partition(":")[0],
        )
        return self.batcher

    def _decoding(self):
        """The lock a streaming search holds: none when batched (the
        batcher's loop alone calls the file)."""
        return contextlib.nullcontext() if self.batcher else self._lock

    def _translate_piece(self, text, truncate):
        return self._text(*self.translate_ids(text, truncate))

    def _text(self, ids, align, words):
        """The words of `ids` joined: an output [UNK] copies the most
        attended source word among the source's own unknown words (all of
        them if it has none), as `keras_attn.translation.translator.
        copy_positions`."""
        unknown = [self.index.get(w, 1) == 1 for w in words]
        keep = np.array(unknown if any(unknown) else [True] * len(words))
        out = []
        for t, i in enumerate(ids):
            if i == self.unknown:
                scores = np.where(keep, align[t, : len(words)], -1.0)
                out.append(words[int(np.argmax(scores))])
            else:
                out.append(self.target_vocab[i])
        joined = " ".join(out)
        for pattern, rewrite in self.detokenize:
            joined = re.sub(pattern, rewrite, joined)
        return joined.strip()


# Texts whose tokens a translator keeps (`_all_tokens`).
TEXTS_KEPT = 256

# A streaming translator file's beam settings, in its config.
BEAM_SETTINGS = ("beam_width", "length_penalty", "coverage_penalty")
