"""Edge targets, measured: the ops each one runs, checked on a LiteRT
file, and the file run by each (TensorFlow Lite Micro, OpenVINO, LiteRT's
NPU compiler, the GPU delegate's analyzer). Measurement, not export: the
rewrites that make a file run there are `keras_attn.export.flatbuffer`'s.

What a target refuses was measured on tiny one-op graphs and on the
shipped files (docs/edge.md says how):

- `"tflm"`: TensorFlow Lite Micro (`tflite-micro`'s interpreter). It has
  no int64 kernels, no `SELECT` (v1), no `SELECT_V2` on int32 values, no
  `REDUCE_ANY`, and `FLOOR_MOD`, `FLOOR_DIV`, `REDUCE_MAX` and
  `REDUCE_MIN` on floats only.
- `"intel_npu"`: LiteRT's NPU compiler with the Intel OpenVINO plugin
  (`ai-edge-litert-sdk-intel`, Lunar Lake). It leaves `REDUCE_MIN` and
  `REDUCE_ANY` on the CPU, which cuts the graph into partitions.
- `"int_only"`: int8/int16/int32 integers only, the common ground of
  microcontrollers and NPUs (no int64 tensor anywhere).
"""

import numpy as np

from keras_attn.export.flatbuffer import (
    enum_names,
    litert_schema,
    read_model,
)

# target: ({refused op}, {(op, refused value dtype)}, int64 refused)
TARGETS = {
    "tflm": (
        {"SELECT", "REDUCE_ANY"},
        {
            ("SELECT_V2", "INT32"),
            ("FLOOR_MOD", "INT32"),
            ("FLOOR_DIV", "INT32"),
            ("REDUCE_MAX", "INT32"),
            ("REDUCE_MIN", "INT32"),
        },
        True,
    ),
    "intel_npu": ({"REDUCE_MIN", "REDUCE_ANY"}, set(), True),
    "int_only": (set(), set(), True),
}


def op_signatures(path_or_bytes):
    """`(op, value dtype)` pairs of a LiteRT model, sorted: the builtin
    op's name and the type of the input it computes on (the second input
    of `SELECT`/`SELECT_V2`, the first otherwise, its output for an op
    without inputs), e.g. `("GATHER", "INT8")`; and the dtypes of all
    its tensors."""
    schema, _ = litert_schema()
    model = read_model(path_or_bytes)
    ops = enum_names(schema.BuiltinOperator)
    types = enum_names(schema.TensorType)
    pairs, dtypes = set(), set()
    for graph in model.subgraphs:
        dtypes |= {types[t.type] for t in graph.tensors}
        for op in graph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = ops[max(code.builtinCode, code.deprecatedBuiltinCode)]
            inputs = [i for i in op.inputs if i >= 0] or list(op.outputs)
            value = inputs[1] if name in ("SELECT", "SELECT_V2") else inputs[0]
            pairs.add((name, types[graph.tensors[value].type]))
    return sorted(pairs), sorted(dtypes)


def edge_problems(path_or_bytes, target):
    """What `target` (a key of `TARGETS`) cannot run in the model: a list
    of short descriptions, empty when it runs everything."""
    if target not in TARGETS:
        raise ValueError(
            f"Expected target to be one of {sorted(TARGETS)}. "
            f"Received: target={target!r}"
        )
    refused, refused_pairs, no_int64 = TARGETS[target]
    pairs, dtypes = op_signatures(path_or_bytes)
    problems = [f"{op} on {t}" for op, t in pairs if op in refused]
    problems += [f"{op} on {t}" for op, t in pairs if (op, t) in refused_pairs]
    if no_int64 and "INT64" in dtypes:
        problems.append("int64 tensors")
    return problems


def check_edge_targets(path_or_bytes, targets):
    """Raise `ValueError` naming each op that one of `targets` cannot
    run."""
    model = read_model(path_or_bytes)  # read once for every target
    found = {t: edge_problems(model, t) for t in targets}
    found = {t: p for t, p in found.items() if p}
    if found:
        listed = "; ".join(f"{t}: {', '.join(p)}" for t, p in found.items())
        raise ValueError(
            f"The LiteRT model has ops its edge targets cannot run ({listed})"
        )


# -- TensorFlow Lite Micro. -------------------------------------------------


def micro_op_resolver(path_or_bytes):
    """The `tflite::MicroMutableOpResolver` calls a firmware needs to run
    the model, e.g. `["AddFullyConnected()", ...]`, sorted: one per
    builtin op in the file."""
    special = {"BATCH_MATMUL": "BatchMatMul"}
    names = sorted({op for op, _ in op_signatures(path_or_bytes)[0]})
    return [
        "Add"
        + special.get(n, "".join(w.capitalize() for w in n.split("_")))
        + "()"
        for n in names
    ]


def output_names(path_or_bytes, by_tensor_name=False):
    """The names of the model's outputs in the order of its graph's
    outputs (the order TFLM and LiteRT index them): the signature's keys
    where the file has a signature, else the tensors' names. With
    `by_tensor_name`: `{tensor name: that name}` instead."""
    model = read_model(path_or_bytes)
    graph = model.subgraphs[0]
    keys = {}
    for signature in model.signatureDefs or []:
        for entry in signature.outputs:
            keys[entry.tensorIndex] = _text(entry.name)
    tensors = [_text(graph.tensors[t].name) for t in graph.outputs]
    names = [
        keys.get(t, n) for t, n in zip(graph.outputs, tensors, strict=True)
    ]
    if by_tensor_name:
        return dict(zip(tensors, names, strict=True))
    return names


def _stack(names, rows):
    """`{name: rows' outputs concatenated}` from per-row output lists."""
    columns = zip(*rows, strict=True)
    return {
        name: np.concatenate(parts)
        for name, parts in zip(names, columns, strict=True)
    }


def _text(name):
    return name.decode() if isinstance(name, bytes) else name


class MicroModel:
    """A LiteRT file run by TensorFlow Lite Micro (`tflite-micro`'s
    Python interpreter, with its recording allocator)."""

    def __init__(self, path):
        from tflite_micro.python.tflite_micro import runtime

        self.path = path
        self.interpreter = runtime.Interpreter.from_file(path)
        self.output_names = output_names(path)

    def run(self, ids):
        """The outputs on `ids`, one row at a time (microcontroller models
        take a batch of 1), stacked: `{name: array}`, named by the
        model's signature."""
        rows = []
        for row in np.asarray(ids):
            self.interpreter.set_input(row[None], 0)
            self.interpreter.invoke()
            count = len(self.output_names)
            rows.append([self.interpreter.get_output(k) for k in range(count)])
        return _stack(self.output_names, rows)

    def arena_bytes(self):
        """The tensor arena TFLM's recording allocator reports (what a
        firmware must reserve), after at least one `run`."""
        import re

        text = _c_stdout(self.interpreter.print_allocations)
        found = re.search(r"Arena allocation total (\d+) bytes", text)
        if found is None:
            raise RuntimeError(
                "TFLM's recording allocator printed no arena total: "
                f"{text[:200]!r}"
            )
        return int(found.group(1))


def _c_stdout(function):
    """What `function` prints, from C (to file descriptors 1 and 2; TFLM's
    `MicroPrintf` writes to the error stream) or from Python (to
    `sys.stdout`/`sys.stderr`, whatever they are, e.g. captured)."""
    import contextlib
    import ctypes
    import io
    import os
    import sys
    import tempfile

    libc = ctypes.CDLL(None)
    python = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as log:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        libc.fflush(None)
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            with (
                contextlib.redirect_stdout(python),
                contextlib.redirect_stderr(python),
            ):
                function()
            libc.fflush(None)
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
        log.seek(0)
        return log.read().decode(errors="replace") + python.getvalue()


# -- OpenVINO and LiteRT's NPU compiler. -------------------------------------


def openvino_run(path, ids):
    """OpenVINO's CPU outputs for `ids` (it reads the `.tflite` itself),
    one row at a time: `{name: array}` as `MicroModel.run`."""
    import openvino

    compiled = openvino.Core().compile_model(path, "CPU")
    by_tensor = output_names(path, by_tensor_name=True)
    names = []
    for out in compiled.outputs:
        (name,) = [by_tensor[n] for n in out.get_names() if n in by_tensor]
        names.append(name)
    rows = []
    for row in np.asarray(ids):
        result = compiled([row[None]])
        rows.append([result[out] for out in compiled.outputs])
    return _stack(names, rows)


def npu_partitions(path, soc_model="LNL"):
    """What LiteRT's NPU compiler does with the model, with the Intel
    OpenVINO plugin (`ai-edge-litert-sdk-intel`): `{"selected": n,
    "total": m, "partitions": k, "unsupported": [op names]}`, read from
    the plugin's log. The compile itself stops there without Intel's NPU
    compiler library, which the plugin's wheel does not bring."""
    import os
    import re
    import tempfile

    from ai_edge_litert.aot import aot_compile
    from ai_edge_litert.aot.vendors.intel_openvino import target

    schema, _ = litert_schema()
    ops = enum_names(schema.BuiltinOperator)
    with tempfile.TemporaryDirectory() as scratch:
        result = aot_compile.aot_compile(
            path,
            output_dir=scratch,
            target=target.Target(target.SocModel(soc_model)),
            keep_going=True,
        )
        log = ""
        for _, message in result.failed_backends:
            found = re.search(r"See (\S+\.error)", str(message))
            if found and os.path.isfile(found.group(1)):
                with open(found.group(1)) as f:
                    log += f.read()
                os.remove(found.group(1))  # the plugin's, in the temp dir
    found = re.search(
        r"selected (\d+) ops, from a total of (\d+) ops\. resulted in "
        r"(\d+) partitions",
        log,
    )
    if found is None:
        raise RuntimeError(
            f"No partition report in the NPU plugin's log: {log[-300:]!r}"
        )
    types = sorted(
        {int(t) for t in re.findall(r"op type (\d+) is not supported", log)}
    )
    return {
        "selected": int(found.group(1)),
        "total": int(found.group(2)),
        "partitions": int(found.group(3)),
        "unsupported": [ops.get(t, str(t)) for t in types],
    }


def gpu_delegate_compatible(path):
    """TensorFlow's analyzer's verdict on LiteRT's GPU delegate
    (`tf.lite.experimental.Analyzer`, `gpu_compatibility=True`)."""
    import tensorflow as tf

    analyze = tf.lite.experimental.Analyzer.analyze
    text = _c_stdout(lambda: analyze(model_path=path, gpu_compatibility=True))
    return "looks compatible with GPU delegate" in text
