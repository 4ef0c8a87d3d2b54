"""The exporters' calling conventions before keras_attn 0.3 (removed in
1.0, `keras_attn.legacy.REMOVALS`).

Every exporter is now called one way, `export_<format>(obj, path, *,
overwrite=False, protect=(), ...)`. Calls in the earlier forms still
work, with a `DeprecationWarning`: options given by position,
`export_streaming_tflite(path, start, step_fn, start_signature, ...)`
with the path first, and `keras_attn.export.export_streaming_translator`,
now `keras_attn.translation.export_streaming_translator`.
"""

import functools
import importlib
import os
import warnings


def _warn(message):
    warnings.warn(message, DeprecationWarning, stacklevel=3)


def _merged(fn_name, former, options, kwargs):
    if len(options) > len(former):
        raise TypeError(
            f"{fn_name}() takes its object and path by position, then at "
            f"most {len(former)} options. Received: {len(options)} more "
            "positional arguments"
        )
    for name, value in zip(former, options, strict=False):
        if name in kwargs:
            raise TypeError(
                f"{fn_name}() got multiple values for argument {name!r}"
            )
        kwargs[name] = value
    return kwargs


def options_by_position(*former):
    """Decorator for `export_<format>(obj, path, *, ...)`: options passed
    by position after `path`, in the `former` order, are still taken,
    with a `DeprecationWarning`."""

    def wrap(fn):
        @functools.wraps(fn)
        def export(obj, path, *options, **kwargs):
            if options:
                _warn(
                    f"{fn.__name__}: pass its options by keyword "
                    f"({', '.join(former[: len(options)])}); by position "
                    "they stop working in keras_attn 1.0."
                )
                kwargs = _merged(fn.__name__, former, options, kwargs)
            return fn(obj, path, **kwargs)

        return export

    return wrap


def streaming_path_first(former):
    """Decorator for `export_streaming_tflite((start, step_fn), path, *,
    start_signature, ...)`: the earlier `(path, start, step_fn,
    start_signature, *former options)` is still taken, with a
    `DeprecationWarning`."""

    def wrap(fn):
        @functools.wraps(fn)
        def export(*args, **kwargs):
            if not args or not isinstance(args[0], (str, os.PathLike)):
                return fn(*args, **kwargs)
            _warn(
                f"{fn.__name__}(path, start, step_fn, start_signature, "
                f"...) is now {fn.__name__}((start, step_fn), path, "
                "start_signature=..., ...); the old form stops working "
                "in keras_attn 1.0."
            )
            path, start, step_fn, *rest = args
            names = ("start_signature", *former)
            kwargs = _merged(fn.__name__, names, rest, kwargs)
            return fn((start, step_fn), path, **kwargs)

        return export

    return wrap


# Names that left `keras_attn.export`: their new module.
MOVED = {"export_streaming_translator": "keras_attn.translation"}


def moved(module, name):
    """`module.name` for a name that moved (a `DeprecationWarning`); an
    `AttributeError` for others."""
    if name not in MOVED:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(f"{module}.{name} moved to {MOVED[name]}: import it from there.")
    return getattr(importlib.import_module(MOVED[name]), name)
