"""What `keras-attn` agrees to load, and checks that hold it to that.

- `.keras` files load with Keras's safe mode on (no `Lambda` bytecode, no
  arbitrary callables named in the config).
- A SavedModel is a program: TensorFlow runs its graph. Before loading one,
  `check_saved_model` reads `saved_model.pb` as data and refuses a graph
  that holds file-system, Python-callback or other side-effect ops
  (`UNSAFE_OPS`), or checkpoint ops outside TensorFlow's own saver
  functions. This stops the simple attacks (reading or writing files); it
  does not make a SavedModel from a stranger safe to run (it can still
  loop forever or exhaust memory): run those in a sandbox.
- A `.tflite` file is checked structurally (`litert_runtime.verify_model`)
  before LiteRT parses it; LiteRT's kernels are not hardened against
  crafted models either.
"""

import os

UNSAFE_OPS = frozenset(
    {
        # files
        "ReadFile",
        "WriteFile",
        "MatchingFiles",
        "ImmutableConst",
        "InitializeTableFromTextFile",
        "InitializeTableFromTextFileV2",
        "LoadAndRemapMatrix",
        "FileSystemSetConfiguration",
        # readers and datasets reading or writing files
        "WholeFileReader",
        "WholeFileReaderV2",
        "TextLineReader",
        "TextLineReaderV2",
        "TFRecordReader",
        "TFRecordReaderV2",
        "FixedLengthRecordReader",
        "FixedLengthRecordReaderV2",
        "TextLineDataset",
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
        "SaveDataset",
        "SaveDatasetV2",
        "LoadDataset",
        "SnapshotDataset",
        "SnapshotDatasetV2",
        "DatasetToTFRecord",
        "ExperimentalDatasetToTFRecord",
        # Python callbacks
        "PyFunc",
        "PyFuncStateless",
        "EagerPyFunc",
        # output to files or streams
        "Print",
        "PrintV2",
        "CreateSummaryFileWriter",
        "WriteSummary",
        "WriteRawProtoSummary",
        "WriteScalarSummary",
        "WriteHistogramSummary",
        "WriteImageSummary",
        "WriteAudioSummary",
        "WriteGraphSummary",
        "DebugIdentity",
        "DebugIdentityV2",
        "DebugIdentityV3",
        "DebugNumericSummaryV2",
    }
)
# Allowed only inside the functions TensorFlow's saver generates.
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


def _called(node):
    """Names of the functions a node calls (by op or through attrs)."""
    names = [node.op]
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def saved_model_ops(path):
    """`(ops, saver_ops)`: the op types of a SavedModel's graph and its
    function library, and those reachable only from the saver."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, "saved_model.pb")
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
    graph = saved.meta_graphs[0].graph_def
    functions = {f.signature.name: f for f in graph.library.function}
    saver = saved.meta_graphs[0].saver_def
    saver_nodes = {
        saver.save_tensor_name.split(":")[0],
        saver.restore_op_name.split(":")[0],
    }

    def reach(nodes):
        seen, stack = set(), [n for node in nodes for n in _called(node)]
        while stack:
            name = stack.pop()
            if name in functions and name not in seen:
                seen.add(name)
                for node in functions[name].node_def:
                    stack.extend(_called(node))
        return seen

    main = [n for n in graph.node if n.name not in saver_nodes]
    other = reach(main)
    # every function the graph does not reach through the saver nodes
    # counts as reachable from the model: nothing runs unchecked
    only_saver = reach([n for n in graph.node if n.name in saver_nodes])
    only_saver -= other
    other |= set(functions) - only_saver
    ops = {n.op for n in main}
    for name in other:
        ops.update(n.op for n in functions[name].node_def)
    saver_ops = set()
    for name in only_saver:
        saver_ops.update(n.op for n in functions[name].node_def)
    return ops, saver_ops


def check_saved_model(path):
    """Raise a `ValueError` if the SavedModel at `path` holds ops that
    touch files, call Python or write outside TensorFlow's saver."""
    ops, saver_ops = saved_model_ops(path)
    bad = sorted(
        (ops & (UNSAFE_OPS | CHECKPOINT_OPS)) | (saver_ops & UNSAFE_OPS)
    )
    if bad:
        raise ValueError(
            f"Refusing to run the SavedModel {path!r}: its graph holds "
            f"ops that touch files or run Python ({', '.join(bad)}). A "
            "SavedModel is code; if you trust its source, pass "
            "--allow-unsafe-ops."
        )
