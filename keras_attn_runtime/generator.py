"""A decoder-only model's folder (`keras_attn.models.TextGenerator`'s:
`generation.json`, `tokenizer.json`, `model.litertlm`) run from its
`.litertlm` bundle with NumPy and LiteRT: no TensorFlow, no Keras, no
LiteRT-LM.

The bundle's LiteRT model holds LiteRT-LM's own signatures (`prefill_<T>`
and `decode` over one copy of the weights), and, where
`keras_attn.export.export_litertlm` wrote them, `decode_rows_<R>`
signatures over the same weights. A prompt is fed as the engine feeds
it: the start token, the prompt between the folder's prefix and suffix,
every token but the last prefilled (over the prefill lengths, a chunk
padded with token 0 at position 0), then one token a call from the
last; greedy unless sampled. Copies of the model (`loops`, one a core by
default) run the streams: with `decode_rows_<R>`, each copy's loop
advances every stream it holds in one call (`keras_attn_runtime.rows`);
without, the streams wait in one line that the copies serve in turn, a
call each (`keras_attn_runtime.turns`). Either way a stream's answer is
the one it gets alone.

    from keras_attn_runtime.generator import BundleGenerator

    generator = BundleGenerator("saved_models/translation_en_fr_lm")
    for piece in generator.stream("I am here."):
        print(piece, end="")
"""

import json
import os

import numpy as np

from keras_attn_runtime.artifact import verify_model
from keras_attn_runtime.rows import (
    RowLoop,
    RowStream,
    prefill_feed,
    row_counts,
)
from keras_attn_runtime.sampling import read as read_sampling
from keras_attn_runtime.search import TokenSearch, greedy, sample_with
from keras_attn_runtime.signature import (
    DEFAULT_SIGNATURE,
    PromptTooLong,
    Signature,
)
from keras_attn_runtime.text import Kept, PieceByPiece
from keras_attn_runtime.turns import END, Line

FORMAT, VERSION = "keras_attn.text_generator", 1
SETTINGS, TOKENIZER, BUNDLE = (
    "generation.json",
    "tokenizer.json",
    "model.litertlm",
)
# A `.litertlm` file: its magic, and the block its sections start on.
MAGIC, BLOCK = b"LITERTLM", 16 * 1024
TOKENS, POSITIONS, LOGITS, DECODE = "tokens", "input_pos", "logits", "decode"
OUTPUT = "completion"
# The streams a copy serves in turn, by default, in a server: at 16
# clients on two cores, four a copy gave about 80 streams a second and
# eight about 75.
STREAMS_PER_COPY = 4
TEXT = {"text": ("string", [None])}


def is_bundle_generator(folder):
    """Whether `folder` holds a decoder-only folder with its bundle."""
    return all(
        os.path.isfile(os.path.join(folder, name))
        for name in (SETTINGS, TOKENIZER, BUNDLE)
    )


def bundle_model(path):
    """`(bytes, verified model object)` of the LiteRT model inside the
    `.litertlm` bundle at `path`: the section that starts on a block and
    carries LiteRT's identifier (what follows it is other sections, which
    LiteRT does not read)."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC):
        raise ValueError(
            f"Not a .litertlm bundle (no {MAGIC.decode()} magic). "
            f"Received: {path!r}"
        )
    for start in range(BLOCK, len(data) - 8, BLOCK):
        if data[start + 4 : start + 8] == b"TFL3":
            model_data = data[start:]
            try:
                return model_data, verify_model(model_data)
            except ValueError as err:
                raise ValueError(
                    f"The LiteRT model in {path!r} is not valid ({err})"
                ) from None
    raise ValueError(f"No LiteRT model in the bundle {path!r}")


def read_settings(folder):
    """The folder's `generation.json` settings (without `format` and
    `version`), checked: the format this runtime and `keras_attn`'s
    `TextGenerator` write and read."""
    path = os.path.join(folder, SETTINGS)
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    if not isinstance(settings, dict) or settings.get("format") != FORMAT:
        raise ValueError(
            f"Expected {path!r} to hold a {FORMAT} settings object."
        )
    if settings.get("version") != VERSION:
        raise ValueError(
            f"{path!r} is version {settings.get('version')!r} of {FORMAT}; "
            f"this version reads version {VERSION}."
        )
    return {k: v for k, v in settings.items() if k not in ("format", "version")}


def prompt_ids(tokenizer, start_id, prefix, suffix, text):
    """The ids LiteRT-LM's engine feeds for `text`: the start token, then
    the prompt between `prefix` and `suffix` (a `tokenizers.Tokenizer`'s
    ids, no special tokens added)."""
    prompt = f"{prefix}{text}{suffix}"
    return [start_id, *tokenizer.encode(prompt, add_special_tokens=False).ids]


def check_context(count, context_length):
    """A `PromptTooLong` for a prompt of `count` tokens (as fed: start
    token and template included) that leaves a decoder of
    `context_length` no room to answer: the one window rule of a
    decoder-only model, its bundle's and its Keras model's."""
    limit = context_length - 1
    if count > limit:
        raise PromptTooLong(limit, count, "tokens")


# Prompts whose ids a bundle's generator keeps (`prompt_ids`).
PROMPTS_KEPT = 256


class TextPieces:
    """The text each token id adds to the text decoded so far: `add(id)`
    gives it (`""` while it may still change, `PieceByPiece`); special
    tokens are kept, as the engine keeps them."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.out = tokenizer, [], PieceByPiece()

    def add(self, token):
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=False)
        return self.out.next(text)


def text_pieces(tokenizer, token_ids):
    """Yield the text each id of `token_ids` adds (`TextPieces`), the
    pieces that say something."""
    pieces = TextPieces(tokenizer)
    for token in token_ids:
        if piece := pieces.add(token):
            yield piece


def chooser(sampling):
    """A search's `choose(logits (1, V), step)`: the most likely token,
    or (a `sampling` dict: `temperature`, `top_k`, `top_p`, `seed`) a
    draw by the inverse CDF at a uniform number from NumPy's generator
    at `seed`, one a token: the same seed gives the same continuation."""
    if sampling is None:
        return greedy
    checked = read_sampling(sampling)  # the one table's ranges
    settings = (checked["temperature"], checked["top_k"], checked["top_p"])
    rng = np.random.default_rng(checked["seed"])

    def choose(logits, step):
        uniforms = rng.random((1, len(logits)), dtype="float32")
        return sample_with(uniforms, *settings)(logits, 0)

    return choose


# What a call costs beyond its tokens, in tokens, on the copies' kernels
# (the shipped bundle, one x86-64 core): on the builtin kernels a prefill
# of 8 tokens took 2.3 ms and one of 32 tokens 5.7 ms (a call's share
# about 8 tokens); on XNNPACK's, 1.24 and 1.54 ms (about 80).
CALL_COSTS = {"builtin": 8, "xnnpack": 80}


def chunks(count, lengths, call_cost=CALL_COSTS["builtin"]):
    """The prefill lengths to run, in order, for `count` tokens: those
    that cost least, counting each call's padded tokens and `call_cost`
    (9 tokens over lengths 8 and 32 at a cost of 8: 8 then 8, not 32;
    at a cost of 80: 32)."""
    best = {0: (0, ())}
    for rest in range(1, count + 1):
        best[rest] = min(
            (
                n + call_cost + best[max(rest - n, 0)][0],
                (n,) + best[max(rest - n, 0)][1],
            )
            for n in lengths
        )
    return list(best[count][1])


class _Copy:
    """One copy of the bundle's model and its runners."""

    def __init__(self, data, model, path, cpu_kernels):
        from keras_attn_runtime.engine import LiteRTModel

        self.litert = LiteRTModel(
            data, model, path, cpu_kernels=cpu_kernels, interpreter=True
        )
        self.runners = {
            k: self.litert.runner(k) for k in self.litert.signatures
        }


class ServedFolder:
    """What a served decoder-only folder answers, whatever runs it (its
    bundle here, its Keras model in `keras_attn.loading.opener`): `text`
    in, its `completion` out, under TensorFlow Serving's default key and
    `generate`, every prompt checked against the context before any
    call. A subclass gives `context_length`, `tokenizer` (a
    `tokenizers.Tokenizer`), `prompt_length(text)` (the tokens fed,
    template and start token included) and `completions(texts)`."""

    def __init__(self):
        io = Signature(TEXT, {OUTPUT: ("string", [None])})
        self.signatures = {DEFAULT_SIGNATURE: io, "generate": io}

    def count_tokens(self, text):
        """The tokens of `text` by the model's tokenizer (what OpenAI's
        `usage` counts of an answer)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def check_prompt(self, text):
        """A `PromptTooLong` for a prompt that leaves the model no room
        to answer in its context."""
        self.check_length(self.prompt_length(text))

    def check_length(self, count):
        """A `PromptTooLong` for a prompt of `count` tokens that leaves
        the model no room to answer in its context (`check_context`)."""
        check_context(count, self.context_length)

    def run(self, signature, inputs):
        texts = [t.decode("utf-8", "replace") for t in inputs["text"]]
        if not texts:
            return self.signatures[signature].empty_outputs()
        for text in texts:
            self.check_prompt(text)
        return {OUTPUT: np.array(self.completions(texts), dtype=object)}


class BundleGenerator(ServedFolder):
    """A decoder-only folder's continuations from its `.litertlm` bundle.

    Args:
        folder: the folder (`generation.json`, `tokenizer.json`,
            `model.litertlm`).
        loops: the copies of the model that run calls side by side.
            Defaults to the machine's cores.
        cpu_kernels: as `keras_attn_runtime.engine.LiteRTModel` takes
            them. Defaults to `"auto"` (the same numbers every time: under
            the Interpreter, which the copies run, XNNPACK's defaults, as
            LiteRT-LM's engine runs the bundle).
        rows: the streams a copy decodes in one call, through the
            bundle's `decode_rows_<R>` signatures (`keras_attn_runtime.
            rows`). Defaults to the largest `R` where the bundle has
            them; `False` runs LiteRT-LM's `decode`, a stream a call, the
            copies taking the streams in turn (a bundle without them is
            always run so).

    Attributes:
        cpu_settings: the CPU settings the copies run on
            (`keras_attn_runtime.engine.LiteRTModel.cpu_settings`).
        call_cost: what a call costs beyond its tokens on those kernels,
            in tokens (`CALL_COSTS`), which decides a prompt's chunks.
        stream_capacity: the streams the copies decode before a
            server's next request waits (`rows` a copy, else
            `STREAMS_PER_COPY` a copy, served in turn).
        row_loops: the copies' `keras_attn_runtime.rows.RowLoop`s
            (empty when a stream a call).

    As a served artifact (`keras_attn_runtime.opener.StreamingArtifact`):
    `text` in, `completion` out, under TensorFlow Serving's default key
    and `generate`; `stream` yields a completion's pieces.
    """

    kind = "litertlm"
    concurrent_streams = True
    sampling = True

    def __init__(self, folder, loops=None, cpu_kernels="auto", rows=None):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ImportError(
                f"{folder!r} is a decoder-only folder, whose {TOKENIZER} "
                "needs Hugging Face's tokenizers: pip install "
                "'keras-attn-runtime[generator]' (or tokenizers)"
            ) from None

        if loops is None:
            loops = os.cpu_count() or 1
        if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
            raise ValueError(
                "Expected loops to be a positive integer. Received: "
                f"loops={loops!r}"
            )
        self.path = folder
        settings = read_settings(folder)
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, TOKENIZER))
        self.context_length = settings["context_length"]
        self.prefix = settings.get("prompt_prefix", "")
        self.suffix = settings.get("prompt_suffix", "")
        self.start_id = self._id(settings["start_token"])
        self.stop_ids = {self._id(t) for t in settings["stop_tokens"]}
        path = os.path.join(folder, BUNDLE)
        data, model = bundle_model(path)
        copies = [_Copy(data, model, path, cpu_kernels) for _ in range(loops)]
        self._copies = tuple(copies)
        copy = copies[0]
        self.cpu_settings = copy.litert.cpu_settings
        self.call_cost = CALL_COSTS[self.cpu_settings.split(":")[0]]
        decode = copy.litert.signatures[DECODE]
        self._caches = {
            name: spec
            for name, spec in decode["inputs"].items()
            if name not in (TOKENS, POSITIONS)
        }
        self.prefill_lengths = sorted(
            int(k.rsplit("_", 1)[1])
            for k in copy.litert.signatures
            if k.startswith("prefill_")
        )
        self.row_loops = self._row_loops(rows)
        if self.row_loops:
            self.stream_capacity = sum(r.max_rows for r in self.row_loops)
        else:
            self._line = Line(copies, "keras_attn_runtime bundle copy")
            self.stream_capacity = STREAMS_PER_COPY * loops
        super().__init__()

    def _row_loops(self, rows):
        """A `RowLoop` a copy, or `()` (`rows=False`, or a bundle
        without `decode_rows_<R>` signatures)."""
        counts = row_counts(self._copies[0].runners)
        if rows is False or not counts:
            return ()
        if rows is None:
            rows = counts[-1]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(
                "Expected rows to be a positive integer, None or False. "
                f"Received: rows={rows!r}"
            )
        return tuple(
            RowLoop(
                copy.runners,
                self._caches,
                self.context_length,
                max_rows=rows,
                name=f"keras_attn_runtime bundle rows {i}",
            )
            for i, copy in enumerate(self._copies)
        )

    def _id(self, token):
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ValueError(
                f"{self.path!r}: the token {token!r} of {SETTINGS} is not in "
                f"its {TOKENIZER}"
            )
        return found

    def prompt_ids(self, text):
        """The ids the engine feeds for `text` (`prompt_ids`). A prompt is
        tokenized once: the window check before a stream begins and the
        stream itself read the same ids (the last `PROMPTS_KEPT` texts'
        are kept)."""
        kept = self.__dict__.setdefault("_prompts", Kept(PROMPTS_KEPT))
        return list(kept.get(text, self._tokenized))

    def _tokenized(self, text):
        return tuple(
            prompt_ids(
                self.tokenizer, self.start_id, self.prefix, self.suffix, text
            )
        )

    def prompt_length(self, text):
        return len(self.prompt_ids(text))

    def _empty(self):
        return {
            name: np.zeros(spec["shape"], spec["dtype"])
            for name, spec in self._caches.items()
        }

    def _calls(self, ids, sampling, stream):
        """A stream's calls, one a `next`, on `stream.copy`: the prompt
        but its last token prefilled in chunks of the prefill lengths
        (`chunks`), each padded with token 0 at position 0, then a token
        a call from the last, each given to `stream.put`, until a stop
        token (left out) or the end of the context."""
        # The logits as they come (nothing banned), as the engine reads
        # them; a stop token ends the search.
        stops = sorted(self.stop_ids)
        search = TokenSearch(1, stops, chooser(sampling), banned_ids=None)
        caches, done, prompt = self._empty(), 0, ids[:-1]
        for n in chunks(len(prompt), self.prefill_lengths, self.call_cost):
            tokens, positions, taken = prefill_feed(prompt, done, n)
            out = stream.copy.runners[f"prefill_{n}"](
                tokens=tokens, input_pos=positions, **caches
            )
            caches = {name: out[name] for name in caches}
            done += taken
            yield
        token, position = ids[-1], len(ids) - 1
        while position < self.context_length - 1:
            out = stream.copy.runners[DECODE](
                tokens=np.array([[token]], "int32"),
                input_pos=np.array([position], "int32"),
                **caches,
            )
            caches = {name: out[name] for name in caches}
            _, (token,) = search.advance(out[LOGITS].reshape(1, -1))
            position += 1
            if search.done.all():
                return
            stream.put(int(token))
            yield

    def _enter(self, text, stop, sampling, put=None):
        """A stream of `text`'s continuation: in the rows of the copy
        with the fewest streams, or in the line."""
        ids = self.prompt_ids(text)
        self.check_length(len(ids))
        if not self.row_loops:
            return self._line.enter(
                lambda s: self._calls(ids, sampling, s), stop, put
            )
        search = TokenSearch(
            1, sorted(self.stop_ids), chooser(sampling), banned_ids=None
        )
        steps = chunks(len(ids) - 1, self.prefill_lengths, self.call_cost)
        loop = min(self.row_loops, key=lambda r: r.in_flight)
        return loop.enter(RowStream(ids, steps, search, stop, put))

    def token_ids(self, text, stop=None, sampling=None):
        """Yield the continuation's ids one at a time (a stop token
        ends it, left out), until the context is full or `stop` is set.
        The calls run on the copies' threads, in turn with every other
        stream's; closing this iterator takes the stream out of the
        line."""
        return self._enter(text, stop, sampling).read()

    def stream(self, text, stop=None, sampling=None):
        """The completion's pieces as its tokens are decided
        (`text_pieces`)."""
        ids = self.token_ids(text, stop, sampling)
        return text_pieces(self.tokenizer, ids)

    def stream_into(self, text, put, stop=None, sampling=None):
        """`stream`'s pieces handed to `put` on the copies' threads, as
        they are decided, then `put(None)` at the end (a stop token, the
        context full, or `stop` set), or `put(err)` with the model's
        failure; nothing waits on a thread of the caller's (an event
        loop's `call_soon_threadsafe`, say; `put` must not block). A
        prompt past the window raises here, before any call."""
        pieces = TextPieces(self.tokenizer)

        def handed(item):
            if item is END:
                put(None)
            elif isinstance(item, Exception):
                put(item)
            elif piece := pieces.add(item):
                put(piece)

        self._enter(text, stop, sampling, handed)

    def generate(self, texts):
        """The completion of each text, greedily."""
        return [
            self.tokenizer.decode(
                list(self.token_ids(t)), skip_special_tokens=False
            )
            for t in texts
        ]

    def completions(self, texts):
        return self.generate(texts)
