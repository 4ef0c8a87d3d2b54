"""Reading and rewriting LiteRT flatbuffers: the rewrites `convert_tflite`
applies (`drop_index_wrapping`, and `keep_probability_ranges` for
full-integer files), each returning its input unchanged where there is
nothing to do."""

import numpy as np


def litert_schema():
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    return schema, flatbuffer_utils


def read_model(path_or_bytes):
    """The object form of a LiteRT file (a path or its bytes); a model
    object already read is returned as it is, so that one reading serves
    every question asked of a file."""
    if hasattr(path_or_bytes, "subgraphs"):
        return path_or_bytes
    schema, utils = litert_schema()
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data = bytearray(path_or_bytes)
    else:
        with open(path_or_bytes, "rb") as f:
            data = bytearray(f.read())
    return utils.convert_bytearray_to_object(data)


def enum_names(enum):
    """`{value: name}` of a LiteRT schema enum (`BuiltinOperator`, ...)."""
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def drop_index_wrapping(data):
    """LiteRT bytes without the negative-index wrapping before `GATHER`.

    Keras's TensorFlow `take` (so every `Embedding`) turns index `i` into
    `where(i < 0, i + n, i)` before gathering, which converts to
    `LESS`, `ADD` and a `SELECT` that microcontrollers cannot run. Token
    ids are never negative, so the gather reads `i` itself and the three
    ops go. Ops whose outputs nothing reads any more are removed; the rest
    of the graph is untouched. Returns `data` unchanged when the pattern
    is absent."""
    return _rewrite(data, _rewire_gathers)


def keep_probability_ranges(data):
    """Full-integer LiteRT bytes whose probabilities keep their whole
    range [0, 1).

    The int8 `SOFTMAX` writes on a fixed grid, `[0, 1)` in steps of
    1/256, but the converter then requantizes its output (`QUANTIZE`) to
    the range calibration saw. An attention calibrated on long inputs,
    where weights are spread, never saw a weight near 1; a short input's
    weights are then clipped (a review of a few words kept 0.59 of its
    weight). Here the readers of such a `QUANTIZE` read the softmax's
    output itself, and the ops that must keep their input's int8 grid
    (`SELECT_V2`, reshapes, slices) take that grid too, their constant
    operands re-expressed on it. Returns `data` unchanged when no
    softmax is requantized."""
    return _rewrite(data, _unclip_softmaxes)


def _rewrite(data, graph_pass):
    """`data` after `graph_pass(model, graph, ops) -> changed` on every
    subgraph, ops that nothing reads any more removed; `data` itself when
    no pass changed anything."""
    schema, utils = litert_schema()
    model = read_model(data)
    ops = enum_names(schema.BuiltinOperator)
    changed = False
    for graph in model.subgraphs:
        changed |= graph_pass(model, graph, ops)
    if not changed:
        return bytes(data)
    for graph in model.subgraphs:
        _drop_unread(graph)
    return bytes(utils.convert_object_to_bytearray(model))


# Ops whose int8 output must be on their input's grid (no rescaling).
_SAME_GRID = {
    "SELECT_V2",
    "RESHAPE",
    "STRIDED_SLICE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "TRANSPOSE",
    "GATHER",
}


# Ops that read an int8 input on any grid.
_RESCALES = {
    "BATCH_MATMUL",
    "FULLY_CONNECTED",
    "MUL",
    "ADD",
    "SUB",
    "MEAN",
    "DEQUANTIZE",
    "QUANTIZE",
}


def _op_name(model, op, ops):
    code = model.operatorCodes[op.opcodeIndex]
    return ops[max(code.builtinCode, code.deprecatedBuiltinCode)]


def _grid(tensor):
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) != 1:
        return None
    return float(q.scale[0]), int(q.zeroPoint[0])


def _unclip_softmaxes(model, graph, ops):
    producer = {o: op for op in graph.operators for o in op.outputs}
    changed = False
    for op in list(graph.operators):
        if _op_name(model, op, ops) != "QUANTIZE":
            continue
        source, target = op.inputs[0], op.outputs[0]
        before = producer.get(source)
        if before is None or _op_name(model, before, ops) != "SOFTMAX":
            continue
        grid = _grid(graph.tensors[source])
        if grid is None or _grid(graph.tensors[target]) == grid:
            continue
        if target in graph.outputs:
            continue
        plan = _regrid_plan(model, graph, ops, target, grid)
        if plan is None:  # a reader that rescales a second operand
            continue
        for tensor, constant in plan:
            _set_grid(model, graph, tensor, grid, constant)
        for reader in graph.operators:
            reader.inputs = np.array(
                [source if i == target else i for i in reader.inputs]
            )
        changed = True
    return changed


def _regrid_plan(model, graph, ops, start, grid):
    """The tensors to put on `grid` when `start`'s readers read the
    softmax: each same-grid reader's output and its constant value
    operands, transitively; `None` when one such operand is computed or
    shared, or a reader is neither a same-grid op nor one that rescales
    (a `CONCATENATION` must have its inputs' grid on XNNPACK)."""
    plan, todo = [], [start]
    while todo:
        tensor = todo.pop()
        for op in graph.operators:
            if tensor not in op.inputs:
                continue
            name = _op_name(model, op, ops)
            if name in _RESCALES:
                continue
            if name not in _SAME_GRID:  # CONCATENATION on XNNPACK, ...
                return None
            if name == "SELECT_V2":
                for other in op.inputs[1:]:
                    if other == tensor:
                        continue
                    readers = sum(other in o.inputs for o in graph.operators)
                    if not _is_stored(model, graph, other) or readers > 1:
                        return None
                    plan.append((other, True))
            for out in op.outputs:
                if _grid(graph.tensors[out]) != grid:
                    plan.append((out, False))
                    todo.append(out)
    return plan


def _is_stored(model, graph, tensor):
    data = getattr(model.buffers[graph.tensors[tensor].buffer], "data", None)
    return data is not None and len(data) > 0


def _set_grid(model, graph, tensor, grid, constant):
    t = graph.tensors[tensor]
    scale, zero = grid
    if constant:  # the same real values, on the new grid
        buffer = model.buffers[t.buffer]
        old_scale, old_zero = _grid(t)
        q = np.frombuffer(bytes(buffer.data), np.int8).astype("float64")
        real = old_scale * (q - old_zero)
        q = np.clip(np.round(real / scale) + zero, -128, 127)
        buffer.data = np.frombuffer(q.astype(np.int8).tobytes(), np.uint8)
    t.quantization.scale = np.array([scale], "float32")
    t.quantization.zeroPoint = np.array([zero], "int64")


def _rewire_gathers(model, graph, ops):
    def name(op):
        return _op_name(model, op, ops)

    producer = {o: op for op in graph.operators for o in op.outputs}
    changed = False
    for op in graph.operators:
        if name(op) != "GATHER":
            continue
        select = producer.get(op.inputs[1])
        if select is None or name(select) not in ("SELECT", "SELECT_V2"):
            continue
        condition, wrapped, raw = select.inputs[:3]
        less, add = producer.get(condition), producer.get(wrapped)
        if (
            less is not None
            and add is not None
            and name(less) == "LESS"
            and name(add) == "ADD"
            and less.inputs[0] == raw
            and add.inputs[0] == raw
            and _is_constant(model, graph, less.inputs[1], 0)
        ):
            op.inputs = np.array([op.inputs[0], raw, *op.inputs[2:]])
            changed = True
    return changed


def _is_constant(model, graph, tensor, value):
    buffer = model.buffers[graph.tensors[tensor].buffer]
    data = getattr(buffer, "data", None)
    if data is None or len(data) == 0:
        return False
    return bool(np.all(np.frombuffer(bytes(data), np.uint8) == value))


def _drop_unread(graph):
    """Remove, until none is left, ops with outputs that no op and no
    graph output reads."""
    while True:
        read = {i for op in graph.operators for i in op.inputs}
        read |= set(graph.outputs)
        keep = [  # an op without outputs acts by its side effects: kept
            op
            for op in graph.operators
            if len(op.outputs) == 0 or any(o in read for o in op.outputs)
        ]
        if len(keep) == len(graph.operators):
            return
        graph.operators = keep


class _SharedTable:
    """A tensor's quantization parameters, packed once per distinct
    value: every tensor holding equal ones points at the first packing."""

    def __init__(self, params, packed, key):
        self.params, self.packed, self.key = params, packed, key

    def Pack(self, builder):  # noqa: N802 (the flatbuffers object API's name)
        if self.key not in self.packed:
            self.packed[self.key] = self.params.Pack(builder)
        return self.packed[self.key]


def _quantization_key(params):
    """What makes two quantization tables equal, or `None` for one with
    custom details (never shared)."""
    if params is None or params.details is not None:
        return None
    parts = [params.quantizedDimension]
    for field in ("scale", "zeroPoint", "min", "max"):
        value = getattr(params, field)
        array = None if value is None else np.asarray(value)
        parts.append(
            None if array is None else (array.dtype.str, array.tobytes())
        )
    return tuple(parts)


def share_quantization(data):
    """LiteRT flatbuffer bytes in which tensors with equal quantization
    parameters point at one stored table. A file of several signatures
    over one model (a translator that also streams) then stores each
    int8 weight's per-channel scales once, not once a signature; the
    flatbuffer format lets tables be shared, and every reader sees the
    same values. Returns `data` unchanged when nothing repeats."""
    _, utils = litert_schema()
    model = utils.convert_bytearray_to_object(bytearray(data))
    packed, keys = {}, []
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            key = _quantization_key(tensor.quantization)
            if key is not None:
                keys.append(key)
                tensor.quantization = _SharedTable(
                    tensor.quantization, packed, key
                )
    if len(set(keys)) == len(keys):
        return data
    return bytes(utils.convert_object_to_bytearray(model))
