"""The decoding loop every sampler runs, and the base `Sampler`.

A decoder is one function,

    step_fn(tokens (B,), state, index) -> (logits (B, V), state, alignment)

where `state` is any nest of tensors whose first axis is the batch (RNN
states, the encoder memory and its mask, a key/value cache...), `index` is
the position being decoded (an int32 scalar tensor, 0 for the first
token) and `alignment` is the attention over the source, `(B, S)`, or
`None`.

`Sampler.__call__` runs the loop: the start tokens, the output buffers,
the end test, the banned ids and the result dict are written once, here,
with one `keras.ops.while_loop` on fixed-size buffers, so a search traces
under `jax.jit` and `tf.function` (and lives inside an exported SavedModel
or LiteRT file as one loop) and runs eagerly on PyTorch. The first token
is decoded inside the loop too: the buffers are sized from a symbolic call
of `step_fn` (`keras.Operation.compute_output_spec`), so an exported graph
holds the decoder once. The first step runs before the loop instead, on
the real state, when the decoder's state changes form at that step (give
such a decoder its full initial state), when a traced graph leaves the
alignment's length unknown (it is read from that step), and on PyTorch,
whose shape reading would run the decoder on stand-in values. A strategy
overrides `next_token` (greedy, random, top-k, top-p), or `next` and the
`start`/`finish` hooks (beam search), or `step` (contrastive search's
look-ahead).

Token conventions: every output starts after `start_id` (one id, or one
per example `(B,)`); `end_id` (one id, or a list: any of them) ends it
and is kept in the output; positions after it hold 0, the padding id,
which is never emitted. Columns in `banned_ids` (e.g. the start token,
`[UNK]`) are never emitted either.
"""

import dataclasses

import keras
from keras import ops

NEG_INF = -1e9


def ban(logits, banned_ids=()):
    """`logits (..., V)` as float32 with the `banned_ids` columns at -1e9."""
    logits = ops.cast(logits, "float32")
    if not banned_ids:
        return logits
    vocab = ops.arange(ops.shape(logits)[-1], dtype="int32")
    banned = ops.convert_to_tensor(list(banned_ids), dtype="int32")
    hit = ops.any(ops.equal(vocab[:, None], banned[None, :]), axis=1)  # (V,)
    return ops.where(hit, NEG_INF, logits)


def write_step(buffer, index, value):
    """`buffer[:, index] = value` for `buffer (N, L, ...)`, `value (N, ...)`,
    as a select (no scatter), so it exports to builtin LiteRT ops."""
    length = ops.shape(buffer)[1]
    hit = ops.equal(ops.arange(length, dtype="int32"), index)  # (L,)
    hit = ops.reshape(hit, (1, -1) + (1,) * (len(buffer.shape) - 2))
    return ops.where(hit, ops.expand_dims(value, 1), buffer)


def argmax(x):
    """`argmax` over the last axis through `top_k` (first index on ties):
    TensorFlow's `argmax` lowering in Keras adds a non-builtin LiteRT op."""
    return ops.top_k(x, 1)[1][..., 0]


def batch_size(state):
    """The batch size of a decoder state (its first tensor's first axis)."""
    leaves = keras.tree.flatten(state)
    if not leaves:
        raise ValueError(
            "Expected state to hold at least one tensor with a batch axis. "
            f"Received: state={state!r}"
        )
    return ops.shape(leaves[0])[0]


def end_ids(value):
    """The ids of `end_id` (an int or a non-empty list of non-negative
    ints) as a list, or `None` when `value` is not one."""
    ids = list(value) if isinstance(value, (list, tuple)) else [value]
    ok = ids and all(isinstance(i, int) and i >= 0 for i in ids)
    return ids if ok else None


def is_end(token, end_id):
    """Whether each token is one of the end ids."""
    ends = ops.convert_to_tensor(end_ids(end_id), dtype="int32")
    return ops.any(ops.equal(ops.expand_dims(token, -1), ends), axis=-1)


def check_max_length(max_length):
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(
            "Expected max_length to be a positive integer. "
            f"Received: max_length={max_length!r}"
        )


def check_ids(start_id, end_id, max_length):
    """Named errors for the token arguments of a search."""
    if (
        isinstance(start_id, int)
        and start_id < 0
        or (
            not isinstance(start_id, int)
            and len(getattr(start_id, "shape", ())) != 1
        )
    ):
        raise ValueError(
            "Expected start_id to be a non-negative integer or a `(B,)` "
            f"tensor of them. Received: start_id={start_id!r}"
        )
    if end_ids(end_id) is None:
        raise ValueError(
            "Expected end_id to be a non-negative integer or a list of "
            f"them. Received: end_id={end_id!r}"
        )
    check_max_length(max_length)


def start_tokens(start_id, batch, repeats=1):
    """`(B·repeats,)` start tokens: one id for all or one per example."""
    if isinstance(start_id, int):
        return ops.full((batch * repeats,), start_id, dtype="int32")
    return ops.repeat(ops.cast(start_id, "int32"), repeats, axis=0)


def as_alignment(rows, alignment):
    """`alignment` as float32, or a `(rows, 0)` placeholder for `None`."""
    if alignment is None:
        return ops.zeros((rows, 0), "float32")
    return ops.cast(alignment, "float32")


def repeat_rows(state, times):
    """Every tensor of `state` with each batch row repeated `times` times."""
    return keras.tree.map_structure(
        lambda x: ops.repeat(x, times, axis=0), state
    )


def _spec(x):
    x = x if hasattr(x, "shape") else ops.convert_to_tensor(x)
    dtype = keras.backend.standardize_dtype(x.dtype)
    return keras.KerasTensor(tuple(x.shape), dtype=dtype)


class _StepFunction(keras.Operation):
    """`step_fn` as an operation, to read its output shapes without
    running it (and without adding it to a traced graph)."""

    def __init__(self, step_fn):
        super().__init__(name="step_fn")
        self.step_fn = step_fn

    def call(self, tokens, state, index):
        return self.step_fn(tokens, state, index)


def step_output_spec(step_fn, inputs, state):
    """`(logits, state, alignment)` specs of `step_fn`'s first step
    (`alignment` `None` when the decoder returns none), read
    symbolically."""
    specs = keras.tree.map_structure(_spec, (inputs, state))
    index = keras.KerasTensor((), dtype="int32")
    return _StepFunction(step_fn).compute_output_spec(*specs, index)


def reads_shapes_by_running():
    """Whether the backend reads a function's output shapes by running it
    on stand-in values: Keras's PyTorch backend tries meta tensors, then
    tensors of ones. The decoder never gets those: its first real step
    gives the shapes instead (PyTorch runs the loop eagerly, so that step
    costs nothing more)."""
    return keras.backend.backend() == "torch"


def reuse_once(step_fn, inputs, state, outputs):
    """`step_fn`, answering its first call on exactly `inputs` and `state`
    (the same objects) with `outputs`, already computed, so that the
    first step is decoded once."""
    pending = [outputs]

    def step(tokens, current, index):
        if pending and tokens is inputs and current is state:
            return pending.pop()
        return step_fn(tokens, current, index)

    return step


def same_form(state, spec):
    """Whether the tensors of `state` have the structure, shapes and
    dtypes of `spec`'s."""
    try:
        keras.tree.assert_same_structure(state, spec)
    except (ValueError, TypeError):
        return False
    pairs = zip(
        keras.tree.flatten(state), keras.tree.flatten(spec), strict=True
    )
    return all(
        tuple(a.shape) == tuple(b.shape)
        and keras.backend.standardize_dtype(a.dtype) == b.dtype
        for a, b in pairs
    )


@dataclasses.dataclass
class Run:
    """One call of a sampler: the decoder and the call's arguments, read
    by the strategy's hooks.

    Attributes:
        step_fn: the decoder.
        batch: the number of examples `B` (a Python int or scalar tensor).
        max_length: the most steps.
        end_id: the end id(s), or `None` (`MultiLabelSampler`).
        banned: the ids never emitted, padding (0) first.
        source_mask: boolean `(rows, S)`, one row per decoder row, or
            `None`.
        hidden_fn: `ContrastiveSampler`'s representation function.
        end_fn: `MultiLabelSampler`'s end test.
        unroll_first_step: take the first step before the loop, on its
            known start tokens (a graph converter can then fold what
            depends on them alone into constants; `Translator.
            export_tflite` asks for it). The outputs are the same.
        uniforms: `(max_length, rows)` numbers in `[0, 1)` for the random
            samplers, in place of drawing them from their seed (a LiteRT
            file takes them as an input: its runtime has no stateless
            random op).
    """

    step_fn: object
    batch: object
    max_length: int
    end_id: object = None
    banned: tuple = (0,)
    source_mask: object = None
    hidden_fn: object = None
    end_fn: object = None
    unroll_first_step: bool = False
    uniforms: object = None


class Sampler:
    """Base class of the decoding strategies: the loop, once.

    A subclass that picks one token per example and step overrides
    `next_token(logits, index, carry)` only (see `GreedySampler`); the
    others override the hooks `start`, `step`, `next` and `finish`.
    Samplers are serializable (`get_config`, `keras_attn.seq2seq.samplers.
    serialize` and `get`), as KerasHub's are.

    Call arguments:
        step_fn: the decoder, `step_fn(tokens, state, index) -> (logits,
            state, alignment)` (see the module docstring).
        state: the decoder's initial state, a nest of batch-first tensors.
        start_id: the token every output starts after: an int or `(B,)`.
        end_id: the token that ends an output, or a list: any of them.
        max_length: the most tokens per output, `end_id` included.
        banned_ids: tokens never emitted. Defaults to `()`.
        source_mask: boolean `(B, S)`, the source positions that count
            (for `BeamSampler`'s coverage penalty; others ignore it).
            Defaults to `None`.
        alignment_length: the alignment's length `S` (an int or scalar
            tensor). Optional: without it, a traced graph with a variable
            source length reads it from the first step, which then runs
            before the loop. Defaults to `None`.

    Returns:
        A dict: `"ids"` `(B, max_length)` int32 (0 after `end_id`) and
        `"alignment"` `(B, max_length, S)` float32, or `None` when
        `step_fn` returns no alignment; some strategies add entries.
    """

    #: Decoder rows per example (`BeamSampler`: its beam width).
    rows_per_example = 1

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        settings = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({settings})"

    def __call__(
        self,
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids=(),
        source_mask=None,
        alignment_length=None,
    ):
        return self.decode_tokens(
            step_fn,
            state,
            start_id,
            end_id,
            max_length,
            banned_ids,
            source_mask,
            alignment_length,
        )

    def decode_tokens(
        self,
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids=(),
        source_mask=None,
        alignment_length=None,
        **fields,
    ):
        """`__call__`'s work, with `fields` (more `Run` attributes, such as
        `hidden_fn`) for a strategy whose call takes more arguments."""
        check_ids(start_id, end_id, max_length)
        batch = batch_size(state)
        run = Run(
            step_fn,
            batch,
            max_length,
            end_id,
            (0, *banned_ids),
            source_mask,
            **fields,
        )
        tokens = start_tokens(start_id, batch, self.rows_per_example)
        return self.decode(run, state, tokens, alignment_length)

    def decode(self, run, state, inputs, alignment_length=None):
        """The loop: `inputs` (the first step's tokens, one row per decoder
        row) fed to `run.step_fn`, what each step emits fed back, until
        `max_length` steps or every row is done."""
        state = repeat_rows(state, self.rows_per_example)
        rows = ops.shape(inputs)[0]
        length = run.max_length
        first = None  # the first step's outputs, when run before the loop
        if reads_shapes_by_running():
            first = run.step_fn(inputs, state, ops.convert_to_tensor(0))
            logits, state_spec, alignment = first
        else:
            logits, state_spec, alignment = step_output_spec(
                run.step_fn, inputs, state
            )
        width = 0
        if alignment is not None:
            width = alignment.shape[-1]
            if width is None:
                width = alignment_length
            if width is None:  # a traced graph with a variable source
                first = first or run.step_fn(
                    inputs, state, ops.convert_to_tensor(0)
                )
                width = ops.shape(first[2])[-1]
        if first is not None:  # decoded once: the loop's first step
            run.step_fn = reuse_once(run.step_fn, inputs, state, first)
        if run.source_mask is not None:
            run.source_mask = repeat_rows(
                ops.cast(run.source_mask, "bool"), self.rows_per_example
            )
        state, carry = self.start(
            run, inputs, state, logits, None if alignment is None else width
        )
        emitted = ops.zeros((rows, length, *inputs.shape[1:]), inputs.dtype)
        aligned = ops.zeros((rows, length, width), "float32")
        done = ops.zeros((rows,), "bool")

        def cond(index, inputs, state, loop):
            more = ops.logical_not(ops.all(loop[2]))
            return ops.logical_and(index < length, more)

        def body(index, inputs, state, loop):
            emitted, aligned, done, carry = loop
            inputs, attended, done, state, kept, carry = self.step(
                run, index, inputs, state, done, carry
            )
            if kept is not None:  # rows reordered (beams)

                def take(x):
                    return ops.take(x, kept, axis=0)

                state = keras.tree.map_structure(take, state)
                emitted, aligned, attended = map(
                    take, (emitted, aligned, attended)
                )
            emitted = write_step(emitted, index, inputs)
            aligned = write_step(aligned, index, attended)
            return index + 1, inputs, state, (emitted, aligned, done, carry)

        loop_vars = (ops.convert_to_tensor(0, "int32"), inputs, state)
        loop_vars += ((emitted, aligned, done, carry),)
        if (
            run.unroll_first_step
            or first is not None
            or not same_form(state, state_spec)
        ):
            # Asked for, already run (for its shapes), or a decoder whose
            # state changes form at its first step (an initial state
            # without the entries the step adds): that step runs before
            # the loop.
            loop_vars = body(*loop_vars)
        *_, loop = ops.while_loop(cond, body, loop_vars)
        emitted, aligned, done, carry = loop
        if alignment is None:
            aligned = None
        return self.finish(run, emitted, aligned, done, carry)

    # The hooks.

    def start(self, run, inputs, state, logits, width):
        """Before the loop: `(state, carry)`, the strategy's own loop
        variables (a nest of tensors). `logits` is the first step's spec,
        `width` the alignment's length (`None`: the decoder gives no
        alignment)."""
        return state, ()

    def step(self, run, index, inputs, state, done, carry):
        """One step: the decoder on `inputs`, then `next`. Returns
        `(emitted, alignment, done, state, kept, carry)`: `kept` is `None`
        or the decoder rows to keep, in order (the state, the outputs so
        far and `alignment` are reordered by it)."""
        logits, state, alignment = run.step_fn(inputs, state, index)
        alignment = as_alignment(ops.shape(inputs)[0], alignment)
        token, done, kept, carry = self.next(
            run, index, logits, alignment, done, carry
        )
        return token, alignment, done, state, kept, carry

    def next(self, run, index, logits, alignment, done, carry):
        """The step's choice: `(token, done, kept, carry)`. By default one
        token per row from `next_token`, padding once a row is done."""
        logits = ban(logits, run.banned)
        token = ops.cast(self.next_token(logits, index, carry), "int32")
        token = ops.where(done, 0, token)
        done = ops.logical_or(done, is_end(token, run.end_id))
        return token, done, None, carry

    def next_token(self, logits, index, carry):
        """The next token of each row from its float32 `logits (B, V)`,
        banned ids already at -1e9."""
        raise NotImplementedError(
            f"{type(self).__name__} does not define next_token"
        )

    def finish(self, run, emitted, alignment, done, carry):
        """The result dict from the outputs `emitted (rows, L, ...)`,
        `alignment (rows, L, S)` (or `None`) and the final loop state."""
        return {"ids": emitted, "alignment": alignment}
