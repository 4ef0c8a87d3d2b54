"""`tools/xnnpack_drift.py`, the reproduction of XNNPACK's drift under
`CompiledModel` that docs/edge.md gives: LiteRT and NumPy only, its
inputs sized by the file's free axes, a digest that tells two code
paths apart, and the calls that moved (none here)."""

import importlib.util
import os

import numpy as np
import pytest

from tests.paths import ROOT

pytest.importorskip("ai_edge_litert")

TOOL = os.path.join(ROOT, "tools", "xnnpack_drift.py")
DYNAMIC = os.path.join(
    ROOT, "saved_models", "imdb_ssa", "model_dynamic_int8.tflite"
)


@pytest.fixture(scope="module")
def drift():
    from keras_attn_runtime import native_logs

    native_logs.quiet_at_exit()  # LiteRT's teardown lines
    spec = importlib.util.spec_from_file_location("xnnpack_drift", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_inputs_take_each_length_where_an_axis_is_free(drift):
    details = drift.free_axes(DYNAMIC, "serving_default")
    feeds = drift.inputs(details, [1, 7])
    assert [f["tokens"].shape for f in feeds] == [(1, 1), (1, 7)]
    assert all(f["tokens"].dtype == np.int32 for f in feeds)
    again = drift.inputs(details, [1, 7])  # a fixed seed
    assert all(
        np.array_equal(a["tokens"], b["tokens"])
        for a, b in zip(feeds, again, strict=True)
    )


def test_the_digest_tells_two_code_paths_apart(drift):
    default, moved = drift.run(DYNAMIC, None, calls=3, lengths=(5, 9))
    consistent, _ = drift.run(DYNAMIC, 0x203, calls=2, lengths=(5, 9))
    assert moved == []
    assert len(default) == 16 and default != consistent
    again, _ = drift.run(DYNAMIC, None, calls=2, lengths=(5, 9))
    assert again == default


def test_the_tool_needs_no_keras_attn():
    from tests.processes import run_python

    done = run_python(f"""
        import runpy, sys
        sys.argv = [{TOOL!r}, {DYNAMIC!r}, "--calls", "2"]
        try:
            runpy.run_path({TOOL!r}, run_name="__main__")
        except SystemExit:
            pass
        ours = [m for m in sys.modules if m.startswith("keras")]
        assert not ours, ours
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"calls_that_moved": []' in done.stdout
