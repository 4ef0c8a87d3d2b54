"""What a model's signature takes and gives: one type, from the opener
that reads a model file to every protocol that serves it.

A `Signature`'s `inputs` and `outputs` map tensor names to `(dtype,
shape)`: NumPy dtype names (`"string"` for text) and shapes with `None`
for sizes known only at run time (`None` for an unknown rank).
`PromptTooLong` is the one refusal of a text past a model's window
(`keras_attn_runtime.opener` names it too).
"""

import numpy as np

# TensorFlow Serving's default signature key, the one a request without
# `signature_name` calls.
DEFAULT_SIGNATURE = "serving_default"


class Signature:
    """A signature's tensors, and how merged requests split again.

    Args:
        inputs: `{name: (dtype, shape)}` of its inputs.
        outputs: `{name: (dtype, shape)}` of its outputs.

    Attributes:
        batched: whether requests may be merged into one call: every
            output has a known rank. Where a size past the batch varies
            (a translator's tokens and attention, as wide as the longest
            input of a call), each request's part is cut back to its own
            width (`own_part`).
    """

    def __init__(self, inputs, outputs):
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.batched = all(
            shape is not None for _, shape in self.outputs.values()
        )

    def __repr__(self):
        return f"Signature(inputs={self.inputs!r}, outputs={self.outputs!r})"

    def __eq__(self, other):
        return (
            isinstance(other, Signature)
            and self.inputs == other.inputs
            and self.outputs == other.outputs
        )

    def empty_outputs(self):
        """The outputs of a call on no examples: zero rows of each output's
        dtype and known sizes (`None` sizes past the batch as 0)."""
        out = {}
        for name, (dtype, shape) in self.outputs.items():
            rest = [0 if n is None else n for n in (shape or [None])[1:]]
            kind = object if dtype == "string" else dtype
            out[name] = np.zeros([0, *rest], kind)
        return out

    def own_part(self, outputs, start, count):
        """Rows `start:start + count` of a merged call's `outputs`, each
        axis whose size varies cut to the last position any of these rows
        fills (not padding: `b""` or `""` for text, 0 for numbers), as a
        call on these rows alone would give."""
        part = {}
        for name, array in outputs.items():
            rows = array[start : start + count]
            shape = self.outputs.get(name, (None, None))[1] or []
            for axis, size in enumerate(shape[1:], start=1):
                if size is None and rows.shape[axis]:
                    rows = _cut_padding(rows, axis)
            part[name] = rows
        return part


def _cut_padding(array, axis):
    """`array` up to the last index along `axis` holding a value other
    than padding."""
    if array.dtype.kind in "OSU":
        filled = np.vectorize(lambda v: len(v) > 0, otypes=[bool])(array)
    else:
        filled = array != 0
    others = tuple(a for a in range(array.ndim) if a != axis)
    used = np.flatnonzero(filled.any(axis=others)) if array.size else []
    width = int(used[-1]) + 1 if len(used) else 0
    return np.take(array, np.arange(width), axis=axis)


class PromptTooLong(ValueError):
    """A text longer than the model reads at once (its window): the
    client's error, not the model's. `limit` and `received` count the
    model's `unit` (words, subword tokens, tokens)."""

    def __init__(self, limit, received, unit, per=""):
        self.limit, self.received, self.unit = limit, received, unit
        super().__init__(
            f"Expected a text of at most {limit} {unit}{per} (the model's "
            f"window). Received: {received} {unit}"
        )


def check_read_whole(outputs, texts=None):
    """A `PromptTooLong` for a request one of whose texts a model read
    only the start of (a translator SavedModel's `source_truncated`
    output, a row a text; its window is `source_length`, else the
    attention's width), naming the first such text of `texts` where they
    are given; the one verdict of every door, where the model cannot
    refuse before it runs."""
    cut = outputs.get("source_truncated")
    if cut is None:
        return
    cut = np.asarray(cut).reshape(-1)
    if not cut.any():
        return
    limit = np.asarray(outputs.get("source_length", [0])).reshape(-1)[0]
    if not limit and "attention" in outputs:
        limit = np.asarray(outputs["attention"]).shape[-1]
    err = PromptTooLong(
        int(limit), "more", "source tokens", " a sentence or clause"
    )
    which = ""
    if texts is not None:
        text = str(texts[int(np.argmax(cut))])
        which = f" in {text[:60]!r}{'...' if len(text) > 60 else ''}"
    err.args = (f"{err}{which}; split it into shorter sentences",)
    raise err
