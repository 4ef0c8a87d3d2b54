"""Which CPU kernels run a LiteRT file: LiteRT's builtin kernels, or
XNNPACK with the flags given, chosen by what the file computes in
(`file_kind`) so that the same input gets the same numbers every time
(`cpu_settings`; docs/edge.md, "Threads and determinism")."""

from keras_attn_runtime.artifact import vector

# The CPU's kernels: `"auto"` (the default) chooses, for the kind of file,
# the fastest settings that answer the same for the same input every time
# (`cpu_settings`); `"builtin"` is LiteRT's own kernels, the same numbers
# every time; `"xnnpack"` is XNNPACK with LiteRT's default flags, faster,
# but on dynamic-range int8 files its answers moved from one process or
# call to the next (docs/edge.md, "Threads and determinism").
CPU_KERNELS = ("auto", "builtin", "xnnpack")
# XNNPACK's flags (its delegate's header): signed int8 operators, and
# "slow consistent arithmetic" (no faster code path whose numbers differ
# from another path's in the same build). Given, they replace LiteRT's
# default flags.
XNNPACK_QS8, XNNPACK_CONSISTENT_ARITHMETIC = 0x1, 0x200
FULL_INTEGER, DYNAMIC_RANGE, FLOAT = "full_integer", "dynamic_range", "float"
# Operators whose second input is a weight: float activations with integer
# weights there make a dynamic-range (hybrid) file.
_WEIGHTED = {
    "FULLY_CONNECTED",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "BATCH_MATMUL",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "SVDF",
    "EMBEDDING_LOOKUP",
    "TRANSPOSE_CONV",
}
_INTEGER_TYPES = {3, 7, 9, 17, 18}  # uint8, int16, int8, int4, uint4
_FLOAT_TYPES = {0, 1, 10, 16}  # float32, float16, float64, bfloat16


def file_kind(model):
    """What a verified model object (`artifact.verify_model`) computes in:
    `"dynamic_range"` where a weighted operator (a fully connected layer,
    a convolution, an LSTM...) takes float activations and integer
    weights; else `"full_integer"` where an operator's first input is an
    integer tensor with quantization parameters; else `"float"`."""
    from ai_edge_litert import schema_py_generated as schema

    names = {
        v: k for k, v in vars(schema.BuiltinOperator).items() if k.isupper()
    }
    codes = [
        names.get(max(c.builtinCode, c.deprecatedBuiltinCode), "")
        for c in vector(model.operatorCodes)
    ]
    quantized = False
    for graph in vector(model.subgraphs):
        tensors = graph.tensors
        for op in vector(graph.operators):
            inputs = [tensors[i] for i in vector(op.inputs) if i >= 0]
            if not inputs:
                continue
            first = inputs[0]
            if codes[op.opcodeIndex] in _WEIGHTED and (
                first.type in _FLOAT_TYPES
                and any(t.type in _INTEGER_TYPES for t in inputs[1:])
            ):
                return DYNAMIC_RANGE
            scales = first.quantization and first.quantization.scale
            if first.type in _INTEGER_TYPES and scales is not None:
                quantized = quantized or len(scales) > 0
    return FULL_INTEGER if quantized else FLOAT


def prefers_interpreter(cpu_kernels, kind):
    """Whether `cpu_kernels` runs a file of `kind` on the CPU under LiteRT's
    Interpreter rather than `CompiledModel`: `"auto"` does for a
    dynamic-range file. XNNPACK's speed on such a file comes from its
    dynamically quantized operators; under `CompiledModel` they once
    answered differently from one process or call to the next, under the
    Interpreter (XNNPACK's defaults) they never have, and they run there
    at `CompiledModel`'s XNNPACK speed (docs/edge.md, "Threads and
    determinism")."""
    return cpu_kernels == "auto" and kind == DYNAMIC_RANGE


def cpu_settings(cpu_kernels, kind, interpreter=False):
    """`(kernels, xnnpack_flags or None)` that `cpu_kernels` means for a
    file of `kind` (`file_kind`), under the Interpreter or not.

    `"auto"` chooses, of the settings that gave one digest over
    processes, TensorFlow imported first or not, threads and concurrent
    callers (`benchmarks/xnnpack_determinism.py`), the fastest. Under the
    Interpreter, which takes no XNNPACK flags (where `"auto"` runs a
    dynamic-range file, `prefers_interpreter`): XNNPACK with its default
    flags. Under `CompiledModel`: XNNPACK's signed int8 operators with
    consistent arithmetic for a full-integer file (integer arithmetic,
    at XNNPACK's speed), LiteRT's builtin kernels otherwise (a
    dynamic-range file's fast path in XNNPACK quantizes its activations
    on the fly, and under `CompiledModel` that path drifted: docs/edge.md;
    a float file's choice is not measured yet)."""
    check_cpu_kernels(cpu_kernels)
    if cpu_kernels != "auto":
        return cpu_kernels, None
    if interpreter:
        return "xnnpack", None
    if kind == FULL_INTEGER:
        return "xnnpack", XNNPACK_QS8 | XNNPACK_CONSISTENT_ARITHMETIC
    return "builtin", None


def check_cpu_kernels(cpu_kernels):
    if cpu_kernels not in CPU_KERNELS:
        raise ValueError(
            f"Expected cpu_kernels to be one of {CPU_KERNELS}. "
            f"Received: cpu_kernels={cpu_kernels!r}"
        )
