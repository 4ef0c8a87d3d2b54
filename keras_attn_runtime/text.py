"""Text standardization and tokenization of exported models, in Python.

Mirrors the TensorFlow side (`keras_attn.text` and `TextVectorization`'s
whitespace split and vocabulary lookup: index 0 is padding, 1 is
out-of-vocabulary); tests check both give the same ids. Translators name
their standardizer and detokenizer: only the known ones here are run,
no pattern is ever read from a model file.
"""

import os
import re
import string

import numpy as np

# ASCII letters only, as `tf.strings.lower` without an encoding.
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_MARKS = re.compile(r"([!?])")
_OTHER = re.compile(r"[^a-z0-9!?' ]")
_SPACE_RUN = re.compile(" {3,}")
_CHUNK = 1 << 16  # characters standardized at a time

# Letters that TensorFlow's `tf.strings.lower(encoding="utf-8")` leaves as
# they are while Python's `str.lower` lowercases them: letters newer than
# TensorFlow's Unicode tables (Unicode 14's Vithkuqi, among others). The
# runtime follows TensorFlow, the SavedModel's side, not the interpreter.
# Derived by `python tools/derive_lowercase_table.py` (TensorFlow 2.21,
# Python 3.11, Unicode 14.0); a test checks it against TensorFlow.
TF_KEEPS_CASE = (
    (0x2C2F, 0x2C2F),
    (0xA7C0, 0xA7C0),
    (0xA7D0, 0xA7D0),
    (0xA7D6, 0xA7D6),
    (0xA7D8, 0xA7D8),
    (0x10570, 0x1057A),
    (0x1057C, 0x1058A),
    (0x1058C, 0x10592),
    (0x10594, 0x10595),
)
_KEPT = re.compile(
    "(["
    + "".join(
        f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in TF_KEEPS_CASE
    )
    + "])"
)


def lower(text):
    """`text` lowercased as `tf.strings.lower(text, encoding="utf-8")`
    lowercases it: Unicode's full case mapping with its context rules
    (Python's `str.lower`), except for the letters of `TF_KEEPS_CASE`,
    kept as they are. TensorFlow also ends the text at a NUL character."""
    text = text.split("\x00", 1)[0]
    parts = _KEPT.split(text)  # text, kept letter, text, ...
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _untagged(text, chunk=_CHUNK):
    """`text` with each `<...>` tag replaced by a space, in slices.

    Leftmost-first, as the regex `<[^>]*>`: a `<` with no `>` after it
    starts no tag, and then no later `<` does either. Every character is
    scanned a bounded number of times (linear time), and no slice is
    longer than `chunk`.
    """
    pos, n, tags = 0, len(text), True
    while pos < n:
        lt = text.find("<", pos) if tags else -1
        gt = text.find(">", lt + 1) if lt >= 0 else -1
        if gt < 0:
            tags, end = False, n
        else:
            end = lt
        while pos < end:
            stop = min(end, pos + chunk)
            yield text[pos:stop]
            pos = stop
        if gt >= 0:
            yield " "
            pos = gt + 1


def _pieces(text, shorten=True):
    """Space-separated pieces of the standardized text (before the quote
    rule), streamed with each piece's length bounded.

    With `shorten`, a piece longer than `MAX_TOKEN_LENGTH` characters (no
    vocabulary token is) is shortened to one that maps to the same id:
    leading and trailing quote runs become one quote and an over-long
    core becomes `MAX_TOKEN_LENGTH + 1` copies of `#` (a character the
    standardization never leaves, so the piece is out of vocabulary, as
    the long original was).
    """
    carry = ""
    short = _shorten if shorten else str
    for part in _untagged(text):
        part = _OTHER.sub(" ", _MARKS.sub(r" \1 ", part.translate(ASCII_LOWER)))
        if shorten:
            # Two spaces leave the next piece's separator free whatever
            # came before, as any longer run does: same tokens, fewer
            # empty pieces to walk through.
            part = _SPACE_RUN.sub("  ", part)
        split = part.split(" ")
        if len(split) == 1:
            carry = short(carry + split[0])
            continue
        yield short(carry + split[0])
        for piece in split[1:-1]:
            yield short(piece)
        carry = short(split[-1])
    yield carry


MAX_TOKEN_LENGTH = 256


def _shorten(piece):
    if len(piece) <= 2 * MAX_TOKEN_LENGTH + 2:
        return piece
    core = piece.strip("'")
    lead = "'" if piece.startswith("'") else ""
    if not core:
        return lead
    trail = "'" if piece.endswith("'") else ""
    if len(core) > MAX_TOKEN_LENGTH:
        core = "#" * (MAX_TOKEN_LENGTH + 1)
    return lead + core + trail


def _quote_rule(pieces):
    """Apply `(^|\\s)'+|'+(\\s|$)` → space, piece by piece.

    Yields `(core, lead_at_start, trail_at_end)` per piece. A leading quote
    run is removed when the space before it (or the start) is still free;
    a trailing run is removed together with the space after it, which is
    then not free for the next piece: exactly the regex's leftmost,
    non-overlapping matches, without its quadratic backtracking on long
    quote runs.
    """
    free = True  # the separator before this piece (or ^) is unconsumed
    for piece in pieces:
        core, at_start = piece, False
        if core.startswith("'") and free:
            core = core.lstrip("'")
            at_start = True
        consumed = False
        if core.endswith("'"):
            core = core.rstrip("'")
            consumed = True
        free = not consumed
        yield core, at_start, consumed


def tokens(text, limit=None):
    """The tokens of `text`, as `TextVectorization` with
    `standardize_review` splits them; stops after `limit` tokens.

    Linear in the length of `text`; memory beyond the input is bounded
    (a few slices of 64k characters), whatever the input. A token longer
    than `MAX_TOKEN_LENGTH` comes back as `MAX_TOKEN_LENGTH + 1` copies
    of `#`: out of any vocabulary, as the original was.
    """
    count = 0
    for core, _, _ in _quote_rule(_pieces(text)):
        if limit is not None and count >= limit:
            return
        if core:
            count += 1
            yield core


def standardize(text):
    """The same string as `keras_attn.text.standardize_review`."""
    out, head, last = [], "", None
    for core, at_start, consumed in _quote_rule(_pieces(text, False)):
        if not out and at_start:
            head = " "  # the quotes matched at ^ became a space
        out.append(core)
        last = consumed
    text = head + " ".join(out)
    return text + " " if last else text  # quotes matched at $


def check_vocabulary(vocabulary, source="vocabulary"):
    """Raise a `ValueError` unless `vocabulary` is a usable token list:
    padding `""` first, then `[UNK]`, then at least one distinct token
    with no whitespace in it."""
    if len(vocabulary) < 3 or vocabulary[0] != "" or vocabulary[1] != "[UNK]":
        raise ValueError(
            "Expected a vocabulary of an empty padding line, '[UNK]' and "
            f"at least one token. Received: {source} starting "
            f"{vocabulary[:3]!r} ({len(vocabulary)} lines)"
        )
    seen = {}
    for i, token in enumerate(vocabulary):
        if token in seen:
            raise ValueError(
                f"Expected distinct tokens. Received: {source} has "
                f"{token!r} on lines {seen[token] + 1} and {i + 1}"
            )
        seen[token] = i
        if i > 0 and (not token or token.split() != [token]):
            raise ValueError(
                "Expected tokens without whitespace. Received: "
                f"{source} line {i + 1} = {token!r}"
            )
    return vocabulary


def parse_vocabulary(data, source="vocabulary"):
    """Bytes (UTF-8, one token per line) to a checked token list."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"Expected a UTF-8 text vocabulary. Received: {source} "
            f"({err.reason} at byte {err.start})"
        ) from None
    if text.endswith("\n"):
        text = text[:-1]
    return check_vocabulary(text.split("\n"), source)


def read_vocabulary(path):
    """A vocabulary file (one token per line), checked."""
    if not os.path.isfile(path):
        raise ValueError(f"No such vocabulary. Received: path={path!r}")
    with open(path, "rb") as f:
        return parse_vocabulary(f.read(), f"vocabulary {path!r}")


def as_texts(texts, name="texts"):
    """A list of strings: one string counts as one text."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, bytes):
        raise ValueError(
            f"Expected {name} to be a string or a list of strings. "
            f"Received: {name} of type bytes"
        )
    texts = list(texts)
    bad = [type(t).__name__ for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"Expected {name} to be a string or a list of strings. "
            f"Received: items of type {sorted(set(bad))}"
        )
    return texts


class Tokenizer:
    """Text → token ids, as the exported model expects: fixed-length rows,
    or (`length=None`) one array per text of its own length, at most
    `max_tokens` long."""

    def __init__(self, vocabulary, length, max_tokens=None):
        self.index = {tok: i for i, tok in enumerate(vocabulary) if i > 1}
        self.length = length
        self.max_tokens = max_tokens

    def ids(self, text, limit):
        return [self.index.get(t, 1) for t in tokens(text, limit)]

    def __call__(self, texts):
        texts = as_texts(texts)
        if self.length is None:  # each review's own tokens (at least one)
            return [
                np.array(self.ids(text, self.max_tokens) or [0], "int32")
                for text in texts
            ]
        ids = np.zeros((len(texts), self.length), "int32")
        for row, text in enumerate(texts):
            found = self.ids(text, self.length)
            ids[row, : len(found)] = found
        return ids


_SENT_SPACES = re.compile("[\u202f\u00a0\u2009]")
_SENT_PUNCT = re.compile(r"([.,!?;:\"«»()])")
_SENT_WS = re.compile(r"[\t\n\f\r ]+")


def split_sentence(text):
    """The same steps as `keras_attn.text.split_sentence` (case kept)."""
    text = _SENT_SPACES.sub(" ", text)
    text = _SENT_PUNCT.sub(r" \1 ", text)
    text = text.replace("'", "' ")
    return _SENT_WS.sub(" ", text).strip("\t\n\v\f\r ")


def standardize_sentence(text):
    """The same steps as `keras_attn.text.standardize_sentence` (Unicode
    lowercasing included: `École` is `école` on both sides; see `lower`)."""
    return split_sentence(lower(text))


# The known ways of joining output tokens, by name. A model file names one;
# patterns are never read from a file (a crafted pattern such as
# `^(.+)+Q` makes a regular expression run for ever).
DETOKENIZERS = {
    # French: `l' homme` → `l'homme`, no space before `.` and `,`; the space
    # before `! ? : ;` stays (French typography).
    "french": ((" +", " "), ("' ", "'"), (r" ([.,])", r"\1")),
    # The same after WordPiece: `chat ##s` → `chats`.
    "french_wordpiece": (
        (" +", " "),
        (" ##", ""),
        ("' ", "'"),
        (r" ([.,])", r"\1"),
    ),
}


def detokenizer(config, model_path):
    """The rules of the detokenizer a translator's config names (or, for
    files written before names, whose rules equal a known one)."""
    name = config.get("detokenizer")
    if name is None and "detokenize" in config:
        given = config["detokenize"]
        name = next(
            (
                known
                for known, rules in DETOKENIZERS.items()
                if isinstance(given, list) and [list(r) for r in rules] == given
            ),
            None,
        )
        if name is None:
            raise ValueError(
                f"Refusing the detokenization patterns in {model_path!r}: "
                "patterns are never read from a model file; known "
                f"detokenizers are {sorted(DETOKENIZERS)}."
            )
    if name not in DETOKENIZERS:
        raise ValueError(
            f"Unknown detokenizer {name!r} in {model_path!r}; expected one "
            f"of {sorted(DETOKENIZERS)}"
        )
    return DETOKENIZERS[name]


# The known ways of cutting a long input into pieces a translator
# trained on short sentences translates one by one, by name (patterns are
# never read from a file, as for detokenizers). Each entry is a list of
# stages; a stage's `(pattern, rewrite)` rules write a newline where a
# piece ends, and apply only to pieces still longer than the translator's
# `segment_longer_than` words. The patterns are both RE2 (the graph) and
# Python `re` (the runtime); a rewrite holds a real newline (RE2 reads no
# `\n` escape in a rewrite).
_WS = "[\t\n\f\r ]"
_CUT = "\n"
SEGMENTERS = {
    # English: sentences, then at `, ; :` (dropped), then before the
    # conjunctions that open a clause.
    "english_clauses": (
        ((rf"({_WS}*[.!?]){_WS}+([^\t\n\f\r ])", r"\1" + _CUT + r"\2"),),
        ((rf"{_WS}*[,;:]{_WS}+([^\t\n\f\r ])", _CUT + r"\1"),),
        (
            (
                rf"{_WS}+(and|but|because|while|although|whereas){_WS}+",
                _CUT + r"\1 ",
            ),
        ),
    ),
}
_WS_RUN = re.compile(f"{_WS}+")


def segmenter(name, source="segmenter"):
    """The stages of the segmenter `name` (a `ValueError` naming `source`
    for an unknown one)."""
    if name not in SEGMENTERS:
        raise ValueError(
            f"Expected {source} to be one of {sorted(SEGMENTERS)}. "
            f"Received: {name!r}"
        )
    return SEGMENTERS[name]


def segments(text, stages, longer_than):
    """The pieces of `text` a translator translates one by one: `[text]`
    for an input of at most `longer_than` words; otherwise cut by
    `stages` (a `SEGMENTERS` entry), stage after stage while a piece is
    longer, each piece after the first capitalized. Spaces are made
    single; an input with no words gives `[]`. The same steps as
    `keras_attn.translation.Translator`'s graph."""
    pieces = [_WS_RUN.sub(" ", text).strip(" ")]
    for rules in stages:
        cut = []
        for piece in pieces:
            if len(piece.split(" ")) > longer_than:
                for pattern, rewrite in rules:
                    piece = re.sub(pattern, rewrite, piece)
            cut += [p.strip(" ") for p in piece.split("\n")]
        pieces = cut
    pieces = [p for p in pieces if p]
    return pieces[:1] + [p[0].upper() + p[1:] for p in pieces[1:]]


# Words a subword vocabulary leaves out, by name: they become `[UNK]`,
# which a translator copies from the source. Patterns are never read from
# a model file, as for detokenizers.
UNKNOWN_WORDS = {"digits": r"\d"}
SUFFIX = "##"


def wordpiece(words, index, unknown_words="digits", max_chars_per_word=100):
    """WordPiece ids of `words` (greedy longest match from each word's
    start, `##` before pieces after the first) and the token of each id
    (an `[UNK]`'s token is its word), as
    `keras_attn.translation.subwords.WordPieceVectorizer` in the graph.

    Args:
        words: a list of words.
        index: a dict token → id (id 1 is `[UNK]`).
        unknown_words: a rule name of `UNKNOWN_WORDS` or `None`.
        max_chars_per_word: longer words become `[UNK]`.
    """
    skip = re.compile(UNKNOWN_WORDS[unknown_words]) if unknown_words else None
    ids, names = [], []
    for word in words:
        pieces, start = [], 0
        if len(word) > max_chars_per_word or (skip and skip.search(word)):
            start = None
        while start is not None and start < len(word):
            for end in range(len(word), start, -1):
                piece = (
                    word[start:end] if start == 0 else SUFFIX + word[start:end]
                )
                if index.get(piece, 1) > 1:
                    pieces.append((index[piece], piece))
                    start = end
                    break
            else:
                start = None
        if start is None:
            pieces = [(1, word)]
        ids += [i for i, _ in pieces]
        names += [n for _, n in pieces]
    return ids, names


STANDARDIZERS = {
    "split_sentence": split_sentence,
    "standardize_sentence": standardize_sentence,
}


class PieceByPiece:
    """Text sent out piece by piece as a decoder settles it: `next(text)`
    takes the whole text decoded so far and gives what it adds to what
    was sent (`""` when nothing new, or when the text no longer begins
    with what was sent, as a detokenizer may rewrite its last word until
    the next token); `rest(final)` gives what the final text adds. The
    one place a streamed answer is cut into pieces (the runtime's
    translator, `keras_attn.models.TextGenerator`)."""

    def __init__(self):
        self.sent = ""

    def next(self, text):
        if text.startswith(self.sent) and len(text) > len(self.sent):
            piece, self.sent = text[len(self.sent) :], text
            return piece
        return ""

    def rest(self, final):
        """What `final` adds past what was sent (`""` if nothing)."""
        return final[len(self.sent) :] if final != self.sent else ""


class Kept:
    """The tokens of the last `limit` texts, each made once (`get(text,
    make)`: `make(text)`'s tuple): what lets a window check and the
    decoding that follows it read one tokenization. Threads may share it
    (a race makes a text twice, never wrongly)."""

    def __init__(self, limit=256):
        self.limit, self.tokens = limit, {}

    def get(self, text, make):
        tokens = self.tokens.get(text)
        if tokens is None:
            tokens = make(text)
            try:
                if len(self.tokens) >= self.limit:  # the oldest goes
                    self.tokens.pop(next(iter(self.tokens)), None)
            except RuntimeError:  # another thread changed it meanwhile
                pass
            self.tokens[text] = tokens
        return tokens
