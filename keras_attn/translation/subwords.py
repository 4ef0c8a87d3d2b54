"""WordPiece subwords for translation: a vocabulary learned with Hugging
Face's `tokenizers`, and a vectorizer that applies it in the TensorFlow
graph (so a SavedModel takes raw strings).

WordPiece (Schuster & Nakajima 2012; Wu et al. 2016) splits each word
greedily into the longest vocabulary entries from its start; pieces after
the first carry the prefix `##`. A word with a character no entry covers
becomes one `[UNK]`. The edge runtime applies the same vocabulary with
NumPy (`keras_attn_runtime.text.wordpiece`); both are tested against
`tokenizers` itself, id for id.

Why WordPiece: its tokenization is a deterministic greedy match over a
plain list of strings, which TensorFlow ops (`tf.strings.substr` and a hash
table) and a dozen lines of Python can both apply exactly; a BPE merge
table or a unigram lattice would need a second implementation of a
search, and `sentencepiece`/`tensorflow-text` kernels are not builtin
LiteRT or TensorFlow ops.
"""

import re

import keras
import tensorflow as tf

from keras_attn_runtime.text import UNKNOWN_WORDS

SUFFIX = "##"


def wordpiece_vocabulary(
    texts,
    vocabulary_size,
    standardize,
    reserved=(),
    unknown_words="digits",
    min_frequency=2,
):
    """Learn WordPiece units from `texts` with `tokenizers`.

    Args:
        texts: a list of strings.
        vocabulary_size: the size of the vectorizer's vocabulary, padding
            and `[UNK]` included.
        standardize: a function of a string tensor returning words
            separated by spaces (e.g. `keras_attn.text.split_sentence`), or
            `None` for text already split.
        reserved: tokens placed first, kept whole (e.g. start and end).
        unknown_words: the name of a rule of
            `keras_attn_runtime.text.UNKNOWN_WORDS` (`"digits"`: words with
            a digit are left out and become `[UNK]`, which a `Translator`
            copies from the source) or `None`. Defaults to `"digits"`.
        min_frequency: pieces seen fewer times are not merged.
            Defaults to `2`.

    Returns:
        The tokens without padding and `[UNK]` (a `WordPieceVectorizer`
        puts them at ids 0 and 1): `reserved` first, then the pieces.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if unknown_words is not None and unknown_words not in UNKNOWN_WORDS:
        raise ValueError(
            f"Expected unknown_words in {sorted(UNKNOWN_WORDS)} or None. "
            f"Received: unknown_words={unknown_words!r}"
        )
    texts = list(texts)
    if standardize is not None:
        texts = [t.decode() for t in standardize(tf.constant(texts)).numpy()]
    if unknown_words is not None:
        skip = re.compile(UNKNOWN_WORDS[unknown_words])
        texts = [
            " ".join(w for w in t.split() if not skip.search(w)) for t in texts
        ]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    special = ["[PAD]", "[UNK]", *reserved]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=special,
        continuing_subword_prefix=SUFFIX,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    vocab = tokenizer.get_vocab()
    return [t for t in sorted(vocab, key=vocab.get) if t not in special[:2]]


@keras.saving.register_keras_serializable(package="keras_attn")
class WordPieceVectorizer(keras.layers.Layer):
    """Strings to WordPiece ids, in the TensorFlow graph.

    A stand-in for `keras.layers.TextVectorization` where the tokens are
    subwords: id 0 pads, id 1 is `[UNK]`, `vocabulary[k]` has id `k + 2`.

    Args:
        vocabulary: the tokens (`wordpiece_vocabulary`'s list).
        standardize: a function of a string tensor returning words
            separated by spaces, or `None` (split on whitespace only).
        output_sequence_length: pad or cut to this many tokens, or `None`
            (pad to the longest of the batch).
        unknown_words: a rule name of `keras_attn_runtime.text.
            UNKNOWN_WORDS`: matching words become `[UNK]`. Defaults to
            `"digits"`.
        max_chars_per_word: longer words become `[UNK]`. Defaults to `100`.
    """

    def __init__(
        self,
        vocabulary,
        standardize=None,
        output_sequence_length=None,
        unknown_words="digits",
        max_chars_per_word=100,
        **kwargs,
    ):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        vocabulary = [str(t) for t in vocabulary]
        if not vocabulary or any(not t or t == "[UNK]" for t in vocabulary):
            raise ValueError(
                "Expected vocabulary to be tokens without '' and '[UNK]'. "
                f"Received: vocabulary of {len(vocabulary)} tokens"
            )
        if unknown_words is not None and unknown_words not in UNKNOWN_WORDS:
            raise ValueError(
                f"Expected unknown_words in {sorted(UNKNOWN_WORDS)} or None. "
                f"Received: unknown_words={unknown_words!r}"
            )
        self.vocabulary = vocabulary
        self.standardize = standardize
        self.output_sequence_length = output_sequence_length
        self.unknown_words = unknown_words
        self.max_chars_per_word = int(max_chars_per_word)
        self.lookup = keras.layers.StringLookup(
            vocabulary=vocabulary, mask_token="", oov_token="[UNK]"
        )
        bare = [
            t[len(SUFFIX) :] if t.startswith(SUFFIX) else t for t in vocabulary
        ]
        self.longest = max(len(t) for t in bare)

    def get_vocabulary(self):
        return ["", "[UNK]", *self.vocabulary]

    def vocabulary_size(self):
        return len(self.vocabulary) + 2

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary": self.vocabulary,
            "standardize": keras.saving.serialize_keras_object(
                self.standardize
            ),
            "output_sequence_length": self.output_sequence_length,
            "unknown_words": self.unknown_words,
            "max_chars_per_word": self.max_chars_per_word,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["standardize"] = keras.saving.deserialize_keras_object(
            config["standardize"]
        )
        return cls(**config)

    def words(self, text):
        """The words of `text`, ragged `(B, W)`."""
        text = tf.strings.unicode_transcode(
            text, "UTF-8", "UTF-8", errors="replace"
        )
        if self.standardize is not None:
            text = self.standardize(text)
        return tf.strings.split(text)

    def _pieces(self, words):
        """Greedy longest match for a flat batch of words: ids `(N, P)`
        (0-padded on the right) and whether each word failed."""
        n = tf.size(words)
        chars = tf.strings.length(words, unit="UTF8_CHAR")
        lengths = tf.range(1, self.longest + 1)  # (M,)
        longest_word = tf.reduce_max(tf.concat([chars, [0]], 0))
        # At least one step: a graph cannot stack zero steps of unknown
        # width (a batch without words); one step over no word adds nothing.
        steps = tf.maximum(tf.minimum(longest_word, self.max_chars_per_word), 1)

        def body(i, pos, failed, out):
            start = tf.tile(pos[:, None], [1, self.longest])
            size = tf.tile(lengths[None, :], [n, 1])
            grid = tf.tile(words[:, None], [1, self.longest])
            cand = tf.strings.substr(grid, start, size, unit="UTF8_CHAR")
            cand = tf.where(start > 0, SUFFIX + cand, cand)
            ids = tf.cast(self.lookup(cand), "int32")
            fits = start + size <= chars[:, None]
            hit = fits & (ids > 1)
            best = tf.reduce_max(tf.where(hit, size, 0), axis=1)  # (N,)
            active = (pos < chars) & ~failed
            found = active & (best > 0)
            failed = failed | (active & (best == 0))
            pick = tf.gather(ids, tf.maximum(best - 1, 0), batch_dims=1)
            out = out.write(i, tf.where(found, pick, 0))
            return i + 1, pos + tf.where(found, best, 0), failed, out

        _, _, failed, out = tf.while_loop(
            lambda i, *_: i < steps,
            body,
            (
                tf.constant(0),
                tf.zeros([n], "int32"),
                chars > self.max_chars_per_word,
                tf.TensorArray("int32", size=steps),
            ),
        )
        ids = tf.transpose(out.stack())  # (N, steps)
        ids = tf.reshape(ids, [n, steps])
        if self.unknown_words is not None:
            pattern = UNKNOWN_WORDS[self.unknown_words]
            failed |= tf.strings.regex_full_match(words, f".*(?:{pattern}).*")
        ids = tf.where(failed[:, None], 0, ids)
        first = tf.where(failed, 1, ids[:, 0])
        return tf.concat([first[:, None], ids[:, 1:]], axis=1), failed

    def tokens(self, text):
        """Ids `(B, S)` and their strings (an `[UNK]`'s is its word)."""
        words = self.words(tf.convert_to_tensor(text))
        flat = words.flat_values
        ids, failed = self._pieces(flat)
        ids = tf.RaggedTensor.from_tensor(ids, padding=0)  # (N, P)
        names = ids.with_values(
            tf.where(
                ids.values == 1,
                tf.gather(flat, ids.value_rowids()),
                tf.gather(self.get_vocabulary(), ids.values),
            )
        )
        ids = words.with_flat_values(ids).merge_dims(1, 2)  # (B, S)
        names = words.with_flat_values(names).merge_dims(1, 2)
        shape = [None, self.output_sequence_length]
        return ids.to_tensor(0, shape=shape), names.to_tensor("", shape=shape)

    def count(self, text):
        """The tokens of each text before padding or cutting, `(B,)`."""
        words = self.words(tf.convert_to_tensor(text))
        ids, _ = self._pieces(words.flat_values)
        per_word = tf.math.count_nonzero(ids, axis=1, dtype="int64")
        return tf.reduce_sum(words.with_flat_values(per_word), axis=1)

    def call(self, text):
        return self.tokens(text)[0]
