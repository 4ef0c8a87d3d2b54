"""`StructuredSelfAttention` (Lin et al. 2017)."""

import math

import keras
from keras import layers, ops

from keras_attn.layers import _sublayers
from keras_attn.legacy import layers as legacy_layers
from keras_attn.ops import masking, scores
from keras_attn.validation import (
    check_features,
    check_mask,
    check_rate,
    clone_initializer,
    positive_int,
)


def frobenius_penalty(weights):
    """Per-example `‖A Aᵀ − I‖²_F` for weights `A` of shape `(B, r, T)`.

    Returns a float32 tensor of shape `(B,)`.
    """
    weights = ops.cast(weights, "float32")
    gram = ops.einsum("brt,bst->brs", weights, weights)  # (B, r, r)
    eye = ops.eye(ops.shape(weights)[1], dtype="float32")  # (r, r)
    return ops.sum(ops.square(gram - eye[None]), axis=(1, 2))  # (B,)


@keras.saving.register_keras_serializable(package="keras_attn")
class StructuredSelfAttention(layers.Layer):
    """Structured self-attentive sentence embedding (Lin et al. 2017).

    For hidden states `H` of shape `(B, T, D)` (e.g. a BiLSTM's outputs)
    the layer computes `r = num_hops` attention distributions over time,

        A = softmax(W_s2 tanh(W_s1 Hᵀ))        # (B, r, T), softmax over T

    with `W_s1` of shape `(units, D)` and `W_s2` of shape `(r, units)`, and
    returns the sentence embedding matrix `M = A H` of shape `(B, r, D)`.

    Penalty. To keep the hops from attending to the same words, the layer
    adds (through `add_loss`, during training and inference alike, as Keras
    regularization losses do)

        penalty_coefficient × mean_b ‖A_b A_bᵀ − I‖²_F

    where `‖·‖²_F` is the squared Frobenius norm, i.e. the sum over all
    `r × r` entries of the squared difference, and the mean is over the
    examples of the batch (not over the `r × r` entries, not a sum over the
    batch, and not the square root: published re-implementations differ on
    each of these). It is computed from the masked `A` and in float32. No
    loss is added when `penalty_coefficient == 0`.

    Masks: padded time steps (from `mask`, or the Keras mask of the inputs,
    e.g. `Embedding(mask_zero=True)`) get weight exactly 0; an example whose
    steps are all masked gets `A = 0` and `M = 0` (never NaN). The output
    has a hop axis, not a time axis, so no mask is propagated.

    Args:
        units: `d_a`, the hidden width of `W_s1`. Defaults to `350`.
        num_hops: `r`, the number of attention hops. Defaults to `30`.
        penalty_coefficient: weight of the penalty (non-negative). Defaults
            to `1.0`.
        use_bias: whether `W_s1` has a bias (the paper has none). Defaults
            to `False`.
        dropout: dropout rate on `A` before `M = A H`. Defaults to `0.0`.
        kernel_initializer: initializer of `W_s1` and `W_s2`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: regularizer of `W_s1` and `W_s2`. Defaults to
            `None`.
        kernel_constraint: constraint on `W_s1` and `W_s2`. Defaults to
            `None`.
        bias_regularizer: regularizer of the bias (`use_bias=True`).
            Defaults to `None`.
        bias_constraint: constraint on the bias. Defaults to `None`.
        seed: seed of the attention dropout. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            `activity_regularizer`...).

    Call arguments:
        inputs: `H`, of shape `(B, T, D)`.
        mask: optional boolean `(B, T)`.
        return_attention_scores: also return `A`. Defaults to `False`.
        training: whether dropout is active.

    Returns:
        `M` of shape `(B, r, D)` and, with `return_attention_scores=True`,
        `A` of shape `(B, r, T)`.

    Example:

    >>> import numpy as np
    >>> layer = StructuredSelfAttention(units=8, num_hops=2)
    >>> m, a = layer(np.ones((3, 5, 4)), return_attention_scores=True)
    >>> tuple(m.shape), tuple(a.shape)
    ((3, 2, 4), (3, 2, 5))

    References:
        - [Lin et al. 2017](https://arxiv.org/abs/1703.03130)
    """

    def __init__(
        self,
        units=350,
        num_hops=30,
        penalty_coefficient=1.0,
        use_bias=False,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        bias_regularizer=None,
        bias_constraint=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        positive_int("units", units)
        positive_int("num_hops", num_hops)
        if (
            isinstance(penalty_coefficient, bool)
            or not isinstance(penalty_coefficient, (int, float))
            or not math.isfinite(penalty_coefficient)
            or penalty_coefficient < 0
        ):
            raise ValueError(
                "Expected penalty_coefficient to be a finite non-negative "
                "number. "
                f"Received: penalty_coefficient={penalty_coefficient!r}"
            )
        check_rate("dropout", dropout)
        self.units = units
        self.num_hops = num_hops
        self.penalty_coefficient = float(penalty_coefficient)
        self.use_bias = use_bias
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.supports_masking = True

    def _dense(self, name, units, use_bias):
        return layers.Dense(
            units,
            use_bias=use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            kernel_regularizer=self.kernel_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_regularizer=self.bias_regularizer,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )

    # The weights under the names of 0.1 (read-only views).
    hidden_kernel = property(lambda self: self._hidden_dense.kernel)  # W_s1ᵀ
    hidden_bias = property(lambda self: self._hidden_dense.bias)
    hop_kernel = property(lambda self: self._hop_dense.kernel)  # W_s2ᵀ

    def _denses(self):
        return [self._hidden_dense, self._hop_dense] if self.built else []

    def load_own_variables(self, store):
        """Also load `.keras` files written by keras_attn 0.1, whose layer
        held `W_s1` (and its bias) and `W_s2` itself, in that order."""
        legacy_layers.load_own_variables(
            self, store, self._denses(), super().load_own_variables
        )

    def enable_lora(self, rank, targets=("hidden", "hops")):
        """LoRA (Hu et al. 2021) on `W_s1` (`"hidden"`) and `W_s2`
        (`"hops"`); a projection left out of `targets` freezes."""
        _sublayers.enable_lora(self.name, self._denses(), rank, targets)

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "Expected inputs to have rank 3 (batch, time, features). "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        dim = input_shape[-1]
        self._widths = {"inputs": dim}
        if dim is None:
            raise ValueError(
                "The last dimension of the inputs must be defined. "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        # W_s1 and W_s2 as Keras `Dense` sublayers (matmul on the last
        # axis): quantization and LoRA come from Keras.
        self._hidden_dense = self._dense("hidden", self.units, self.use_bias)
        self._hidden_dense.build((None, None, dim))
        self._hop_dense = self._dense("hops", self.num_hops, False)
        self._hop_dense.build((None, None, self.units))
        self.dropout_layer = layers.Dropout(
            self.dropout,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="dropout",
        )
        self.dropout_layer.build(None)
        self.built = True

    def call(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        check_features(self._widths, inputs=inputs)
        check_mask("mask", mask, tuple(inputs.shape[:2]))
        # Padded steps are selected out (not multiplied by a zero weight):
        # NaN or inf there never reaches a valid output.
        hidden = masking.select(ops.cast(inputs, self.compute_dtype), mask)
        # `Dense` runs matmul, not einsum: TensorFlow's einsum made the
        # training step 3-15% slower here (benchmarks/ssa_einsum_vs_matmul.py).
        x = self._hidden_dense(hidden)  # (B, T, U)
        logits = self._hop_dense(scores.tanh(x))  # (B, T, r)
        logits = ops.transpose(logits, (0, 2, 1))  # (B, r, T)
        hop_mask = None
        if mask is not None:
            hop_mask = ops.cast(mask, "bool")[:, None, :]  # (B, 1, T)
        weights = masking.masked_softmax(logits, hop_mask)  # (B, r, T)
        if self.penalty_coefficient > 0:
            penalty = ops.mean(frobenius_penalty(weights))
            self.add_loss(self.penalty_coefficient * penalty)
        dropped = self.dropout_layer(weights, training=training)
        outputs = ops.matmul(dropped, hidden)  # (B, r, D)
        if return_attention_scores:
            return outputs, weights
        return outputs

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_hops, input_shape[-1])

    def compute_output_spec(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        out = keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )
        if return_attention_scores:
            weights = keras.KerasTensor(
                (inputs.shape[0], self.num_hops, inputs.shape[1]),
                dtype=self.compute_dtype,
            )
            return out, weights
        return out

    def get_config(self):
        return {
            **super().get_config(),
            "dtype": _sublayers.dtype_config(self, self._denses()),
            "units": self.units,
            "num_hops": self.num_hops,
            "penalty_coefficient": self.penalty_coefficient,
            "use_bias": self.use_bias,
            "dropout": self.dropout,
            "kernel_constraint": keras.constraints.serialize(
                self.kernel_constraint
            ),
            "bias_regularizer": keras.regularizers.serialize(
                self.bias_regularizer
            ),
            "bias_constraint": keras.constraints.serialize(
                self.bias_constraint
            ),
            "seed": self.seed,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
        }
