"""Does LiteRT's `CompiledModel` on XNNPACK answer the same input the
same way every time? A check that needs only LiteRT and NumPy, fit to
send upstream with a file that drifts.

    python tools/xnnpack_drift.py FILE [--flags 0x1] [--threads 1]
        [--tensorflow-first] [--calls 40] [--lengths 1,5,7,12]

runs FILE's first signature under `CompiledModel` with XNNPACK (`--flags`
replaces LiteRT's default flags; absent, LiteRT's defaults), on inputs
drawn with a fixed seed (integer inputs: ids from 2 to 299, one row of
each of `--lengths` where an axis is free; float inputs: normal
numbers), each input `--calls` times, in this order: every input once,
then again. It prints one JSON line: the settings, a SHA-256 digest of
the first pass's outputs (compare it across processes: run the command
several times, with and without `--tensorflow-first`, which imports
TensorFlow before LiteRT as a served process does), and every call that
answered an input differently from its first call (which input, which
output, the largest difference). No `keras_attn` import: the file and
this script are the whole reproduction.
"""

import argparse
import hashlib
import json
import sys

import numpy as np


def inputs(details, lengths, seed=0):
    """One feed a length: every input drawn with `seed`, a free axis
    (`-1` in its signature) at that length."""
    rng = np.random.default_rng(seed)
    feeds = []
    for length in lengths:
        feed = {}
        for name, spec in details.items():
            shape = [
                length if int(d) == -1 else int(d)
                for d in spec["shape_signature"]
            ]
            dtype = np.dtype(spec["dtype"])
            if np.issubdtype(dtype, np.integer):
                feed[name] = rng.integers(2, 300, shape).astype(dtype)
            else:
                feed[name] = rng.standard_normal(shape).astype(dtype)
        feeds.append(feed)
    return feeds


def free_axes(path, key):
    """Signature `key`'s inputs, with `shape_signature` (`-1`: a free
    axis), as LiteRT's Interpreter reads them from the file."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner(key)
    return runner.get_input_details()


def compiled_call(model, key, feed):
    """Signature `key` of a `CompiledModel` run on `feed` as LiteRT
    documents it: its inputs resized to the feed, buffers it creates
    itself, each output read at the shape it declares."""
    for name, value in feed.items():
        model.resize_input_tensor_by_name(key, name, list(value.shape))
    inputs = {n: model.create_input_buffer_by_name(key, n) for n in feed}
    for name, value in feed.items():
        inputs[name].write(value)
    declared = model.get_output_tensor_details(key)
    outputs = {n: model.create_output_buffer_by_name(key, n) for n in declared}
    model.run_by_name(key, inputs, outputs)
    out = {}
    for name, spec in declared.items():
        shape = [int(d) for d in spec["shape"]]
        value = outputs[name].read(int(np.prod(shape)), np.dtype(spec["dtype"]))
        out[name] = value.reshape(shape)
    return out


def run(path, flags=None, threads=1, calls=40, lengths=(1, 5, 7, 12)):
    from ai_edge_litert import compiled_model as litert
    from ai_edge_litert.cpu_kernel_mode import CpuKernelMode

    options = litert.Options(
        hardware_accelerators=litert.HardwareAccelerator.CPU,
        cpu_options=litert.CpuOptions(
            num_threads=threads,
            kernel_mode=CpuKernelMode.DELEGATE,
            xnnpack_flags=flags,
        ),
    )
    model = litert.CompiledModel.from_file(path, options=options)
    key = next(iter(model.get_signature_list()))
    feeds = inputs(free_axes(path, key), lengths)

    def call(feed):
        return compiled_call(model, key, feed)

    first = [call(feed) for feed in feeds]
    digest = hashlib.sha256()
    for out in first:
        for name in sorted(out):
            digest.update(np.ascontiguousarray(out[name]).tobytes())
    moved = []
    for turn in range(1, calls):
        for i, feed in enumerate(feeds):
            got = call(feed)
            for name, want in first[i].items():
                if not np.array_equal(got[name], want):
                    gap = np.max(np.abs(got[name].astype("float64") - want))
                    moved.append([turn, i, name, float(gap)])
    return digest.hexdigest()[:16], moved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--flags", type=lambda s: int(s, 0), default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tensorflow-first", action="store_true")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--lengths", default="1,5,7,12")
    args = parser.parse_args(argv)
    if args.tensorflow_first:
        import tensorflow  # noqa: F401

    lengths = [int(n) for n in args.lengths.split(",")]
    digest, moved = run(
        args.path, args.flags, args.threads, args.calls, lengths
    )
    import ai_edge_litert

    print(
        json.dumps(
            {
                "file": args.path,
                "ai_edge_litert": getattr(ai_edge_litert, "__version__", "?"),
                "xnnpack_flags": None
                if args.flags is None
                else hex(args.flags),
                "threads": args.threads,
                "tensorflow_first": args.tensorflow_first,
                "digest": digest,
                "calls_that_moved": moved,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
