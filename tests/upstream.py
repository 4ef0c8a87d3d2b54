"""The Keras behaviours our tests expect, by version.

A known upstream bug is expected to fail only on the versions that have
it: a fix upstream must turn an expected failure into a pass, never our
suite red. Each entry names the Keras versions with the bug.
"""

import keras
from packaging.version import Version

KERAS = Version(keras.version())

# `ops.add` of TensorFlow broadcasts an `EinsumDense` bias of shape
# `(heads, 1)` onto the time axis when there are as many steps as heads
# (`keras.layers.MultiHeadAttention` has it too). Fixed in the 3.16
# nightly builds (checked on 3.16.0.dev2026102704).
EINSUM_BIAS_ON_TIME_AXIS = (
    keras.backend.backend() == "tensorflow" and KERAS < Version("3.16.0.dev0")
)

# `RNN` and `Bidirectional` pass their input's mask on to their output up
# to 3.15; the 3.16 nightly builds set `supports_masking = False`, and a
# layer after them gets no mask (checked on 3.16.0.dev2026102704). Our
# models hand the mask to each layer by name (docs/development.md).
RNN_OUTPUT_CARRIES_MASK = KERAS < Version("3.16.0.dev0")
