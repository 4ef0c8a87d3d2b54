"""Argument and input checks, and small helpers shared by the layers."""


def positive_int(name, value, allow_none=False):
    """Raise a Keras-worded `ValueError` unless `value` is an int > 0."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Expected {name} to be a positive integer. "
            f"Received: {name}={value!r}"
        )


def check_rate(name, value):
    """Raise unless `value` is a rate in [0, 1)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"Expected {name} to be a float in [0, 1). "
            f"Received: {name}={value!r}"
        )


def check_batch(query, value, key):
    """Raise a clear error when static batch sizes disagree."""
    sizes = {"query": query.shape[0], "value": value.shape[0]}
    sizes["key"] = key.shape[0]
    known = {k: v for k, v in sizes.items() if v is not None}
    if len(set(known.values())) > 1:
        raise ValueError(
            "Expected query, value and key to have the same batch size. "
            f"Received: batch sizes {known}"
        )


def clone_initializer(initializer):
    """A fresh copy, so that two weights never share one seeded instance."""
    return initializer.__class__.from_config(initializer.get_config())
