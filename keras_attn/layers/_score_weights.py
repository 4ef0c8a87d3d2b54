"""The weights `Attention`'s score needs: its projections (Keras's
`EinsumDense`), the additive score's vector and bias, and the learned
scalars (the norm's, the scale's, Keras's concat weight)."""

import math

import keras
from keras import layers

from keras_attn.validation import clone_initializer


def _kernel(layer, name, shape):
    return layer.add_weight(
        name=name,
        shape=shape,
        initializer=clone_initializer(layer.kernel_initializer),
        regularizer=layer.kernel_regularizer,
        constraint=layer.kernel_constraint,
    )


def _projection(layer, name, units, input_width):
    """A bias-free projection of the last axis, a Keras `EinsumDense`:
    quantization and LoRA come from Keras. (Not `Dense`: on PyTorch,
    Keras 3.15's `ops.matmul` turns two float64 tensors into float32,
    so a bias-free `Dense` computes float64 inputs in float32.)"""
    dense = layers.EinsumDense(
        "abc,cd->abd",
        output_shape=(None, units),
        kernel_initializer=clone_initializer(layer.kernel_initializer),
        kernel_regularizer=layer.kernel_regularizer,
        kernel_constraint=layer.kernel_constraint,
        dtype=layer.dtype_policy,
        name=name,
    )
    dense.build((None, None, input_width))
    return dense


def add(layer, dq, dk):
    """Create `layer`'s score weights for query width `dq` and key width
    `dk`, as attributes (`None` where the score has none)."""
    layer._query_dense = layer._key_dense = None
    layer.score_kernel = layer.bias = None
    if layer.score == "general":  # sᵀ W h = (Wᵀ s)ᵀ h
        layer._query_dense = _projection(layer, "query", dk, dq)
    elif layer.score == "low_rank":
        layer._query_dense = _projection(layer, "query", layer.rank, dq)
        layer._key_dense = _projection(layer, "key", layer.rank, dk)
    elif layer.score == "additive":
        layer._query_dense = _projection(layer, "query", layer.units, dq)
        layer._key_dense = _projection(layer, "key", layer.units, dk)
        layer.score_kernel = _kernel(layer, "score_kernel", (layer.units,))
        if layer.use_bias:
            layer.bias = layer.add_weight(
                name="bias",
                shape=(layer.units,),
                initializer=clone_initializer(layer.bias_initializer),
                regularizer=layer.bias_regularizer,
                constraint=layer.bias_constraint,
            )
    layer.norm_scale = None
    if layer.normalize:  # tfa's attention_g
        layer.norm_scale = layer.add_weight(
            name="norm_scale",
            shape=(),
            initializer=keras.initializers.Constant(
                math.sqrt(1.0 / layer.units)
            ),
        )
    layer.scale = layer.concat_score_weight = None
    if layer.use_scale:  # a learned scalar on the scores, as Keras's
        layer.scale = layer.add_weight(
            name="scale", shape=(), initializer="ones"
        )
    if layer.score == "concat":  # Keras's name and order
        layer.concat_score_weight = layer.add_weight(
            name="concat_score_weight", shape=(), initializer="ones"
        )
