"""Keras's own unit tests for its attention layers, run on ours.

`python -m benchmarks.keras_tests_recount` runs the test modules that ship
inside the installed Keras wheel (`keras/src/layers/attention/*_test.py`)
with `keras.src.layers.MultiHeadAttention` replaced by
`MultiHeadPositional(position=None, feed_forward=None)`,
`GroupedQueryAttention` by `MultiHeadPositional(num_key_value_heads=...)`
(Keras's argument names mapped onto ours) and
`keras.src.layers.Attention` by our `Attention` (which takes Keras's
`score_mode`). Nothing is
copied from Keras: the tests are read from the installed package and run
as they are. It prints the pass/fail counts per module and the failing
test names, for the record in BENCHMARKS.md; failures are expected where
our documented choices differ (a query row with no key to attend to gives
zeros, not Keras's uniform weights) or where a feature is missing.
"""

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

MODULES = [
    "multi_head_attention_test.py",
    "grouped_query_attention_test.py",
    "attention_test.py",
]
NAME = "keras_tests_recount.json"

PLUGIN = """
import keras
import keras.src.layers as klayers
import keras_attn


@keras.saving.register_keras_serializable("recount")
class MultiHeadAttention(keras_attn.MultiHeadPositional):
    def __init__(self, *args, position=None, feed_forward=None, **kwargs):
        super().__init__(
            *args, position=position, feed_forward=feed_forward, **kwargs
        )


@keras.saving.register_keras_serializable("recount")
class GroupedQueryAttention(keras_attn.MultiHeadPositional):
    # Keras's GQA arguments on MultiHeadPositional(num_key_value_heads=),
    # and back from its config.

    def __init__(
        self,
        head_dim=None,
        num_query_heads=None,
        num_key_value_heads=None,
        num_heads=None,
        key_dim=None,
        position=None,
        feed_forward=None,
        **kwargs,
    ):
        super().__init__(
            num_heads or num_query_heads,
            key_dim or head_dim,
            num_key_value_heads=num_key_value_heads,
            position=position,
            feed_forward=feed_forward,
            **kwargs,
        )


@keras.saving.register_keras_serializable("recount")
class Attention(keras_attn.Attention):  # takes Keras's `score_mode` itself
    pass


klayers.MultiHeadAttention = MultiHeadAttention
klayers.GroupedQueryAttention = GroupedQueryAttention
klayers.GroupQueryAttention = GroupedQueryAttention
klayers.Attention = Attention
"""


def run(module, folder, tmp):
    import keras

    path = os.path.join(
        os.path.dirname(keras.__file__), "src", "layers", "attention", module
    )
    with open(os.path.join(tmp, "recount_plugin.py"), "w") as f:
        f.write(PLUGIN)
    report = os.path.join(tmp, module + ".xml")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "recount_plugin",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            path,
        ],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([tmp, folder])},
        capture_output=True,
        text=True,
    )
    cases = ET.parse(report).getroot().iter("testcase")
    outcome = {}
    for case in cases:
        name = case.get("name")
        if case.find("skipped") is not None:
            outcome[name] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcome[name] = "failed"
        else:
            outcome[name] = "passed"
    return outcome


def main(argv=None):
    import tempfile

    import keras

    from benchmarks import results

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(results.RESULTS, NAME))
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for module in MODULES:
            outcome = run(module, root, tmp)
            counts = {
                k: list(outcome.values()).count(k)
                for k in ("passed", "failed", "skipped")
            }
            failed = sorted(n for n, r in outcome.items() if r == "failed")
            rows.append({"module": module, **counts, "failed_tests": failed})
            print(f"{module}: {counts}")
            for name in failed:
                print(f"  failed: {name}")
    record = results.meta("keras_tests_recount", argv or sys.argv[1:])
    record["keras_tests_from"] = f"keras {keras.__version__} wheel"
    print("wrote", results.save(args.out, record, rows))


if __name__ == "__main__":
    main()
