"""What a TensorFlow error says, in one line: the allocation that did
not fit (`memory_failure`), or the line that names what went wrong and
the node it happened at (`op_error_line`). `keras-attn`'s commands and
`serve` report a model's failure with them."""

import re

# Bytes per element of the dtypes an allocation failure may name, in
# TensorFlow's proto spelling (DT_FLOAT) and its OOM message's (float).
_DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "half": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def memory_failure(message):
    """The allocation a TensorFlow error message says failed, as
    "the model asked for N bytes (...)", or `None` for any other error.

    Two forms: the runtime's "OOM when allocating tensor with shape[...]
    and type float", and a constant that graph optimization folded and
    could not materialize ("Cannot parse tensor from proto", its dtype,
    `dim { size: ... }` and a `float_val` line, which alone says
    nothing)."""
    nodes = re.findall(r"\[\[\{\{node ([^}]+)\}\}\]\]", message)
    oom = re.search(
        r"OOM when allocating tensor with shape\[([\d, ]*)\]"
        r"(?: and type (\w+))?",
        message,
    )
    if oom:
        dims = [int(d) for d in oom.group(1).split(",") if d.strip()]
        dtype = oom.group(2) or "?"
    elif "Cannot parse tensor from proto" in message:
        found = re.search(r"dtype: DT_(\w+)", message)
        dtype = found.group(1).lower() if found else "?"
        dims = [int(d) for d in re.findall(r"size: (\d+)", message)]
    else:
        return None
    count = 1
    for d in dims:
        count *= d
    width = _DTYPE_BYTES.get(dtype)
    asked = f"{count * width:,} bytes" if width else f"{count:,} elements"
    node = f", node {nodes[-1]}" if nodes else ""
    return (
        f"the model asked for {asked} (a {dtype} tensor of shape "
        f"{dims}{node}): more memory than can be allocated"
    )


def op_error_line(message, width=300):
    """The line of a TensorFlow error that says what went wrong (not its
    'Graph execution error:' heading, the stack of the node, nor the
    `[[{{node X}}]]` marker), with the node named after it: an
    allocation that does not fit says its shape and the limit."""
    failure = memory_failure(message)
    if failure:
        return failure[:width]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    nodes = re.findall(r"\[\[\{\{node ([^}]+)\}\}\]\]", message)
    telling = [
        line
        for line in lines
        if not line.startswith(("Graph execution error", "Detected at node"))
        and not line.startswith(("File ", "in ", "line ", "[["))
    ]
    chosen = None
    for line in telling:
        if any(w in line for w in ("OOM", "out of memory", "xhausted")):
            chosen = line
            break
    chosen = chosen or (telling or lines or ["(no message)"])[-1]
    if nodes and nodes[-1] not in chosen:
        chosen = f"{chosen} (at node {nodes[-1]})"
    return chosen[:width]
