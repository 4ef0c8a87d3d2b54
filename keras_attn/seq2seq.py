"""Serving an encoder-decoder: strings in, translation and alignment out.

TensorFlow-only by nature (a `tf.Module` for SavedModel, a LiteRT
converter). The model is given as two Keras models, the contract
`keras_attn.decoding` and `keras_attn.litert_runtime.LiteRTTranslator`
share:

- `encoder(source_ids (B, S)) -> [memory (B, S, D), state (B, U)]`;
- `step([prev (B, 1), state (B, U), memory (B, S, D), memory_mask (B, S)])
  -> [logits (B, V), new_state (B, U), attention (B, S)]`.
"""

import tensorflow as tf

from keras_attn import decoding

DETOKENIZE = ((" +", " "), ("' ", "'"), (r" ([.,])", r"\1"))


class Translator(tf.Module):
    """A SavedModel-ready translator with beam and greedy search in-graph.

    Args:
        source_vectorizer: a `TextVectorization` layer for the source text.
        target_vocabulary: the target tokens, index = id.
        encoder, step: the Keras models of the module docstring.
        max_length: the most output tokens.
        beam_width: beams for `translate`. Defaults to `4`.
        length_penalty: GNMT length penalty α. Defaults to `0.6`.
        start, end: the target's start and end tokens. Default to
            `"[start]"` and `"[end]"`.
        banned: target tokens never emitted. Defaults to `("[UNK]",)`.
        detokenize: `(regex, rewrite)` pairs joining the output tokens.
            Defaults to French-style rules (`l' homme` → `l'homme`, no
            space before `.` and `,`).

    Signatures (each takes a batch of strings): `translate` (beam search)
    and `translate_greedy`, returning `translation`, `target_tokens`,
    `source_tokens` and `attention` `(B, target, source)`.
    """

    def __init__(
        self,
        source_vectorizer,
        target_vocabulary,
        encoder,
        step,
        max_length,
        beam_width=4,
        length_penalty=0.6,
        start="[start]",
        end="[end]",
        banned=("[UNK]",),
        detokenize=DETOKENIZE,
    ):
        super().__init__()
        vocab = list(target_vocabulary)
        for token in (start, end):
            if token not in vocab:
                raise ValueError(
                    f"Expected {token!r} in target_vocabulary. Received: "
                    f"{len(vocab)} tokens without it"
                )
        self.vectorizer, self.encoder, self.step = (
            source_vectorizer,
            encoder,
            step,
        )
        self.start_id, self.end_id = vocab.index(start), vocab.index(end)
        self.banned = tuple(i for i, t in enumerate(vocab) if t in banned)
        self.max_length, self.beam_width = max_length, beam_width
        self.length_penalty, self.detokenize = length_penalty, detokenize
        self.vocab = tf.constant(vocab)
        self.source_vocab = tf.constant(source_vectorizer.get_vocabulary())

    def _encode(self, source):
        return self.encoder(source, training=False)

    def _step(self, prev, state, memory, mask):
        return self.step([prev, state, memory, mask], training=False)

    def _search(self, text, search, *settings):
        ids, attention = search(
            self._encode,
            self._step,
            self.vectorizer(text),
            self.start_id,
            self.end_id,
            self.max_length,
            *settings,
            banned_ids=self.banned,
        )
        ended = tf.cast(tf.equal(ids, self.end_id), "int32")
        keep = tf.cumsum(ended, axis=1, exclusive=True) == 0
        keep &= (ids != self.end_id) & (ids != 0)
        words = tf.where(keep, tf.gather(self.vocab, ids), "")
        joined = tf.strings.reduce_join(words, axis=1, separator=" ")
        for pattern, rewrite in self.detokenize:
            joined = tf.strings.regex_replace(joined, pattern, rewrite)
        return {
            "translation": tf.strings.strip(joined),
            "target_tokens": words,
            "source_tokens": tf.gather(
                self.source_vocab, self.vectorizer(text)
            ),
            "attention": attention,  # (B, target, source)
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate(self, text):
        return self._search(
            text, decoding.beam_search, self.beam_width, self.length_penalty
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate_greedy(self, text):
        return self._search(text, decoding.greedy_decode)

    def export(self, path, overwrite=False):
        """SavedModel with `translate` (also `serving_default`) and
        `translate_greedy`, through `export.export_module`'s checks."""
        from keras_attn.export import export_module

        signatures = {
            "serving_default": self.translate,
            "translate": self.translate,
            "translate_greedy": self.translate_greedy,
        }
        return export_module(self, path, signatures, overwrite)


def export_tflite(encoder, step, path, source_length, overwrite=False):
    """LiteRT model with `encode` and one-token `step` signatures, batch 1,
    builtin ops only, for `litert_runtime.LiteRTTranslator`.

    Shapes come from the models: the state width from `step`'s second
    input, the memory width from its third; the source length is fixed to
    `source_length`.
    """
    from keras_attn.export import export_signatures_tflite

    units = step.inputs[1].shape[-1]
    width = step.inputs[2].shape[-1]
    s = source_length

    @tf.function(input_signature=[tf.TensorSpec([1, s], tf.int32, "source")])
    def encode(source):
        memory, state = encoder(source, training=False)
        return {"memory": memory, "state": state}

    @tf.function(
        input_signature=[
            tf.TensorSpec([1, 1], tf.int32, name="prev"),
            tf.TensorSpec([1, units], tf.float32, name="state"),
            tf.TensorSpec([1, s, width], tf.float32, name="memory"),
            tf.TensorSpec([1, s], tf.bool, name="memory_mask"),
        ]
    )
    def one_step(prev, state, memory, memory_mask):
        logits, new_state, attention = step(
            [prev, state, memory, memory_mask], training=False
        )
        return {"logits": logits, "state": new_state, "attention": attention}

    return export_signatures_tflite(
        {"encode": encode, "step": one_step}, path, overwrite
    )
