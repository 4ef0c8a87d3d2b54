"""A streaming decoder as one LiteRT file: a `prefill` signature (an
encoder's memory and empty caches, or a prompt run through its caches)
and a `decode` signature that decodes one token, the decoder's state
crossing calls as explicit inputs and outputs. The names are LiteRT-LM's
(`keras_attn.export.litertlm`): `prefill`, `decode`, `tokens`, `logits`.
The step's `index` keeps its name: it counts decoded tokens, where
LiteRT-LM's `input_pos` holds absolute positions. Files written before
(`start` and `step`) name their signatures in their config and run as
they did.

LiteRT's `CompiledModel` runs no graph whose state lives in variable
tensors, so the state (key/value caches of any policy, a recurrent
state, a memory) is named `state_0 ... state_{n-1}` on both sides: the
outputs of one call are the inputs of the next. Builtin ops only, any
batch size. `keras_attn_runtime.StreamingDecoder` runs the file with
NumPy and LiteRT and yields tokens as they come.
"""

import json

from keras_attn.export.litert import export_signatures_tflite
from keras_attn.legacy import exports as legacy_exports
from keras_attn_runtime import artifact

START, STEP = "prefill", "decode"


def _state_specs(concrete):
    """The flat state's `TensorSpec`s as `start` gives it."""
    import tensorflow as tf

    return [
        tf.TensorSpec(out.shape, out.dtype, name=f"state_{i}")
        for i, out in enumerate(concrete.structured_outputs.values())
    ]


def _own_buffer(tensor):
    """`tensor`, copied once (padded by a row, then sliced): a state part
    that a loop gives (a recurrent encoder's last state, the output of a
    `WHILE`) has no buffer of its own, which `CompiledModel` cannot bind
    as an output. Only `start` copies its outputs, once a sequence."""
    import tensorflow as tf

    pads = [[0, 1]] + [[0, 0]] * (tensor.shape.rank - 1)
    begin = [0] * tensor.shape.rank
    return tf.slice(tf.pad(tensor, pads), begin, tf.shape(tensor))


def _start_signatures(start_signature, padding):
    """`{signature name: {input: TensorSpec}}` of the file's starts."""
    if padding not in ("right", "left"):
        raise ValueError(
            "Expected padding to be 'right' or 'left'. "
            f"Received: padding={padding!r}"
        )
    if isinstance(start_signature, dict):
        return {START: start_signature}
    given = list(start_signature)
    if not given or not all(isinstance(s, dict) for s in given):
        raise ValueError(
            "Expected start_signature to be a dict of TensorSpecs or a "
            f"non-empty list of them. Received: start_signature={given!r}"
        )
    if len(given) == 1:
        return {START: given[0]}
    return {f"{START}_{i}": spec for i, spec in enumerate(given)}


def _start_function(start, start_signature, structure):
    """`(tf.function, state specs)`: `start` on named inputs, its state
    flattened into `state_i` outputs (its nest kept in `structure`)."""
    import tensorflow as tf

    names = list(start_signature)

    def flat_start(*inputs):
        state = start(**dict(zip(names, inputs, strict=True)))
        structure["state"] = state
        flat = tf.nest.flatten(state)
        return {f"state_{i}": _own_buffer(t) for i, t in enumerate(flat)}

    specs = [
        tf.TensorSpec(s.shape, s.dtype, name=n)
        for n, s in start_signature.items()
    ]
    start_fn = tf.function(flat_start, input_signature=specs)
    return start_fn, _state_specs(start_fn.get_concrete_function())


def _start_functions(start, signatures, structure):
    """`({name: tf.function}, state specs)` of every start, which must
    give one state form."""
    starts, state_specs = {}, None
    for name, spec in signatures.items():
        starts[name], specs = _start_function(start, spec, structure)
        if state_specs is not None and specs != state_specs:
            raise ValueError(
                "Expected every start to give the same state shapes. "
                f"Received: start_signature {name} gives {specs}, not "
                f"{state_specs}"
            )
        state_specs = specs
    return starts, state_specs


def _step_function(step_fn, state_specs, structure, batch=None):
    """`(tf.function, updated)`: one step of `step_fn` on `tokens`,
    `index` and the flat state; `updated` names the state parts it gives
    back (a part passed through unchanged is not an output: an output
    that is an input has no buffer of its own, which `CompiledModel`
    cannot bind)."""
    import tensorflow as tf

    updated = []

    def flat_step(tokens, index, *flat):
        state = tf.nest.pack_sequence_as(structure["state"], list(flat))
        logits, state, alignment = step_fn(tokens, state, index)
        out = {"logits": logits}
        if alignment is not None:
            out["alignment"] = alignment
        updated.clear()
        for i, t in enumerate(tf.nest.flatten(state)):
            if not any(t is given for given in flat):
                out[f"state_{i}"] = t
                updated.append(f"state_{i}")
        return out

    if batch is None and state_specs:
        batch = state_specs[0].shape[0]
    else:  # the state's rows as the step runs them
        state_specs = [
            tf.TensorSpec([batch, *spec.shape[1:]], spec.dtype, spec.name)
            for spec in state_specs
        ]
    step_specs = [
        tf.TensorSpec([batch], tf.int32, name="tokens"),
        tf.TensorSpec([], tf.int32, name="index"),
        *state_specs,
    ]
    step = tf.function(flat_step, input_signature=step_specs)
    step.get_concrete_function()  # traced: `updated` names the outputs
    return step, updated


def _reads_index(step):
    """Whether a traced step's outputs depend on its `index` input (a
    step that does not can decode rows that are at different steps in
    one call: iteration-level batching)."""
    graph = step.get_concrete_function().graph
    index = graph.inputs[1]
    return any(
        t.name == index.name for op in graph.get_operations() for t in op.inputs
    )


def _step_names(step_batch):
    """`{signature name: rows}` of the decode signatures: `decode` for
    one batch (or `None`: the starts'), and `decode_<rows>` for each
    further batch of a list."""
    if step_batch is None or isinstance(step_batch, int):
        return {STEP: step_batch}
    sizes = list(step_batch)
    if not sizes or not all(isinstance(n, int) and n > 0 for n in sizes):
        raise ValueError(
            "Expected step_batch to be a positive integer or a list of "
            f"them. Received: step_batch={step_batch!r}"
        )
    return {STEP if i == 0 else f"{STEP}_{n}": n for i, n in enumerate(sizes)}


def streaming_functions(
    decoder, *, start_signature, padding="right", step_batch=None
):
    """`(functions, config)`: the `tf.function`s of a streaming file
    (`{signature name: function}`) and the settings its
    `keras_attn.config` holds, as `export_streaming_tflite` writes them
    (its arguments); for a file that holds other signatures too."""
    start, step_fn = _decoder_pair(decoder)
    signatures = _start_signatures(start_signature, padding)
    structure = {}  # the state's nest, from the first trace
    starts, state_specs = _start_functions(start, signatures, structure)
    steps, updated = {}, []
    for name, rows in _step_names(step_batch).items():
        steps[name], updated = _step_function(
            step_fn, state_specs, structure, rows
        )
    config = {
        "start": next(iter(starts)),
        "starts": list(starts),
        "padding": padding,
        "step": STEP,
        "start_inputs": list(next(iter(signatures.values()))),
        "state": len(state_specs),
        "step_state": list(updated),
        "reads_index": _reads_index(steps[STEP]),
    }
    if len(steps) > 1:
        config["steps"] = list(steps)
    return {**starts, **steps}, config


def cached_decoder(model, context_length):
    """`(start, step_fn)` for `export_streaming_tflite` from a
    decoder-only model with KerasHub's cache contract (`call_with_cache`
    taking a position a row, `empty_cache`; `keras_attn.models.CausalLM`),
    whose rows decode at positions of their own.

    `start(prompt)` runs a prompt `(1, P)` through an empty cache of
    `context_length` positions, right-padded with token 0 (written only
    where the row's later steps overwrite it before reading); its state
    is `{"cache", "position" (1,)}`, the row's next position. `step_fn`
    decodes one token a row at that position and moves it on. It does
    not read `index`, so requests at different steps share a decode call
    (`keras_attn_runtime.batching`); the caller feeds a prompt's last
    token as the first step's (the others prefilled), as LiteRT-LM's
    engine does.
    """
    from keras import ops

    def start(prompt):
        tokens = ops.not_equal(prompt, 0)
        cache = model.empty_cache(prompt, context_length)
        _, cache = model.call_with_cache(prompt, cache, 0, padding_mask=tokens)
        position = ops.sum(ops.cast(tokens, "int32"), axis=1)  # (1,)
        return {"cache": cache, "position": position}

    def step_fn(tokens, state, index):
        position = state["position"]
        logits, cache = model.call_with_cache(
            tokens[:, None], state["cache"], position
        )
        return logits[:, 0], {"cache": cache, "position": position + 1}, None

    return start, step_fn


@legacy_exports.streaming_path_first(
    ("overwrite", "quantize", "settings", "metadata", "padding", "step_batch")
)
def _decoder_pair(decoder):
    """`(start, step_fn)` from `decoder`, or a `ValueError` naming it."""
    if (
        not isinstance(decoder, (tuple, list))
        or len(decoder) != 2
        or not all(callable(f) for f in decoder)
    ):
        raise ValueError(
            "Expected decoder to be a pair of functions (start, step_fn). "
            f"Received: decoder={decoder!r}"
        )
    return tuple(decoder)


def export_streaming_tflite(
    decoder,
    path,
    *,
    start_signature,
    overwrite=False,
    protect=(),
    quantize="none",
    settings=None,
    metadata=None,
    padding="right",
    step_batch=None,
):
    """Write `path`, a LiteRT streaming decoder.

    Args:
        decoder: `(start, step_fn)`. `start(**inputs) -> state`, a nest
            of batch-first tensors (e.g. an encoder's memory and
            `empty_cache`s); `step_fn`, the searches' decoder,
            `step_fn(tokens, state, index) -> (logits, state, alignment)`
            (`alignment` may be `None`).
        path: the `.tflite` file.
        start_signature: `{name: tf.TensorSpec}` of `start`'s inputs,
            batch first (e.g. `{"source": TensorSpec([8, 24], tf.int32)}`).
            Fixed sizes keep every output's size known before a run, as
            `CompiledModel` needs (it sizes an output that a value sizes,
            such as a reshape to the batch, at 1); the runtime pads a
            smaller batch with rows of zeros. A `None` batch runs under the
            `Interpreter` only. Or a list of them, one `start` each (e.g.
            several prompt lengths of a decoder-only stack): the runtime
            runs the first whose inputs are long enough, the caller's
            zero-padded to its sizes. Every start gives the same state
            shapes.
        overwrite: as in `export_signatures_tflite`.
        protect: as in `export_signatures_tflite`.
        quantize: as in `export_signatures_tflite`.
        settings: a JSON-able dict stored in the file's config (e.g. the
            start and end token ids). Defaults to `None`.
        metadata: more `{name: bytes}` metadata entries (e.g.
            vocabularies). Defaults to `None`.
        padding: where the runtime pads an input to a start's length:
            `"right"` (the default) or `"left"` (a prompt's last token
            stays last, for a decoder-only stack).
        step_batch: the rows `decode` runs, if not the starts' batch: a
            beam search's `B · beam_width` rows from a start of `B` (the
            encoder runs once a sentence). Or a list of row counts: one
            `decode` signature each (`decode`, then `decode_<rows>`), the
            runtime running the smallest that holds its rows. Defaults to
            `None`.

    The file's signatures: `"prefill"` (the inputs of `start_signature`
    in, `state_i` out; with several, `"prefill_0"`, `"prefill_1"`, ...)
    and `"decode"` (`tokens` `(B,)` int32, `index` `()` int32 and
    `state_i` in; `logits` `(B, V)`, `state_i` and, when `step_fn` gives
    one, `alignment` out; a state part the step leaves unchanged is not an
    output, and the config's `step_state` lists those it does give).
    """
    functions, config = streaming_functions(
        decoder,
        start_signature=start_signature,
        padding=padding,
        step_batch=step_batch,
    )
    config = artifact.artifact_config(
        artifact.STREAMING_DECODER, **config, **(settings or {})
    )
    metadata = {
        **(metadata or {}),
        artifact.METADATA_CONFIG: json.dumps(config).encode(),
    }
    return export_signatures_tflite(
        functions,
        path,
        overwrite=overwrite,
        protect=protect,
        metadata=metadata,
        quantize=quantize,
    )
