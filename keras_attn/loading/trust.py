"""What `keras-attn` agrees to load, and the checks that hold it to that.

- `.keras` files load with Keras's safe mode on (no `Lambda` bytecode, no
  arbitrary callables named in the config).
- A SavedModel is a program: TensorFlow runs its graph. Before loading one,
  `check_saved_model` reads `saved_model.pb` as data and admits it only
  when every op of its graph and of every function in its library is on
  an allowlist (`allowed_ops.ALLOWED_OPS`): the op types that models built
  from our layers and Keras's standard layers export. A list of forbidden
  ops can never be complete (a `DatasetFromGraph` hides a whole graph in a
  string), so nothing else is admitted. The checkpoint ops are admitted
  only in functions that no signature and no saved object reaches (the
  saver's own), whatever `saver_def` says; a TF1-style SavedModel, whose
  saver restore op TensorFlow runs at load, is refused. This does not make
  a SavedModel from a stranger safe to run (it can still loop or exhaust
  memory): run such models in a sandbox (no network, a read-only file
  system).
- A `.tflite` file is checked structurally (`keras_attn_runtime.verify_model`)
  before LiteRT parses it; LiteRT's kernels are not hardened against
  crafted models either.
"""

import os

from keras_attn.loading.allowed_ops import ALLOWED_OPS

# Admitted only in the saver's functions (reached by no signature and no
# saved object): they read and write checkpoint files.
CHECKPOINT_OPS = frozenset(
    {
        "SaveV2",
        "Save",
        "SaveSlices",
        "RestoreV2",
        "Restore",
        "RestoreSlice",
        "MergeV2Checkpoints",
    }
)
# `saved_model.pb` files larger than this are refused before parsing.
MAX_GRAPH_BYTES = 1 << 30


def read_saved_model(path):
    """The `SavedModel` protocol buffer of the folder `path` (as data)."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, "saved_model.pb")
    if os.path.getsize(pb) > MAX_GRAPH_BYTES:
        raise ValueError(
            f"Refusing {pb!r}: {os.path.getsize(pb)} bytes, over the "
            f"{MAX_GRAPH_BYTES}-byte limit for a graph."
        )
    saved = saved_model_pb2.SavedModel()
    try:
        with open(pb, "rb") as f:
            saved.ParseFromString(f.read())
    except Exception as err:  # a DecodeError or alike: not a SavedModel
        raise ValueError(
            f"Not a valid SavedModel: {pb!r} is not a SavedModel protocol "
            f"buffer ({type(err).__name__})"
        ) from None
    if not saved.meta_graphs:
        raise ValueError(f"Not a valid SavedModel: {pb!r} has no graph")
    return saved


def _called(node):
    """Names of the functions a node calls (by op or through attrs)."""
    names = [node.op]
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def _served_functions(meta_graph, functions):
    """Names of the functions that a signature or a saved object reaches
    (everything TensorFlow may run when serving or loading)."""
    graph = meta_graph.graph_def
    by_name = {n.name: n for n in graph.node}
    roots = set(meta_graph.object_graph_def.concrete_functions)
    for obj in meta_graph.object_graph_def.nodes:
        roots.update(obj.function.concrete_functions)
        if obj.HasField("bare_concrete_function"):
            roots.add(obj.bare_concrete_function.concrete_function_name)
    stack = list(roots)
    for signature in meta_graph.signature_def.values():
        for tensor in (*signature.inputs.values(), *signature.outputs.values()):
            node = by_name.get(tensor.name.split(":")[0])
            if node is not None:
                stack.extend(_called(node))
    seen = set()
    while stack:
        name = stack.pop()
        if name in functions and name not in seen:
            seen.add(name)
            for node in functions[name].node_def:
                stack.extend(_called(node))
    return seen


def unsafe_ops(path):
    """The op types of the SavedModel at `path` that the trust policy
    does not admit, sorted (empty when it passes); a TF1-style model
    gives `["<TF1 saver>"]`."""
    saved = read_saved_model(path)
    bad = set()
    for meta_graph in saved.meta_graphs:
        graph = meta_graph.graph_def
        if not meta_graph.object_graph_def.nodes:
            bad.add("<TF1 saver>")  # TensorFlow runs its restore op at load
        functions = {f.signature.name: f for f in graph.library.function}
        served = _served_functions(meta_graph, functions)
        bad.update(n.op for n in graph.node if n.op not in ALLOWED_OPS)
        for name, function in functions.items():
            allowed = ALLOWED_OPS
            if name not in served:
                allowed = ALLOWED_OPS | CHECKPOINT_OPS
            bad.update(n.op for n in function.node_def if n.op not in allowed)
    return sorted(bad)


def check_saved_model(path):
    """Raise a `ValueError` naming the ops that the allowlist does not
    admit in the SavedModel at `path`."""
    bad = unsafe_ops(path)
    if not bad:
        return
    shown = ", ".join(bad[:12]) + (" ..." if len(bad) > 12 else "")
    what = "ops outside the allowlist of keras_attn.loading.allowed_ops"
    if bad == ["<TF1 saver>"]:
        what = "a TF1-style saver, which TensorFlow runs at load"
    raise ValueError(
        f"Refusing to run the SavedModel {path!r}: it holds {what} "
        f"({shown}). A SavedModel is code: if you trust its source, pass "
        "--allow-unsafe-ops (better, inside a sandbox without network "
        "and with a read-only file system)."
    )
