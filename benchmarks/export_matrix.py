"""Each layer configuration through each export path: error and op types.

`python -m benchmarks.export_matrix` prints two Markdown tables for the
models of `tests/export/test_export_matrix.py`: the largest error relative
to the largest output for Keras's LiteRT and ONNX exports and for our float32,
float16, dynamic-range and full-integer int8 LiteRT files (with the int8
file's size against float32), and the op types each layer configuration
produces in LiteRT and ONNX. docs/export.md keeps a copy of the tables.
"""

import collections
import tempfile

import numpy as np

from keras_attn import export
from tests.export import test_export_matrix as matrix


def relative_error(got_by_shape, want):
    return max(
        np.abs(got_by_shape[tuple(w.shape[1:])] - w).max()
        / max(np.abs(w).max(), 1e-6)
        for w in want
    )


def onnx_ops(path):
    import onnx

    ops = collections.Counter(n.op_type for n in onnx.load(path).graph.node)
    return sorted(ops)


def main():
    import onnxruntime

    calibration = np.random.default_rng(1).integers(1, matrix.V, (32, matrix.T))
    calibration = calibration.astype("int32")
    calibration[::2, 6:] = 0
    errors, ops = [], []
    for name in sorted(matrix.BUILDERS):
        model = matrix.BUILDERS[name]()
        want = matrix.keras_outputs(model, matrix.IDS)
        row = [name]
        with tempfile.TemporaryDirectory() as tmp:
            lite, onnx_path = f"{tmp}/m.tflite", f"{tmp}/m.onnx"
            model.export(lite, format="litert", verbose=False)
            row.append(
                relative_error(matrix.run_tflite(lite, matrix.IDS), want)
            )
            model.export(onnx_path, format="onnx", verbose=False)
            session = onnxruntime.InferenceSession(onnx_path)
            got = session.run(None, {session.get_inputs()[0].name: matrix.IDS})
            row.append(relative_error({g.shape[1:]: g for g in got}, want))
            ops.append(
                (name, export.tflite_op_names(lite), onnx_ops(onnx_path))
            )
        sizes = {}
        for quantize in ("none", "float16", "dynamic", "int8"):
            data = export.convert_tflite(
                model, quantize=quantize, representative_data=calibration
            )
            sizes[quantize] = len(data)
            row.append(
                relative_error(matrix.run_tflite(data, matrix.IDS), want)
            )
        row.append(sizes["int8"] / sizes["none"])
        errors.append(row)
        print(name, " ".join(f"{v:.2e}" for v in row[1:]), flush=True)
    columns = ["Keras LiteRT", "Keras ONNX", "float32", "float16"]
    columns += ["dynamic int8", "full int8", "int8 size / float32"]
    print(f"\n| model | {' | '.join(columns)} |")
    print("|---|---|---|---|---|---|---|---|")
    for name, *values in errors:
        cells = " | ".join(f"{v:.1e}" for v in values[:-1])
        print(f"| {name} | {cells} | {values[-1]:.2f} |")
    print("\n| model | LiteRT ops (Keras export) | ONNX ops |\n|---|---|---|")
    for name, lite_ops, onnx_types in ops:
        print(f"| {name} | {', '.join(lite_ops)} | {', '.join(onnx_types)} |")


if __name__ == "__main__":
    main()
