"""Running a LiteRT file: LiteRT's `CompiledModel` on the CPU, a GPU or
an NPU, with the buffers it creates itself; its classic `Interpreter`
for the files `CompiledModel` cannot run, each named, and by default on
the CPU for a dynamic-range file (`keras_attn_runtime.kernels.
prefers_interpreter`: XNNPACK's speed, the same numbers every time).

Both engines are called the same way: `LiteRTModel.runner(key)` is a
callable taking the signature's inputs as NumPy arrays by name and
returning its outputs by name, with `get_input_details()` (shapes, the
signature's `-1` axes, dtypes) read from the file itself.
"""

from contextlib import nullcontext

import numpy as np

from keras_attn_runtime import native_logs
from keras_attn_runtime.artifact import text, vector
from keras_attn_runtime.kernels import (
    check_cpu_kernels,
    cpu_settings,
    file_kind,
    prefers_interpreter,
)

ACCELERATORS = ("cpu", "gpu", "npu")

# LiteRT's tensor types (schema `TensorType`) as NumPy dtypes.
_DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float64",
}


def signature_tensors(model):
    """`{signature key: {"inputs": {name: spec}, "outputs": {name: spec}}}`
    of a verified model object (`artifact.verify_model`), each spec
    `{"shape", "shape_signature", "dtype"}` as the file declares them
    (int32 arrays, as LiteRT's Interpreter gives them; `-1` in
    `shape_signature`: a size known only at run time)."""
    out = {}
    for sig in vector(model.signatureDefs):
        tensors = model.subgraphs[sig.subgraphIndex].tensors
        entry = {}
        for side, items in (("inputs", sig.inputs), ("outputs", sig.outputs)):
            entry[side] = {}
            for item in vector(items):
                tensor = tensors[item.tensorIndex]
                shape = [int(d) for d in vector(tensor.shape)]
                declared = [int(d) for d in vector(tensor.shapeSignature)]
                entry[side][text(item.name)] = {
                    "shape": np.array(shape, "int32"),
                    "shape_signature": np.array(declared or shape, "int32"),
                    "dtype": _DTYPES.get(tensor.type, f"type {tensor.type}"),
                    "index": int(item.tensorIndex),
                }
        out[text(sig.signatureKey)] = entry
    return out


def why_not_compiled(signatures):
    """Why `CompiledModel` cannot run a file with these `signatures`
    (`signature_tensors`), or `None` when it can.

    `CompiledModel` allocates each output from its declared shape before
    the run. An output with a size computed during the run (a `-1` axis
    other than a batch axis that follows an input's) would be written
    past its buffer: keras_attn's files before 0.3 declared an attention
    map's or an alignment's width that way.
    """
    for key, entry in signatures.items():
        free = {
            d
            for spec in entry["inputs"].values()
            for d, n in enumerate(spec["shape_signature"])
            if n == -1
        }
        for name, spec in entry["outputs"].items():
            for d, n in enumerate(spec["shape_signature"]):
                if n == -1 and not (d == 0 and 0 in free):
                    return (
                        f"output {name!r} of signature {key!r} has a size "
                        f"known only at run time (axis {d}; declared "
                        f"{spec['shape_signature'].tolist()})"
                    )
    return None


def check_accelerator(accelerator):
    if accelerator not in ACCELERATORS:
        raise ValueError(
            f"Expected accelerator to be one of {ACCELERATORS}. "
            f"Received: accelerator={accelerator!r}"
        )


def check_num_threads(num_threads):
    if num_threads is not None and (
        isinstance(num_threads, bool)
        or not isinstance(num_threads, int)
        or num_threads < 1
    ):
        raise ValueError(
            "Expected num_threads to be None or a positive integer. "
            f"Received: num_threads={num_threads!r}"
        )


class LiteRTModel:
    """A LiteRT file ready to run (see the module's docstring).

    Args:
        data: the file's bytes.
        model: its verified model object (`artifact.load_verified`).
        model_path: the file's path, for messages.
        num_threads: CPU threads (`None`: LiteRT's choice). Defaults to
            `1`.
        accelerator: `"cpu"` (the default), `"gpu"` or `"npu"`. An
            accelerator runs what it can and the CPU the rest:
            `fully_accelerated` says whether anything fell back. Where
            LiteRT finds no such device, a `ValueError` names it.
        cpu_kernels: the kernels the CPU runs: `"auto"` (the default),
            for the file's kind the fastest settings that give the same
            numbers for the same input whatever the process, the threads,
            the load or the callers (`cpu_settings`: XNNPACK with
            consistent arithmetic for a full-integer file; under the
            Interpreter, where a dynamic-range file runs by default,
            XNNPACK's defaults; LiteRT's builtin kernels otherwise);
            `"builtin"`, LiteRT's own kernels, always; or `"xnnpack"`,
            XNNPACK with LiteRT's default flags, which under
            `CompiledModel` once answered dynamic-range int8 files
            differently from one process or call to the next
            (docs/edge.md, "Threads and determinism").
        interpreter: `True` runs the file under the `Interpreter` even
            where `CompiledModel` can (the CPU only): its calls let other
            Python threads run meanwhile, so that several copies of a
            file work on several cores (`keras_attn_runtime.batching`);
            on the builtin kernels, the same numbers as `CompiledModel`'s.
            `False` runs it under `CompiledModel` where it can. Defaults
            to `None`: the Interpreter for a dynamic-range file on the
            CPU with `cpu_kernels="auto"` (`prefers_interpreter`),
            `CompiledModel` otherwise.

    Attributes:
        kind: `"full_integer"`, `"dynamic_range"` or `"float"`
            (`keras_attn_runtime.kernels.file_kind`).
        cpu_settings: the CPU settings used: `"builtin"`, `"xnnpack"`
            (LiteRT's default flags) or `"xnnpack:0x201"` (the flags
            given); on another accelerator, for what falls back.
        engine: `"compiled_model"`, or `"interpreter"` for a file that
            `CompiledModel` cannot run (`interpreter_reason` says why),
            for a dynamic-range file by default, or when asked.
        fully_accelerated: `CompiledModel.is_fully_accelerated()`: every
            op on the accelerator (always `True` on the CPU, `False`
            under the Interpreter).
        signatures: `signature_tensors` of the file.
    """

    def __init__(
        self,
        data,
        model,
        model_path,
        num_threads=1,
        accelerator="cpu",
        cpu_kernels="auto",
        interpreter=None,
    ):
        check_accelerator(accelerator)
        check_num_threads(num_threads)
        check_cpu_kernels(cpu_kernels)
        if interpreter and accelerator != "cpu":
            raise ValueError(
                "The Interpreter runs on the CPU only. Received: "
                f"interpreter=True and accelerator={accelerator!r}"
            )
        self.model_path = model_path
        self.accelerator = accelerator
        self.num_threads = num_threads
        self.cpu_kernels = cpu_kernels
        self.signatures = signature_tensors(model)
        self.kind = file_kind(model)
        self.interpreter_reason = why_not_compiled(self.signatures)
        if self.interpreter_reason is not None and accelerator != "cpu":
            raise ValueError(
                f"accelerator={accelerator!r} needs LiteRT's CompiledModel, "
                f"which cannot run {model_path!r}: "
                f"{self.interpreter_reason}. Export it again with this "
                "keras_attn, or run it with accelerator='cpu'."
            )
        if interpreter is None:  # the Interpreter runs on the CPU only
            interpreter = accelerator == "cpu" and prefers_interpreter(
                cpu_kernels, self.kind
            )
        compiled = self.interpreter_reason is None and not interpreter
        kernels, flags = cpu_settings(cpu_kernels, self.kind, not compiled)
        self.cpu_settings = (
            kernels if flags is None else f"{kernels}:{flags:#x}"
        )
        if compiled:
            self.engine = "compiled_model"
            self._compiled = _compile(
                data, model_path, num_threads, accelerator, kernels, flags
            )
            self.fully_accelerated = accelerator == "cpu" or bool(
                self._compiled.is_fully_accelerated()
            )
        else:
            self.engine = "interpreter"
            self._interpreter = _interpreter(
                data, model_path, num_threads, kernels
            )
            self.fully_accelerated = False

    def __del__(self):
        _release(self)

    def runner(self, key):
        """The callable that runs signature `key`."""
        if key not in self.signatures:
            raise ValueError(
                f"Expected a signature of {sorted(self.signatures)}. "
                f"Received: {key!r} for {self.model_path!r}"
            )
        if self.engine == "interpreter":
            return _InterpreterRunner(
                self._interpreter.get_signature_runner(key),
                self.signatures[key],
            )
        return _CompiledRunner(self._compiled, key, self.signatures[key])


def _release(owner):
    """Drop `owner`'s `CompiledModel` with LiteRT's teardown log (its
    accelerators destroyed) captured: the model and its runners each call
    this from `__del__`, so that the last one to go is quiet."""
    compiled = owner.__dict__.pop("_compiled", None)
    if compiled is None:
        return
    try:
        with native_logs.captured():
            del compiled
    except Exception:  # noqa: BLE001, S110 (never raise from __del__)
        pass


def _compile(
    data, model_path, num_threads, accelerator, cpu_kernels, flags=None
):
    from ai_edge_litert import compiled_model as litert
    from ai_edge_litert.cpu_kernel_mode import CpuKernelMode

    hardware = litert.HardwareAccelerator.CPU
    if accelerator != "cpu":
        hardware |= getattr(litert.HardwareAccelerator, accelerator.upper())
    options = litert.Options(
        hardware_accelerators=hardware,
        cpu_options=litert.CpuOptions(
            num_threads=num_threads or 0,
            kernel_mode=CpuKernelMode.BUILTIN
            if cpu_kernels == "builtin"
            else CpuKernelMode.DELEGATE,
            xnnpack_flags=flags,
        ),
    )
    try:
        with native_logs.captured():
            compiled = litert.CompiledModel.from_buffer(data, options=options)
        native_logs.quiet_at_exit()
        return compiled
    except (RuntimeError, ValueError) as err:
        detail = " ".join(str(err).split())[:300]
        if accelerator != "cpu":
            raise ValueError(
                f"accelerator={accelerator!r}: LiteRT could not use a "
                f"{accelerator.upper()} for {model_path!r} (none found, or "
                f"its plugin failed: {detail}). Use accelerator='cpu'."
            ) from None
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} ({detail})"
        ) from None


def _interpreter(data, model_path, num_threads=1, cpu_kernels="builtin"):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = (
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        if cpu_kernels == "builtin"
        else OpResolverType.AUTO
    )
    try:
        with native_logs.captured():
            return Interpreter(
                model_content=data,
                num_threads=num_threads,
                experimental_op_resolver_type=resolver,
            )
    except (ValueError, RuntimeError) as err:
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} ({err})"
        ) from err


def _checked_inputs(spec, feed):
    """`feed` as contiguous arrays of the signature's dtypes and ranks,
    their fixed axes at the declared sizes; a `ValueError` naming the
    input otherwise."""
    if set(feed) != set(spec):
        raise ValueError(
            f"Expected the inputs {sorted(spec)}. Received: {sorted(feed)}"
        )
    arrays = {}
    for name, value in feed.items():
        want = spec[name]
        # `ascontiguousarray` gives a scalar one axis: scalars as they are.
        array = np.asarray(value, order="C")
        if array.dtype != np.dtype(want["dtype"]):
            raise ValueError(
                f"Expected input {name!r} of dtype {want['dtype']}. "
                f"Received: {array.dtype}"
            )
        declared = [int(d) for d in want["shape_signature"]]
        if array.ndim != len(declared) or any(
            n not in (-1, m) for n, m in zip(declared, array.shape, strict=True)
        ):
            raise ValueError(
                f"Expected input {name!r} of shape {list(declared)} (-1: "
                f"any size). Received: shape {list(array.shape)}"
            )
        arrays[name] = array
    return arrays


class _InterpreterRunner:
    def __init__(self, runner, spec):
        self._runner = runner
        self._spec = spec
        self._first_run = True

    def get_input_details(self):
        return self._spec["inputs"]

    def get_output_details(self):
        return self._spec["outputs"]

    def __call__(self, **feed):
        arrays = _checked_inputs(self._spec["inputs"], feed)
        # The first run applies XNNPACK's delegate, which logs.
        quiet = native_logs.captured() if self._first_run else nullcontext()
        with quiet:
            out = self._runner(**arrays)
        self._first_run = False
        # The runner's outputs are its own copies already (a later call
        # does not write over them): no second copy.
        return {k: np.asarray(v) for k, v in out.items()}


def _shared_outputs(spec, out):
    """`out` with every output of `spec`: where the converter merged two
    outputs into one tensor (equal computations), `CompiledModel` names
    it once; the other names get its value too."""
    index = {name: entry["index"] for name, entry in spec.items()}
    for name in spec:
        if name not in out:
            same = [n for n in out if index.get(n) == index[name]]
            if same:
                out[name] = out[same[0]].copy()
    return out


class _CompiledRunner:
    """One signature under `CompiledModel`: inputs resized when their
    shapes change, and buffers created by `CompiledModel` for each new
    set of shapes (reused while the shapes stay)."""

    def __init__(self, compiled, key, spec):
        self._compiled = compiled
        self._key = key
        self._spec = spec
        self._shapes = {
            n: tuple(int(d) for d in s["shape"])
            for n, s in spec["inputs"].items()
        }
        self._buffers = None
        self._first_run = True

    def __del__(self):
        self.__dict__.pop("_buffers", None)  # before the model they belong to
        _release(self)

    def get_input_details(self):
        return self._spec["inputs"]

    def get_output_details(self):
        return self._spec["outputs"]

    def _run(self, arrays):
        self._prepare(arrays)
        inputs, outputs, shapes = self._buffers
        for name, array in arrays.items():
            inputs[name].write(array)
        self._compiled.run_by_name(self._key, inputs, outputs)
        return outputs, shapes

    def _prepare(self, arrays):
        changed = False
        for name, array in arrays.items():
            if tuple(array.shape) != tuple(self._shapes[name]):
                self._compiled.resize_input_tensor_by_name(
                    self._key, name, list(array.shape)
                )
                self._shapes[name] = tuple(array.shape)
                changed = True
        if changed or self._buffers is None:
            compiled, key = self._compiled, self._key
            inputs = {
                n: compiled.create_input_buffer_by_name(key, n) for n in arrays
            }
            details = compiled.get_output_tensor_details(key)
            outputs = {
                n: compiled.create_output_buffer_by_name(key, n)
                for n in details
            }
            shapes = {
                n: (tuple(int(d) for d in v["shape"]), np.dtype(v["dtype"]))
                for n, v in details.items()
            }
            self._check_batch(arrays, shapes)
            self._buffers = inputs, outputs, shapes

    def _check_batch(self, arrays, shapes):
        """A `ValueError` where `CompiledModel` sized an output declared
        with a free batch axis at another batch than its inputs' (an op
        sized by a value on the way): its buffer would be too small."""
        free = [
            a.shape[0]
            for n, a in arrays.items()
            if a.ndim and self._spec["inputs"][n]["shape_signature"][0] == -1
        ]
        for name, (shape, _) in shapes.items():
            declared = self._spec["outputs"][name]["shape_signature"]
            if free and len(declared) and declared[0] == -1:
                if shape[0] != free[0]:
                    raise ValueError(
                        f"LiteRT's CompiledModel sized output {name!r} of "
                        f"signature {self._key!r} for a batch of {shape[0]} "
                        f"where the inputs hold {free[0]}: export the file "
                        "with a fixed batch size."
                    )

    def __call__(self, **feed):
        arrays = _checked_inputs(self._spec["inputs"], feed)
        # The first run starts LiteRT's environment, which logs.
        quiet = native_logs.captured() if self._first_run else nullcontext()
        with quiet:
            outputs, shapes = self._run(arrays)
        self._first_run = False
        out = {
            name: outputs[name].read(int(np.prod(shape)), dtype).reshape(shape)
            for name, (shape, dtype) in shapes.items()
        }
        return _shared_outputs(self._spec["outputs"], out)
