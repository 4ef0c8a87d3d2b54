"""Gradients on any Keras backend, for the layer tests.

`gradients(fn, inputs, variables)` returns the value of `fn(*inputs)` (a
scalar) and its gradients with respect to `inputs` and `variables` (the
layer's weights, built beforehand), all as NumPy arrays. TensorFlow uses a
`GradientTape`, JAX `jax.grad` over a `keras.StatelessScope`, PyTorch
autograd; the layers themselves only use `keras.ops`.
"""

import keras
import numpy as np


def _tf(fn, inputs, variables):
    import tensorflow as tf

    xs = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = fn(*xs)
    grads = tape.gradient(loss, xs + list(variables))
    return loss, grads


def _jax(fn, inputs, variables):
    import jax

    def f(values, xs):
        mapping = list(zip(variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping, collect_losses=True):
            return fn(*xs)

    values = [v.value for v in variables]
    xs = [jax.numpy.asarray(x) for x in inputs]
    loss, (g_vars, g_xs) = jax.value_and_grad(f, argnums=(0, 1))(values, xs)
    return loss, list(g_xs) + list(g_vars)


def _torch(fn, inputs, variables):
    import torch

    with torch.enable_grad():
        xs = [torch.tensor(np.asarray(x), requires_grad=True) for x in inputs]
        params = [v.value for v in variables]
        loss = fn(*xs)
        grads = torch.autograd.grad(
            loss, xs + params, allow_unused=True, materialize_grads=True
        )
    return loss.detach(), [g.detach() for g in grads]


def training():
    """A context for `fit`: autograd on under PyTorch (the test session
    turns it off globally), nothing elsewhere."""
    import contextlib

    if keras.backend.backend() == "torch":
        import torch

        return torch.enable_grad()
    return contextlib.nullcontext()


def to_numpy(x, dtype=None):
    """A tensor of any backend and device (or an array) as NumPy.

    bfloat16 is widened to float32 first: NumPy has no bfloat16, and
    PyTorch refuses to convert one.
    """
    if hasattr(x, "dtype") and not isinstance(x, np.ndarray):
        if keras.backend.standardize_dtype(x.dtype) == "bfloat16":
            x = keras.ops.cast(x, "float32")
        x = keras.ops.convert_to_numpy(x)
    out = np.asarray(x)
    return out if dtype is None else out.astype(dtype)


def gradients(fn, inputs, variables=()):
    """`(loss, [d loss/d input..., d loss/d variable...])` as NumPy."""
    backend = keras.backend.backend()
    run = {"tensorflow": _tf, "jax": _jax, "torch": _torch}[backend]
    loss, grads = run(fn, list(inputs), list(variables))
    return to_numpy(loss), [
        None if g is None else to_numpy(g, "float32") for g in grads
    ]
