"""Derive the runtime's lowercasing exceptions (`keras_attn_runtime.text`).

`python tools/derive_lowercase_table.py` lowercases every Unicode code
point, one at a time, with TensorFlow's
`tf.strings.lower(encoding="utf-8")` and with Python's `str.lower`, and
prints the code points where the two differ, as the ranges of
`keras_attn_runtime.text.TF_KEEPS_CASE`. They differ where Python's
Unicode tables are newer than TensorFlow's: TensorFlow leaves a letter
that its tables do not know as it is. A person pastes the ranges into the
runtime when TensorFlow or Python moves; `tests/runtime/test_runtime_text.py`
fails until then.
"""

import sys
import unicodedata


def differences():
    """`{code point: TensorFlow's lowercase}` where Python's differs."""
    import tensorflow as tf

    chars = [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    lowered = tf.strings.lower(
        tf.constant([c.encode("utf-8") for c in chars]), encoding="utf-8"
    ).numpy()
    found = {}
    for char, low in zip(chars, lowered, strict=True):
        low = low.decode("utf-8")
        if low != char.lower():
            found[ord(char)] = low
    return found


def ranges(code_points):
    """Sorted code points as `(first, last)` runs."""
    runs = []
    for c in sorted(code_points):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return [tuple(r) for r in runs]


def main():
    found = differences()
    changed = [hex(c) for c, low in found.items() if low != chr(c)]
    if changed:
        sys.exit(
            "TensorFlow lowercases these differently from Python (not only "
            f"leaves them as they are): {changed}; the runtime needs a map"
        )
    print(
        f"# Python {sys.version.split()[0]} (Unicode "
        f"{unicodedata.unidata_version}); {len(found)} code points"
    )
    for first, last in ranges(found):
        print(f"    (0x{first:X}, 0x{last:X}),")


if __name__ == "__main__":
    main()
