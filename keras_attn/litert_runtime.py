"""Run an exported text model with LiteRT only: no TensorFlow, no Keras.

This is the phone-like path: `ai_edge_litert` and NumPy. Tokenization
mirrors `keras_attn.text.standardize_review` followed by the
`TextVectorization` whitespace split and vocabulary lookup (index 0 is
padding, 1 is out-of-vocabulary); tests check both give the same ids.

Trust: a `.tflite` file is checked before LiteRT sees it
(`verify_model`: every index and buffer size in range), which turns the
malformed files we know of into a `ValueError`. LiteRT's C++ kernels are
not hardened against crafted models, so run a `.tflite` from a source you
do not trust in a sandbox (a separate process with no privileges).

The file is self-contained (it imports nothing from `keras_attn`), so it
can be copied into an app that has only NumPy and `ai_edge_litert`.
"""

import json
import os
import re
import string
import threading

import numpy as np

# Names of the metadata entries that `keras_attn.export` writes into the
# flatbuffer, binding the vocabulary and settings to the model itself.
METADATA_VOCABULARY = "keras_attn.vocabulary"
METADATA_CONFIG = "keras_attn.config"

# ASCII letters only, as `tf.strings.lower` without an encoding.
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_MARKS = re.compile(r"([!?])")
_OTHER = re.compile(r"[^a-z0-9!?' ]")
_SPACE_RUN = re.compile(" {3,}")
_CHUNK = 1 << 16  # characters standardized at a time


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


_DTYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 9: 1, 10: 8}


def _count_tables(schema, data):
    """Count the tables that unpacking `data` would create, lazily, and
    stop with a `ValueError` once the count passes what a file of this
    size can hold without sharing tables (each distinct table takes at
    least 4 bytes): a tiny file whose vectors all point at one shared
    table would otherwise unpack into millions of objects."""
    limit = len(data) // 4 + 1024
    count = 0

    def add(n):
        nonlocal count
        count += n
        if count > limit:
            raise ValueError(
                f"more tables than a {len(data)}-byte file can hold "
                "(shared tables)"
            )

    model = schema.Model.GetRootAs(data, 0)
    add(model.BuffersLength() + model.OperatorCodesLength())
    add(model.MetadataLength() + model.SubgraphsLength())
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        add(1 + sig.InputsLength() + sig.OutputsLength())
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        add(2 * graph.TensorsLength() + 2 * graph.OperatorsLength())
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            add(tensor.ShapeLength() // 8 + tensor.VariantTensorsLength())
    return count


def _model_object(data):
    from ai_edge_litert import schema_py_generated as schema

    if len(data) < 16 or data[4:8] != b"TFL3":
        raise ValueError("not a LiteRT flatbuffer (no 'TFL3' identifier)")
    try:
        _count_tables(schema, bytearray(data))
    except ValueError:
        raise
    except Exception as err:  # a malformed table: any decoding error
        raise ValueError(
            f"malformed flatbuffer ({type(err).__name__})"
        ) from None
    try:
        return schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as err:  # a malformed table: any decoding error
        raise ValueError(
            f"malformed flatbuffer ({type(err).__name__})"
        ) from None


def verify_model(data):
    """Check a `.tflite` flatbuffer's structure before LiteRT loads it.

    Every operator, tensor, buffer and signature index must be in range,
    shapes non-negative, and constant buffers as large as their tensors.
    Returns the decoded model object. Raises `ValueError` otherwise.
    """
    model = _model_object(data)
    if model.version != 3 or not _seq(model.subgraphs):
        raise ValueError("unsupported schema version or no subgraph")
    buffers = _seq(model.buffers)
    n_codes = len(_seq(model.operatorCodes))
    for g, graph in enumerate(model.subgraphs):
        tensors = _seq(graph.tensors)
        n = len(tensors)
        for tensor in tensors:
            if not 0 <= tensor.buffer < max(len(buffers), 1):
                raise ValueError(f"subgraph {g}: tensor buffer out of range")
            shape = [int(d) for d in _seq(tensor.shape)]
            if any(d < 0 for d in shape):
                raise ValueError(f"subgraph {g}: negative tensor shape")
            data = _seq(buffers[tensor.buffer].data) if buffers else []
            size = _DTYPE_BYTES.get(tensor.type)
            if len(data) and size and tensor.sparsity is None:
                want = size * int(np.prod(shape, dtype=np.int64))
                if len(data) < want:
                    raise ValueError(f"subgraph {g}: constant too short")
        ends = [*_seq(graph.inputs), *_seq(graph.outputs)]
        for op in _seq(graph.operators):
            if not 0 <= op.opcodeIndex < n_codes:
                raise ValueError(f"subgraph {g}: opcode index out of range")
            ends += [*_seq(op.inputs), *_seq(op.outputs)]
            ends += list(_seq(op.intermediates))
        if any(not -1 <= int(i) < n for i in ends):
            raise ValueError(f"subgraph {g}: tensor index out of range")
    for sig in _seq(model.signatureDefs):
        if not 0 <= sig.subgraphIndex < len(model.subgraphs):
            raise ValueError("signature subgraph out of range")
        n = len(_seq(model.subgraphs[sig.subgraphIndex].tensors))
        for item in [*_seq(sig.inputs), *_seq(sig.outputs)]:
            if not 0 <= item.tensorIndex < n:
                raise ValueError("signature tensor out of range")
    for entry in _seq(model.metadata):
        if not 0 <= entry.buffer < len(buffers):
            raise ValueError("metadata buffer out of range")
    return model


def _seq(value):
    """A flatbuffer vector field as a sequence (`None` → empty)."""
    return [] if value is None else value


def metadata(model):
    """`{name: bytes}` of a verified model object's metadata entries."""
    out = {}
    for entry in model.metadata or []:
        name = (
            entry.name.decode()
            if isinstance(entry.name, bytes)
            else (entry.name)
        )
        data = model.buffers[entry.buffer].data
        out[name] = bytes(bytearray(data)) if data is not None else b""
    return out


def load_verified(model_path):
    """`(bytes, model object)` of a `.tflite` file that passed
    `verify_model`; a `ValueError` naming the file otherwise."""
    if not os.path.isfile(model_path):
        raise ValueError(
            f"No such LiteRT model. Received: model_path={model_path!r}"
        )
    with open(model_path, "rb") as f:
        data = f.read()
    try:
        return data, verify_model(data)
    except ValueError as err:
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} ({err})"
        ) from None


def _interpreter(data, model_path, num_threads=None):
    from ai_edge_litert.interpreter import Interpreter

    try:
        return Interpreter(model_content=data, num_threads=num_threads)
    except (ValueError, RuntimeError) as err:
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} ({err})"
        ) from err


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


# The most tokens a model's metadata may declare: sizes are read from the
# file before anything runs, so they are bounded and checked.
MAX_METADATA_LENGTH = 1 << 14


def metadata_length(value, key, model_path, declared=None):
    """`value` (from a model file's metadata `key`) as a positive int no
    larger than `MAX_METADATA_LENGTH` nor than the model's `declared`
    input length; a `ValueError` naming the file otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problem = "is not a positive integer"
    elif value > MAX_METADATA_LENGTH:
        problem = f"is over the limit of {MAX_METADATA_LENGTH} tokens"
    elif declared is not None and declared > 0 and value > declared:
        problem = f"is larger than the model's input length {declared}"
    else:
        return value
    raise ValueError(
        f"Not a valid model: {model_path!r} declares {key}={value!r}, which "
        f"{problem}."
    )


def check_external_data(proto, model_path):
    """Refuse an ONNX model whose external data lies outside its folder:
    an absolute path, a `..` step, or a symbolic link (onnxruntime before
    1.24.1 read such files byte for byte)."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(model_path)))
    for tensor in _onnx_tensors(proto.graph):
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            where = entry.value
            path = os.path.join(folder, where)
            parts = where.replace("\\", "/").split("/")
            if (
                os.path.isabs(where)
                or ".." in parts
                or os.path.realpath(path) != os.path.normpath(path)
                or not os.path.realpath(path).startswith(folder + os.sep)
            ):
                raise ValueError(
                    f"Refusing the ONNX model {model_path!r}: its external "
                    f"data location {where!r} is outside its folder or a "
                    "symbolic link."
                )


def _onnx_tensors(graph):
    """Every tensor of an ONNX graph, its subgraphs' included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _onnx_tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _onnx_tensors(sub)


class OnnxClassifier:
    """A text classifier written by `export.export_text_model(onnx=...)`,
    run with `onnxruntime` and this module's tokenizer (no TensorFlow).

    The vocabulary and the length come from the file's `metadata_props`.

    Args:
        model_path: the `.onnx` file.
    """

    def __init__(self, model_path):
        import onnx
        import onnxruntime

        if not os.path.isfile(model_path):
            raise ValueError(
                f"No such ONNX model. Received: model_path={model_path!r}"
            )
        try:
            proto = onnx.load(model_path, load_external_data=False)
        except Exception as err:  # onnx raises DecodeError and others
            raise ValueError(
                f"Not a valid ONNX model: {model_path!r} ({err})"
            ) from None
        meta = {p.key: p.value for p in proto.metadata_props}
        if "keras_attn.vocabulary" not in meta:
            raise ValueError(
                "Expected an ONNX classifier exported by keras_attn (with "
                f"its vocabulary in metadata_props). Received: {model_path!r}"
            )
        vocabulary = check_vocabulary(
            meta["keras_attn.vocabulary"].split("\n"), model_path
        )
        try:
            config = json.loads(meta.get("keras_attn.config", "{}"))
        except ValueError:
            config = None
        if not isinstance(config, dict):
            raise ValueError(
                f"Not a valid ONNX model: {model_path!r} (its "
                "keras_attn.config metadata is not a JSON object)"
            )
        check_external_data(proto, model_path)
        length = metadata_length(
            config.get("max_length"), "max_length", model_path
        )
        self.tokenizer = Tokenizer(vocabulary, length)
        self.session = onnxruntime.InferenceSession(model_path)
        first = self.session.get_inputs()[0]
        self.input = first.name
        self.dtype = "int64" if first.type == "tensor(int64)" else "int32"
        self.outputs = [o.name for o in self.session.get_outputs()]

    def predict_ids(self, ids):
        ids = np.asarray(ids, self.dtype)
        values = self.session.run(None, {self.input: ids})
        return dict(zip(self.outputs, values, strict=True))

    def predict(self, texts):
        return self.predict_ids(self.tokenizer(texts))


class LiteRTClassifier:
    """A `.tflite` text classifier with the vocabulary bound to it.

    Models written by `keras_attn.export.export_text_tflite` carry their
    vocabulary inside the flatbuffer (metadata `keras_attn.vocabulary`);
    a `.tflite` without one needs `vocabulary_path`. Safe to share between
    threads: calls into the interpreter are serialized by a lock.

    Args:
        model_path: the `.tflite` file.
        vocabulary_path: one token per line, for models without an
            embedded vocabulary. Defaults to `None`.
        num_threads: interpreter threads. Defaults to `None` (LiteRT's).
    """

    def __init__(self, model_path, vocabulary_path=None, num_threads=None):
        data, model = load_verified(model_path)
        meta = metadata(model)
        config = {}
        if METADATA_CONFIG in meta:
            try:
                config = json.loads(meta[METADATA_CONFIG].decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise ValueError(
                    f"Not a valid LiteRT model: {model_path!r} (its "
                    f"{METADATA_CONFIG} metadata is not JSON)"
                ) from None
            if not isinstance(config, dict):
                raise ValueError(
                    f"Not a valid LiteRT model: {model_path!r} (its "
                    f"{METADATA_CONFIG} metadata is not a JSON object)"
                )
        if vocabulary_path is not None:
            vocabulary = read_vocabulary(vocabulary_path)
        elif METADATA_VOCABULARY in meta:
            vocabulary = parse_vocabulary(
                meta[METADATA_VOCABULARY],
                f"the vocabulary embedded in {model_path!r}",
            )
        else:
            raise ValueError(
                "This LiteRT model carries no vocabulary; pass the one it "
                "was exported with. Received: vocabulary_path=None for "
                f"model_path={model_path!r}"
            )
        self.config = config
        self.interpreter = _interpreter(data, model_path, num_threads)
        self._lock = threading.Lock()
        try:
            self.runner = self.interpreter.get_signature_runner()
            (spec,) = self.runner.get_input_details().values()
        except (ValueError, RuntimeError) as err:
            raise ValueError(
                f"Expected a LiteRT text model with one token input. "
                f"Received: {model_path!r} ({err})"
            ) from None
        self.batch_size, length = (int(d) for d in spec["shape"])
        # A model exported with `dynamic_length=True` has a -1 time axis: it
        # takes each review's own tokens (and cuts them at its length).
        self.dynamic = int(spec["shape_signature"][1]) == -1
        max_tokens = config.get("max_length")
        if max_tokens is not None:
            max_tokens = metadata_length(
                max_tokens,
                "max_length",
                model_path,
                None if self.dynamic else length,
            )
        metadata_length(length, "its input length", model_path)
        self.tokenizer = Tokenizer(
            vocabulary,
            None if self.dynamic else length,
            max_tokens=max_tokens,
        )

    def _run(self, **inputs):
        with self._lock:
            try:
                out = self.runner(**inputs)
            except (ValueError, RuntimeError) as err:
                raise ValueError(
                    f"The LiteRT model failed to run: {err}"
                ) from None
            return {k: np.array(v) for k, v in out.items()}

    def _predict_each(self, rows):
        """Variable-length rows one at a time; outputs padded with zeros
        on their last axis to the widest (the attention's time axis)."""
        outs = [self._run(tokens=row[None]) for row in rows]
        if not outs:  # no texts: no outputs, as the fixed-length path
            return {}
        stacked = {}
        for name in outs[0]:
            width = max(o[name].shape[-1] for o in outs)
            stacked[name] = np.concatenate(
                [
                    np.pad(
                        o[name],
                        [(0, 0)] * (o[name].ndim - 1)
                        + [(0, width - o[name].shape[-1])],
                    )
                    for o in outs
                ]
            )
        return stacked

    def predict_ids(self, ids):
        """Run batches of token ids; returns a dict of stacked outputs."""
        if self.dynamic:
            return self._predict_each(ids)
        outputs = {}
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start : start + self.batch_size]
            pad = self.batch_size - len(chunk)
            if pad:
                chunk = np.concatenate(
                    [chunk, np.zeros((pad, chunk.shape[1]), "int32")]
                )
            out = self._run(tokens=chunk)
            for name, value in out.items():
                outputs.setdefault(name, []).append(
                    value[: self.batch_size - pad]
                )
        return {k: np.concatenate(v) for k, v in outputs.items()}

    def predict(self, texts):
        """Outputs for `texts` (a list of strings, or one string)."""
        return self.predict_ids(self.tokenizer(as_texts(texts)))


_SENT_SPACES = re.compile("[\u202f\u00a0\u2009]")
_SENT_PUNCT = re.compile(r"([.,!?;:\"«»()])")
_SENT_WS = re.compile(r"[\t\n\f\r ]+")


def split_sentence(text):
    """The same steps as `keras_attn.text.split_sentence` (case kept)."""
    text = _SENT_SPACES.sub(" ", text)
    text = _SENT_PUNCT.sub(r" \1 ", text)
    text = text.replace("'", "' ")
    return _SENT_WS.sub(" ", text).strip("\t\n\f\r ")


def standardize_sentence(text):
    """The same steps as `keras_attn.text.standardize_sentence`."""
    return split_sentence(text.translate(ASCII_LOWER))


# The known ways of joining output tokens, by name. A model file names one;
# patterns are never read from a file (a crafted pattern such as
# `^(.+)+Q` makes a regular expression run for ever).
DETOKENIZERS = {
    # French: `l' homme` → `l'homme`, no space before `.` and `,`; the space
    # before `! ? : ;` stays (French typography).
    "french": ((" +", " "), ("' ", "'"), (r" ([.,])", r"\1")),
}


def _config_object(raw, model_path):
    """The JSON object of a model's `keras_attn.config` metadata; a
    `ValueError` naming the file when it is not one."""
    try:
        config = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise ValueError(
            f"Not a valid model: {model_path!r} (its keras_attn.config "
            "metadata is not a JSON object)"
        )
    return config


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


STANDARDIZERS = {
    "split_sentence": split_sentence,
    "standardize_sentence": standardize_sentence,
}


class LiteRTTranslator:
    """Translation with a LiteRT model, NumPy and LiteRT only.

    Reads a file written by `keras_attn.seq2seq.Translator.export_tflite`:
    one `translate` signature runs the whole greedy search (one call per
    sentence), and the vocabularies and settings travel inside the file as
    metadata. An `[UNK]` in the output is replaced by the source word the
    attention points at; an input with no words gives `""`.

    Safe to share between threads (one lock around each translation).

    Args:
        model_path: the `.tflite` file.
    """

    def __init__(self, model_path):
        data, model = load_verified(model_path)
        self.interpreter = _interpreter(data, model_path)
        self._lock = threading.Lock()
        signatures = self.interpreter.get_signature_list()
        entries = metadata(model)
        if "translate" not in signatures or "keras_attn.config" not in entries:
            raise ValueError(
                "Expected a LiteRT translator written by "
                "keras_attn.seq2seq.Translator.export_tflite (a 'translate' "
                f"signature and keras_attn.config metadata). Received: "
                f"{model_path!r} with signatures {sorted(signatures)}"
            )
        config = _config_object(entries["keras_attn.config"], model_path)
        try:
            self._read_config(config, entries, model_path)
        except (KeyError, TypeError, AttributeError, OverflowError) as err:
            raise ValueError(
                f"Not a valid LiteRT translator: {model_path!r} (its "
                f"keras_attn.config metadata is malformed: "
                f"{type(err).__name__} {err})"
            ) from None
        self.runner = self.interpreter.get_signature_runner("translate")
        self.index = {t: i for i, t in enumerate(self.source_vocab) if i > 1}

    def _read_config(self, config, entries, model_path):
        self.source_vocab = parse_vocabulary(
            entries.get("keras_attn.source_vocabulary", b""), model_path
        )
        self.target_vocab = parse_vocabulary(
            entries.get("keras_attn.target_vocabulary", b""), model_path
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

    def source_words(self, text, truncate=False):
        """The standardized words of `text`; a `ValueError` when there are
        more than the model reads, unless `truncate`."""
        (text,) = as_texts([text], "text")
        found = [t for t in self.standardize(text).split(" ") if t]
        if len(found) > self.length and not truncate:
            raise ValueError(
                f"Expected at most {self.length} words (the translator reads "
                f"no more). Received: text with {len(found)} words; pass "
                "truncate=True to translate the first ones"
            )
        return found[: self.length]

    def source_ids(self, words):
        ids = np.zeros((1, self.length), "int32")
        ids[0, : len(words)] = [self.index.get(t, 1) for t in words]
        return ids

    def translate_ids(self, text, truncate=False):
        """`(ids, alignment (L, S) or None, source words)` of `text`."""
        words = self.source_words(text, truncate)
        if not words:
            return [], None, words
        with self._lock:
            out = self.runner(source=self.source_ids(words))
            ids = [int(i) for i in np.asarray(out["ids"])[0]]
            align = np.array(out["alignment"][0], "float32")
        if self.end in ids:
            ids = ids[: ids.index(self.end)]
        ids = [i for i in ids if i > 0]
        return ids, align[: len(ids)], words

    def translate(self, text, truncate=False):
        """The translation of `text` (empty for an input with no words)."""
        ids, align, words = self.translate_ids(text, truncate)
        # An output [UNK] copies the most attended source word among the
        # source's own unknown words (all of them if it has none), as
        # `keras_attn.seq2seq.serving.copy_positions`.
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
