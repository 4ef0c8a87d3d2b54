"""The SavedModel allowlist (`keras_attn.loading.trust`): crafted graphs
from the third trust round, each refused, and a bounded fuzz test inserting
random ops from TensorFlow's registry. Graphs are edited as protocol
buffers, never loaded: nothing here runs a crafted model."""

import glob
import os
import shutil

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from keras_attn.loading import trust  # noqa: E402
from keras_attn.loading.allowed_ops import ALLOWED_OPS  # noqa: E402

SHIPPED = sorted(glob.glob("saved_models/*/saved_model"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A small TF2 SavedModel with a variable and a serving signature."""
    path = str(tmp_path_factory.mktemp("plain") / "model")
    module = tf.Module()
    module.w = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(x):
        return {"y": x * module.w}

    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    return path


def copy_with(plain, tmp_path, edit):
    """A copy of `plain` whose `saved_model.pb` went through `edit`."""
    path = str(tmp_path / "edited")
    shutil.copytree(plain, path)
    saved = trust.read_saved_model(path)
    edit(saved.meta_graphs[0])
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(saved.SerializeToString())
    return path


def serving_function(meta_graph):
    functions = {
        f.signature.name: f for f in meta_graph.graph_def.library.function
    }
    served = trust._served_functions(meta_graph, functions)
    name = next(n for n in sorted(served) if "serve" in n)
    return functions[name]


def saver_function(meta_graph):
    functions = {
        f.signature.name: f for f in meta_graph.graph_def.library.function
    }
    served = trust._served_functions(meta_graph, functions)
    return next(
        f
        for name, f in sorted(functions.items())
        if name not in served and any(n.op == "SaveV2" for n in f.node_def)
    )


def add_node(container, op):
    node = (
        container.node_def.add()
        if hasattr(container, "node_def")
        else (container.node.add())
    )
    node.name = f"injected_{op}"
    node.op = op
    return node


@pytest.mark.parametrize("path", SHIPPED)
def test_every_shipped_saved_model_passes(path):
    assert trust.unsafe_ops(path) == []


def test_a_plain_keras_style_module_passes(plain):
    assert trust.unsafe_ops(plain) == []


def test_a_tf1_saver_restore_op_is_checked_by_op_type(plain, tmp_path):
    # The round-3 attack: a TF1-style SavedModel (no object graph) whose
    # saver restore op is a WriteFile node, which TensorFlow runs at load.
    def edit(meta_graph):
        meta_graph.ClearField("object_graph_def")
        add_node(meta_graph.graph_def, "WriteFile")
        meta_graph.saver_def.restore_op_name = "injected_WriteFile"

    path = copy_with(plain, tmp_path, edit)
    bad = trust.unsafe_ops(path)
    assert "WriteFile" in bad and "<TF1 saver>" in bad
    with pytest.raises(ValueError, match="WriteFile"):
        trust.check_saved_model(path)


def test_saver_def_cannot_exempt_the_serving_function(plain, tmp_path):
    # saver_def naming the serving call made the serving function
    # "saver-only" in 0.2.0; a SaveV2 there wrote the user's texts.
    def edit(meta_graph):
        add_node(serving_function(meta_graph), "SaveV2")
        by_op = [
            n.name
            for n in meta_graph.graph_def.node
            if n.op == "StatefulPartitionedCall"
        ]
        meta_graph.saver_def.restore_op_name = by_op[0]
        meta_graph.saver_def.save_tensor_name = by_op[-1] + ":0"

    path = copy_with(plain, tmp_path, edit)
    assert trust.unsafe_ops(path) == ["SaveV2"]


@pytest.mark.parametrize(
    "op",
    [
        "CacheDatasetV2",
        "CsvDataset",
        "SqlDataset",
        "MatchingFilesDataset",
        "DebugNanCount",
        "DebugNumericSummary",
        "RegisterDatasetV2",
        "DatasetFromGraph",
        "TextLineDataset",
        "PyFunc",
    ],
)
def test_round_three_ops_are_refused(plain, tmp_path, op):
    path = copy_with(
        plain, tmp_path, lambda mg: add_node(serving_function(mg), op)
    )
    assert trust.unsafe_ops(path) == [op]


def test_a_function_nothing_calls_is_checked_too(plain, tmp_path):
    def edit(meta_graph):
        function = meta_graph.graph_def.library.function.add()
        function.signature.name = "orphan"
        add_node(function, "WriteFile")

    assert trust.unsafe_ops(copy_with(plain, tmp_path, edit)) == ["WriteFile"]


def test_fuzz_random_registry_ops_are_refused_outside_the_allowlist(
    plain, tmp_path
):
    """200 random op types from TensorFlow's registry (`tf.raw_ops`),
    each inserted in one of four places: the top-level graph, the serving
    function, the saver's function, or a new function that only the
    serving function calls. Accepted exactly when the allowlist admits
    the op there."""
    registry = sorted(n for n in dir(tf.raw_ops) if not n.startswith("_"))
    rng = np.random.default_rng(0)
    picks = [registry[i] for i in rng.choice(len(registry), 200, False)]
    picks += ["SaveV2", "RestoreV2", "WriteFile", "Add"]  # known cases
    base = trust.read_saved_model(plain)
    pb = os.path.join(str(tmp_path), "saved_model.pb")
    shutil.copytree(plain, str(tmp_path), dirs_exist_ok=True)
    accepted_outside = []
    for i, op in enumerate(picks):
        saved = type(base)()
        saved.CopyFrom(base)
        meta_graph = saved.meta_graphs[0]
        where = ["graph", "serving", "saver", "nested"][i % 4]
        if where == "graph":
            add_node(meta_graph.graph_def, op)
        elif where == "serving":
            add_node(serving_function(meta_graph), op)
        elif where == "saver":
            add_node(saver_function(meta_graph), op)
        else:
            inner = meta_graph.graph_def.library.function.add()
            inner.signature.name = "inner_fn"
            add_node(inner, op)
            call = add_node(serving_function(meta_graph), "PartitionedCall")
            call.name = "call_inner"
            call.attr["f"].func.name = "inner_fn"
        with open(pb, "wb") as f:
            f.write(saved.SerializeToString())
        admitted = op in ALLOWED_OPS or (
            where == "saver" and op in trust.CHECKPOINT_OPS
        )
        refused = op in trust.unsafe_ops(str(tmp_path))
        assert refused != admitted, (op, where)
        if not refused and op not in ALLOWED_OPS:
            accepted_outside.append((op, where))
    assert all(op in trust.CHECKPOINT_OPS for op, _ in accepted_outside)
