"""A streaming decoder file (`keras_attn.export.export_streaming_tflite`)
run with NumPy and LiteRT: tokens are yielded as they are decoded.

    from keras_attn_runtime import StreamingDecoder

    decoder = StreamingDecoder("decoder.tflite")
    for tokens in decoder.stream({"source": ids}, start_id=1, end_id=2):
        print(tokens)  # (B,) int32, one step at a time

The file's state (key/value caches, a memory) goes out of one call and
into the next as plain arrays: `CompiledModel` runs it with buffers of
its own, the `Interpreter` as well. How each step's token is chosen is
the caller's (`choose`): greedy, or a draw from the caller's random
numbers (`sample_with`), as the searches of `keras_attn.seq2seq` draw.
"""

import numpy as np

from keras_attn_runtime.artifact import (
    METADATA_CONFIG,
    STREAMING_DECODER,
    check_format,
    config_object,
    load_verified,
    metadata,
)
from keras_attn_runtime.engine import LiteRTModel


def greedy(logits, step):
    """The most likely token of each row."""
    return np.argmax(logits, axis=-1).astype("int32")


def sample_with(uniforms, temperature=1.0, top_k=None):
    """A `choose` that draws each step's token from the softmax of the
    logits (over the `top_k` most likely, when given) by inverting its
    cumulative distribution at `uniforms[step]` (`(steps, B)` numbers in
    `[0, 1)` from the caller)."""
    uniforms = np.asarray(uniforms, "float32")

    def choose(logits, step):
        z = np.asarray(logits, "float64") / temperature
        if top_k is not None:
            kth = np.sort(z, axis=-1)[:, -top_k][:, None]
            z = np.where(z >= kth, z, -np.inf)
        p = np.exp(z - z.max(-1, keepdims=True))
        cdf = np.cumsum(p / p.sum(-1, keepdims=True), axis=-1)
        u = uniforms[step][:, None]
        picked = (cdf <= u).sum(-1)
        return np.minimum(picked, z.shape[-1] - 1).astype("int32")

    return choose


class StreamingDecoder:
    """A LiteRT streaming decoder: `start` once, then `step` a token.

    Args:
        model_path: the `.tflite` file.
        num_threads: CPU threads. Defaults to `None` (LiteRT's choice).
        accelerator: `"cpu"` (the default), `"gpu"` or `"npu"`.

    Attributes:
        config: the settings the exporter stored (`settings` included).
        engine: `"compiled_model"` or `"interpreter"`.
    """

    def __init__(self, model_path, num_threads=None, accelerator="cpu"):
        data, model = load_verified(model_path)
        meta = metadata(model)
        if METADATA_CONFIG not in meta:
            raise ValueError(
                f"Not a streaming decoder: {model_path!r} has no "
                f"{METADATA_CONFIG} metadata"
            )
        self.config = config_object(meta[METADATA_CONFIG], model_path)
        check_format(self.config, STREAMING_DECODER, model_path)
        self.litert = LiteRTModel(
            data, model, model_path, num_threads, accelerator
        )
        self.engine = self.litert.engine
        self._start = self.litert.runner(self.config["start"])
        self._step = self.litert.runner(self.config["step"])
        self.state_names = [f"state_{i}" for i in range(self.config["state"])]
        # What a step gives back; the rest of the state passes unchanged.
        self._updated = self.config.get("step_state", self.state_names)

    def start(self, **inputs):
        """The state after `start` (e.g. `source=ids`), `{name: array}`."""
        out = self._start(**inputs)
        return {name: out[name] for name in self.state_names}

    def step(self, tokens, index, state):
        """`(logits (B, V), new state, alignment or None)` of one step."""
        feed = {
            "tokens": np.asarray(tokens, "int32"),
            "index": np.asarray(index, "int32"),
            **state,
        }
        out = self._step(**feed)
        new = {**state, **{name: out[name] for name in self._updated}}
        return out["logits"], new, out.get("alignment")

    def stream(
        self, inputs, start_id, end_id, max_length, choose=greedy, banned_ids=()
    ):
        """Yield each step's tokens `(B,)` until every row has emitted
        `end_id` or `max_length` steps were taken; a finished row gives 0
        after its `end_id`, and padding (0) and `banned_ids` are never
        chosen, as in the searches of `keras_attn.seq2seq`."""
        banned = [0, *banned_ids]
        inputs, rows = self._padded(inputs)
        state = self.start(**inputs)
        batch = next(iter(state.values())).shape[0]
        tokens = np.full((batch,), start_id, "int32")
        done = np.arange(batch) >= rows  # the padding rows: done at once
        for index in range(max_length):
            logits, state, _ = self.step(tokens, index, state)
            logits = np.array(logits, "float32")
            logits[:, banned] = -1e9
            tokens = np.where(done, 0, choose(logits, index)).astype("int32")
            yield tokens[:rows]
            done |= tokens == end_id
            if done.all():
                return

    def _padded(self, inputs):
        """`(inputs, rows)`: the inputs with zero rows added up to the
        file's fixed batch size (where it has one), and the caller's
        rows."""
        spec = self.litert.signatures[self.config["start"]]["inputs"]
        out, rows = {}, None
        for name, value in inputs.items():
            value = np.asarray(value)
            rows = len(value) if rows is None else rows
            fixed = int(spec[name]["shape_signature"][0])
            if fixed != -1 and len(value) > fixed:
                raise ValueError(
                    f"Expected at most {fixed} rows (the file's batch size). "
                    f"Received: {name} with {len(value)} rows"
                )
            if fixed != -1 and len(value) < fixed:
                pad = np.zeros((fixed - len(value), *value.shape[1:]))
                value = np.concatenate([value, pad.astype(value.dtype)])
            out[name] = value
        return out, rows
