"""The project's subword tokenization as a Hugging Face `tokenizers`
`Tokenizer` (a `tokenizer.json`), for engines that read one, such as
LiteRT-LM.

It tokenizes as `keras_attn_runtime.text.split_sentence` followed by
`keras_attn_runtime.text.wordpiece` (and `WordPieceVectorizer` in the
graph): spaces (narrow and non-breaking ones included) separate words;
`. , ! ? ; : " « » ( )` are words of their own; an apostrophe ends the
word it follows; each word is split greedily into the longest
vocabulary entries, `##` before pieces after the first; a word that no
entries cover is one `[UNK]`. Decoding joins as the `french_wordpiece`
detokenizer: pieces glued, no space after an apostrophe nor before `.`
and `,`.

The digits rule (`unknown_words="digits"`: a word with a digit is
`[UNK]`) needs nothing more, as long as no vocabulary entry holds a
digit: such a word then has a character no entry covers.
"""

_WHITESPACE = "[\t\n\f\r \u202f\u00a0\u2009]+"
_PUNCTUATION = '[.,!?;:"«»()]'
PAD, UNK = "[PAD]", "[UNK]"


def wordpiece_tokenizer(vocabulary, special_tokens=(), max_chars_per_word=100):
    """A `tokenizers.Tokenizer` of a WordPiece `vocabulary`.

    Args:
        vocabulary: the tokens in id order, padding (`""` or `[PAD]`)
            and `[UNK]` first (a `WordPieceVectorizer`'s
            `get_vocabulary()`).
        special_tokens: tokens of `vocabulary` matched whole in the text
            before it is split (e.g. `"[sep]"` in a prompt template) and
            left out when decoding with `skip_special_tokens=True`.
        max_chars_per_word: longer words become `[UNK]`, as in
            `keras_attn_runtime.text.wordpiece`.

    Returns:
        The `Tokenizer`; `tokenizer.to_str()` is its `tokenizer.json`.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocabulary = list(vocabulary)
    if vocabulary[:1] == [""]:  # Keras's name for padding
        vocabulary[0] = PAD
    if vocabulary[:2] != [PAD, UNK] or len(set(vocabulary)) != len(vocabulary):
        raise ValueError(
            "Expected vocabulary to start with '[PAD]', '[UNK]' and hold "
            f"each token once. Received: vocabulary={vocabulary[:4]!r}... "
            f"({len(vocabulary)} tokens, {len(set(vocabulary))} distinct)"
        )
    missing = [t for t in special_tokens if t not in vocabulary]
    if missing:
        raise ValueError(
            "Expected special_tokens to be tokens of vocabulary. "
            f"Received: special_tokens={list(special_tokens)!r}, missing "
            f"{missing!r}"
        )
    index = {token: i for i, token in enumerate(vocabulary)}
    tokenizer = Tokenizer(
        models.WordPiece(
            index,
            unk_token=UNK,
            continuing_subword_prefix="##",
            max_input_chars_per_word=max_chars_per_word,
        )
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_WHITESPACE), behavior="removed"),
            pre_tokenizers.Split(Regex(_PUNCTUATION), behavior="isolated"),
            pre_tokenizers.Split("'", behavior="merged_with_previous"),
        ]
    )
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.WordPiece(prefix="##", cleanup=False),
            decoders.Fuse(),
            decoders.Replace("' ", "'"),
            decoders.Replace(" .", "."),
            decoders.Replace(" ,", ","),
        ]
    )
    tokenizer.add_special_tokens([PAD, *special_tokens])
    return tokenizer


def learn_wordpiece_tokenizer(
    texts, vocabulary_size, reserved=(), min_frequency=2
):
    """A `wordpiece_tokenizer` whose vocabulary `tokenizers` learns from
    `texts` (split as the tokenizer splits them): `[PAD]`, `[UNK]`,
    `reserved` (special tokens, kept whole), then the pieces."""
    from tokenizers import Tokenizer, models, trainers

    probe = wordpiece_tokenizer([PAD, UNK])
    learner = Tokenizer(models.WordPiece(unk_token=UNK))
    learner.pre_tokenizer = probe.pre_tokenizer
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=[PAD, UNK, *reserved],
        continuing_subword_prefix="##",
    )
    learner.train_from_iterator(list(texts), trainer)
    vocab = learner.get_vocab()
    ordered = sorted(vocab, key=vocab.get)
    return wordpiece_tokenizer(ordered, special_tokens=reserved)
