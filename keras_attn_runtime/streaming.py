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
numbers (`sample_with`), as the searches of `keras_attn.seq2seq` draw;
`beam_search` and `stream_beam` rank hypotheses as its `BeamSampler`
does, the file's state reordered by beam between steps.
"""

import numpy as np

from keras_attn_runtime import legacy
from keras_attn_runtime.artifact import (
    METADATA_CONFIG,
    METADATA_STREAMING,
    STREAMING_DECODER,
    check_format,
    config_object,
    load_verified,
    metadata,
)
from keras_attn_runtime.engine import LiteRTModel
from keras_attn_runtime.search import (
    BeamSearch,
    Handover,
    TokenSearch,
    greedy,
    sample_with,
)

__all__ = ["StreamingDecoder", "greedy", "sample_with"]


class StreamingDecoder:
    """A LiteRT streaming decoder: `start` once, then `step` a token.

    Args:
        model_path: the `.tflite` file.
        num_threads: CPU threads (`None`: LiteRT's choice). Defaults to
            `1`.
        accelerator: `"cpu"` (the default), `"gpu"` or `"npu"`.
        cpu_kernels: `"auto"` (the default: for the file's kind, the
            fastest settings that give the same numbers for the same
            input, whatever the process, threads, load or callers),
            `"builtin"` or `"xnnpack"` (see `keras_attn_runtime.engine.
            LiteRTModel`).
        litert: the file already opened (a `LiteRTModel` of `model_path`,
            e.g. a translator's that also streams), whose settings then
            stand. Defaults to `None`.

    The file's config is its `keras_attn.config` metadata, or
    `keras_attn.streaming` where a file of another kind also streams.

    Attributes:
        config: the settings the exporter stored (`settings` included).
        engine: `"compiled_model"` or `"interpreter"`.
        state_names: the state's parts, `state_0 ... state_{n-1}`.
        updated_state: those a step gives back (the others pass through).
    """

    def __init__(
        self,
        model_path,
        num_threads=1,
        accelerator="cpu",
        cpu_kernels="auto",
        litert=None,
    ):
        data, model = load_verified(model_path)
        meta = metadata(model)
        key = METADATA_STREAMING if METADATA_STREAMING in meta else None
        key = key or METADATA_CONFIG
        if key not in meta:
            raise ValueError(
                f"Not a streaming decoder: {model_path!r} has no "
                f"{METADATA_CONFIG} metadata"
            )
        self.config = config_object(meta[key], model_path)
        check_format(self.config, STREAMING_DECODER, model_path)
        self.litert = litert or LiteRTModel(
            data, model, model_path, num_threads, accelerator, cpu_kernels
        )
        self.engine = self.litert.engine
        # One start, or several (e.g. prompt lengths): the first that fits.
        names = legacy.start_names(self.config)
        self._starts = {name: self.litert.runner(name) for name in names}
        # One decode, or several batches: the smallest that holds the rows.
        steps = self.config.get("steps", [self.config["step"]])
        self._steps = {self._rows(n): self.litert.runner(n) for n in steps}
        self._step = self._steps[self._rows(self.config["step"])]
        self.state_names = [f"state_{i}" for i in range(self.config["state"])]
        # What a step gives back; the rest of the state passes unchanged.
        self.updated_state = self.config.get("step_state", self.state_names)

    def start(self, **inputs):
        """The state after `start` (e.g. `source=ids`), `{name: array}`:
        the inputs zero-padded to the first start they fit (rows to its
        batch, other axes to its sizes, on the file's `padding` side)."""
        inputs, _ = self.padded(inputs)
        name = self._fitting(inputs)
        out = self._starts[name](**inputs)
        return {name: out[name] for name in self.state_names}

    def step(self, tokens, index, state):
        """`(logits (B, V), new state, alignment or None)` of one step (on
        the decode signature of `B` rows, where the file has several)."""
        feed = {
            "tokens": np.asarray(tokens, "int32"),
            "index": np.asarray(index, "int32"),
            **state,
        }
        out = self._steps.get(len(feed["tokens"]), self._step)(**feed)
        new = {**state, **{name: out[name] for name in self.updated_state}}
        return out["logits"], new, out.get("alignment")

    def stream(
        self, inputs, start_id, end_id, max_length, choose=greedy, banned_ids=()
    ):
        """Yield each step's tokens `(B,)` until every row has emitted
        `end_id` (a token, or a list of them) or `max_length` steps were
        taken (`start_id`: the token each row starts after, one id or
        `(B,)`, e.g. a prompt's last); a
        finished row gives 0 after its `end_id`, and padding (0) and
        `banned_ids` are never chosen, as in the searches of
        `keras_attn.seq2seq`."""
        for tokens, _ in self.steps(
            inputs, start_id, end_id, max_length, choose, banned_ids
        ):
            yield tokens

    def steps(
        self, inputs, start_id, end_id, max_length, choose=greedy, banned_ids=()
    ):
        """`stream`, yielding `(tokens (B,), alignment (B, S) or None)`."""
        inputs = {k: np.asarray(v) for k, v in inputs.items()}
        rows = len(next(iter(inputs.values())))
        search = TokenSearch(rows, end_id, choose, banned_ids)
        for _ in self.search_steps(inputs, search, start_id, max_length):
            aligned = search.aligned
            yield (
                search.emitted[:, -1],
                None if aligned is None else aligned[:, -1],
            )

    def stream_beam(self, inputs, start_id, end_id, max_length, **beam):
        """Beam search, streamed: after each step, yield `(B,)` lists of
        the tokens each example's beams have just come to agree on (often
        empty). Whatever hypothesis wins starts with them, so what was
        yielded is never taken back; the rest of the winner comes with the
        last yield. `beam` as in `beam_search`."""
        steps = self.beam_steps(inputs, start_id, end_id, max_length, **beam)
        handover = None
        for search in steps:
            handover = handover or Handover(search)
            sent = list(handover.sent)
            last = search.emitted.shape[1] == max_length
            now = handover.take(last)
            yield [
                np.asarray([] if new is None else new[0][n:], "int32")
                for new, n in zip(now, sent, strict=True)
            ]

    def beam_search(self, inputs, start_id, end_id, max_length, **beam):
        """`{"ids": (B, steps), "score": (B,), "alignment": (B, steps, S)
        or None}`: each example's best hypothesis (0 after its end), its
        penalized score and alignment, as `keras_attn.seq2seq.beam_search`
        gives them.

        Args:
            inputs: the `start` signature's inputs (e.g. `{"source": ids}`).
            start_id: as in `stream`.
            end_id: as in `stream`.
            max_length: as in `stream`.
            **beam: `beam_width`, `length_penalty`, `coverage_penalty`,
                `source_mask` and `banned_ids`, as in
                `keras_attn_runtime.search.BeamSearch`. The file's batch
                must hold `B · beam_width` rows.
        """
        steps = self.beam_steps(inputs, start_id, end_id, max_length, **beam)
        *_, search = steps  # run to the end
        ids, score, alignment = search.best()
        return {"ids": ids, "score": score, "alignment": alignment}

    def beam_steps(self, inputs, start_id, end_id, max_length, **beam):
        """Yield the `BeamSearch` (`keras_attn_runtime.search`) after each
        step of the file (`search_steps`). `beam` as in `beam_search`."""
        inputs = {k: np.asarray(v) for k, v in inputs.items()}
        rows = len(next(iter(inputs.values())))
        search = BeamSearch(rows, end_id, **beam)
        return self.search_steps(inputs, search, start_id, max_length)

    def search_steps(self, inputs, search, start_id, max_length):
        """Run `search` (a `TokenSearch` or a `BeamSearch` of
        `keras_attn_runtime.search`, over the examples of `inputs`) on
        the file, yielding it after each step until every row is done or
        `max_length` steps were taken: its `emitted`, `aligned`,
        `settled()` and `best()` say where it stands. The state is
        reordered by the rows the search keeps."""
        inputs, rows = self.padded(inputs)
        state = self.start(**inputs)
        live = rows * search.k
        size = self.step_rows(live)
        if live > size:
            raise ValueError(
                f"Expected beam_width · rows <= {size} (the file's step "
                f"batch). Received: beam_width={search.k} for {rows} rows"
            )
        # Row r of the file holds search row min(r, live - 1): the rows
        # (each example's beams), then copies of the last up to the
        # file's batch size.
        spread = np.minimum(np.arange(size), live - 1)
        first = np.repeat(np.arange(rows), search.k)[spread]
        state = {name: value[first] for name, value in state.items()}
        tokens = np.repeat(_per_row(start_id, rows), search.k)
        for index in range(max_length):
            logits, state, alignment = self.step(tokens[spread], index, state)
            alignment = None if alignment is None else alignment[:live]
            kept, tokens = search.advance(logits[:live], alignment)
            if kept is not None:
                order = kept[spread]
                state = {
                    name: value[order] if name in self.updated_state else value
                    for name, value in state.items()
                }
            yield search
            if search.done.all():
                return

    @property
    def step_batches(self):
        """The row counts of the file's decode signatures, smallest first
        (`-1`: any)."""
        return sorted(self._steps)

    def _rows(self, name):
        """The fixed rows of decode signature `name` (`-1`: any)."""
        spec = self.litert.signatures[name]["inputs"]
        return int(spec["tokens"]["shape_signature"][0])

    def step_rows(self, rows):
        """The rows a step runs: the smallest fixed batch of the decode
        signatures that holds `rows` (else the first's), or `rows` where
        a signature takes any."""
        if -1 in self._steps:
            return rows
        fitting = [n for n in sorted(self._steps) if n >= rows]
        return fitting[0] if fitting else self._rows(self.config["step"])

    def _fitting(self, inputs):
        """The first start whose inputs are at least as large as
        `inputs` on every axis but the batch."""
        for name in self._starts:
            spec = self.litert.signatures[name]["inputs"]
            if all(
                n == -1 or n >= m
                for key, value in inputs.items()
                for n, m in zip(
                    spec[key]["shape_signature"][1:],
                    np.shape(value)[1:],
                    strict=True,
                )
            ):
                return name
        shapes = {k: list(np.shape(v)) for k, v in inputs.items()}
        raise ValueError(
            "Expected inputs no larger than the file's largest start. "
            f"Received: {shapes}"
        )

    def padded(self, inputs, widest=False):
        """`(inputs, rows)`: the inputs zero-padded to the first start
        they fit (rows up to its fixed batch size, where it has one, and
        its other sizes, on the `padding` side), or with `widest=True`
        to the last start's sizes (e.g. a source mask as wide as the
        state), and the caller's rows."""
        inputs = {k: np.asarray(v) for k, v in inputs.items()}
        name = self._fitting(inputs)
        spec = self.litert.signatures[name]["inputs"]
        if widest:
            spec = self.litert.signatures[list(self._starts)[-1]]["inputs"]
        left = self.config.get("padding") == "left"
        out, rows = {}, None
        for name, value in inputs.items():
            rows = len(value) if rows is None else rows
            sizes = [int(n) for n in spec[name]["shape_signature"]]
            if sizes[0] != -1 and len(value) > sizes[0]:
                raise ValueError(
                    f"Expected at most {sizes[0]} rows (the file's batch "
                    f"size). Received: {name} with {len(value)} rows"
                )
            more = [
                max(n - m, 0) for n, m in zip(sizes, value.shape, strict=True)
            ]
            pads = [(0, more[0])] + [
                (n, 0) if left else (0, n) for n in more[1:]
            ]
            out[name] = np.pad(value, pads)
        return out, rows


def _per_row(start_id, rows):
    """`(rows,)` int32 start tokens from one id or one per row."""
    ids = np.asarray(start_id, "int32")
    if ids.ndim == 0:
        return np.full((rows,), ids, "int32")
    if ids.shape != (rows,):
        raise ValueError(
            f"Expected start_id to be one id or {rows} (one per row). "
            f"Received: start_id of shape {ids.shape}"
        )
    return ids
