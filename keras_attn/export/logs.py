"""TensorFlow's logs kept off the terminal while an export runs.

Saving a SavedModel logs Python warnings that ask nothing of the user
("Issue encountered when serializing table_initializer ... probably safe
to ignore"); LiteRT's converter writes its C++ notes to standard error.
`quiet()` holds both back for the length of a save or a conversion:
TensorFlow's Python logger shows errors only, and the C++ output is
captured by `keras_attn_runtime.native_logs` (added to the exception's
notes when the export fails; `KERAS_ATTN_NATIVE_LOGS=1` shows it live).
"""

import contextlib
import logging

from keras_attn_runtime import native_logs


@contextlib.contextmanager
def quiet():
    """TensorFlow's Python warnings and C++ logs held back (see the
    module's docstring)."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    if not native_logs.shown():
        logger.setLevel(logging.ERROR)
    try:
        with native_logs.captured():
            yield
    finally:
        logger.setLevel(level)
