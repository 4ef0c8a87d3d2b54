"""Keras `Dense`/`EinsumDense` sublayers inside our layers.

Our layers hold their projections as Keras sublayers, so that
quantization, LoRA and dtype-policy maps come from Keras. What is ours:
recording the sublayers' own dtype policies (after `model.quantize`) in
the layer's config, LoRA targets by name, and the feed-forward and `g`
sublayers. Reading keras_attn 0.1's files is `keras_attn.legacy.layers`.
"""

import keras


def dtype_config(layer, sublayers):
    """The layer's dtype, as a `DTypePolicyMap` holding the sublayers' own
    policies once they differ (e.g. after `model.quantize("int8")`), so
    that a reloaded layer rebuilds them quantized."""
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        return keras.dtype_policies.serialize(policy)
    own = {
        sub.path: sub.dtype_policy
        for sub in sublayers
        if sub.dtype_policy.name != policy.name
    }
    if not own:
        return keras.dtype_policies.serialize(policy)
    return keras.dtype_policies.serialize(
        keras.dtype_policies.DTypePolicyMap(policy, own)
    )


def enable_lora(layer_name, sublayers, rank, targets):
    """LoRA on the sublayers named in `targets`; the others freeze."""
    names = [s.name for s in sublayers]
    unknown = [t for t in targets if t not in names]
    if unknown or not targets:
        raise ValueError(
            f"`targets` must name projections of layer '{layer_name}' "
            f"({names}); received targets={tuple(targets)!r}"
        )
    for sublayer in sublayers:
        if sublayer.name in targets:
            sublayer.enable_lora(rank)
        else:
            sublayer.trainable = False


def fewer_heads(projection, heads):
    """The arguments of an `EinsumDense` like `projection` (a `(..., H, K)`
    head projection) with `heads` heads instead of `H`."""
    shape = projection.partial_output_shape
    return {
        "equation": projection.equation,
        "output_shape": (*shape[:-2], heads, shape[-1]),
        "bias_axes": projection.bias_axes,
    }


def two_dense(width, hidden, activation, name, common):
    """`width → hidden → width`: two built `Dense` layers named
    `{name}_1` and `{name}_2`, the first with `activation`; `common()`:
    the initializers, regularizers and constraints, a fresh copy a call
    (one seedless initializer copy would start both layers from one
    random stream)."""
    first = keras.layers.Dense(
        hidden, activation=activation, name=f"{name}_1", **common()
    )
    second = keras.layers.Dense(width, name=f"{name}_2", **common())
    first.build((None, width))
    second.build((None, hidden))
    return first, second


def apply_g(mode, first, second, context):
    """`MultiHeadPositional`'s `g` (`first`, then `second`) on the heads'
    outputs `(..., H, Dv)`: per head (`"per_head"`), or on their
    concatenation (`"concat"`); `mode=None`: `context` as it is."""
    if mode is None:
        return context
    if mode == "per_head":
        return second(first(context))
    heads = keras.ops.shape(context)
    flat = keras.ops.reshape(context, (*heads[:-2], -1))  # (..., H*Dv)
    return keras.ops.reshape(second(first(flat)), heads)
