"""Text-classifier SavedModels written before keras_attn 0.3 (removed in
1.0, `keras_attn.legacy.REMOVALS`): they have no known-words output, so
`keras-attn classify` reads "no attention at all" as "no known word"."""

import numpy as np


def known_words(outputs, count):
    """Per text, 1 where its `attention` output (if any) is not all zero,
    else 0: what an older export says of its `count` texts' known
    words."""
    attention = outputs.get("attention")
    if attention is None:
        return [1] * count
    return [int(np.abs(a).sum() > 0) for a in attention]
