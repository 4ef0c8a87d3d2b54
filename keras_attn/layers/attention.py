"""`Attention`: the classic score-function attention family."""

import keras
from keras import layers, ops

from keras_attn.layers import _attention_arguments, _sublayers
from keras_attn.layers import _score_weights as score_weights
from keras_attn.legacy import layers as legacy_layers
from keras_attn.ops import masking, scores
from keras_attn.validation import (
    check_attention_masks,
    check_batch,
    check_features,
    check_key_value,
    set_output_mask,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class Attention(layers.Layer):
    """Attention with a choice of score function (dot, general, additive...).

    For queries `s_i` (e.g. decoder states) and keys/values `h_j` (e.g.
    encoder states) the layer computes scores `e_ij`, the distribution
    `α_i = softmax_j(e_ij)` over unmasked keys, and the context
    `a_i = Σ_j α_ij v_j`. The score is one of:

    - `"dot"`: `e_ij = s_iᵀ h_j` (needs `Dq == Dk`).
    - `"scaled_dot"`: `e_ij = s_iᵀ h_j / sqrt(Dk)`.
    - `"general"`: `e_ij = s_iᵀ W h_j`, `W` of shape `(Dq, Dk)`.
    - `"low_rank"`: `e_ij = (U s_i)ᵀ (V h_j)`, `U ∈ R^{k×Dq}`,
      `V ∈ R^{k×Dk}`, `k = rank`.
    - `"additive"`: `e_ij = vᵀ tanh(W₁ h_j + W₂ s_i + b)` with `units`
      hidden units (Bahdanau et al. 2015).
    - `"concat"`: `e_ij = c Σ_d tanh(σ (s_i + h_j))_d`, no projections,
      a learned scalar `c` (and `σ` with `use_scale`, else 1): Keras's
      `Attention(score_mode="concat")` (needs `Dq == Dk`).

    One implementation of masking, softmax and the weighted sum serves every
    score; only `scores.py` differs.

    Args:
        score: one of `"dot"`, `"scaled_dot"`, `"general"`, `"low_rank"`,
            `"additive"`, `"concat"`. Defaults to `"dot"`.
        units: hidden width of the additive score; required for
            `"additive"`. Defaults to `None`.
        rank: `k` of the low-rank score; required for `"low_rank"`.
            Defaults to `None`.
        use_bias: whether the additive score has a bias `b`. Defaults to
            `True`.
        dropout: dropout rate on the attention weights. Defaults to `0.0`.
        kernel_initializer: initializer of `W`, `U`, `V`, `W₁`, `W₂`, `v`.
            Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of `b`. Defaults to `"zeros"`.
        kernel_regularizer: regularizer of the kernels. Defaults to `None`.
        bias_regularizer: regularizer of `b`. Defaults to `None`.
        chunk_size: for `"additive"`, score this many queries at a time and
            recompute each chunk in the backward pass, so the
            `(B, Tq, Tk, units)` hidden tensor is never whole in memory
            (see BENCHMARKS.md, figure 2). Same result. Defaults to `None`
            (one block).
        normalize: for `"additive"`, weight normalization of `v`
            (Salimans & Kingma 2016; tfa's `BahdanauAttention(normalize=
            True)`): `v = g · v' / ‖v'‖` with a learned scalar `g`
            initialized to `sqrt(1 / units)`; needs `use_bias`. Defaults
            to `False`.
        use_scale: multiply the scores by a learned scalar (initialized to
            1), as `keras.layers.Attention(use_scale=True)` (for
            `"concat"`, scale `s + h` inside the `tanh`, as Keras does);
            not for `"additive"`, whose `v` already scales. Defaults to
            `False`.
        kernel_constraint: constraint on the kernels. Defaults to `None`.
        bias_constraint: constraint on `b`. Defaults to `None`.
        seed: seed of the attention dropout. Defaults to `None`.
        score_mode: Keras's name for `score` (`"dot"` or `"concat"`), for
            code written for `keras.layers.Attention`. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            `activity_regularizer`...).

    Call arguments:
        query: `(B, Tq, Dq)`. Inputs of higher rank `(B, ..., Tq, Dq)`
            (as `keras.layers.Attention` takes them) attend along the
            time axis, every axis before it being a batch axis; their
            masks are `input.shape[:-1]`.
        value: `(B, Tv, Dv)`.
        key: optional `(B, Tv, Dk)`; defaults to `value`.
        projected_key: optional, `project_key(key, value_mask)` computed
            once for many calls on one key (a decoder's steps): the
            scores read it instead of projecting `key` again, with the
            same numbers. Only for the scores that project their keys
            (`"low_rank"`, `"additive"`).
        query_mask: optional boolean `(B, Tq)`. Masked queries get all-zero
            weights and a zero context; the mask is propagated to the output.
        value_mask: optional boolean `(B, Tv)`; masked keys get weight
            exactly 0. Both masks are read from Keras masks (e.g.
            `Embedding(mask_zero=True)`) when not given.
        use_causal_mask: query `i` only attends to keys `j <= i`. Defaults
            to `False`.
        return_attention_scores: also return the weights. Defaults to
            `False`.
        training: whether dropout is active.

    Returns:
        The context `(B, Tq, Dv)` and, with `return_attention_scores=True`,
        the weights `(B, Tq, Tv)` (softmax probabilities; a row whose keys
        are all masked is all zeros, never NaN).

    Example:

    >>> import numpy as np
    >>> layer = Attention(score="general")
    >>> context = layer(np.ones((2, 3, 4)), np.ones((2, 5, 4)))
    >>> tuple(context.shape)
    (2, 3, 4)

    References:
        - [Bahdanau et al. 2015](https://arxiv.org/abs/1409.0473)
        - [Luong et al. 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        score="dot",
        units=None,
        rank=None,
        use_bias=True,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        chunk_size=None,
        use_scale=False,
        normalize=False,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        score_mode=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        score = _attention_arguments.check_arguments(
            score,
            units,
            rank,
            dropout,
            chunk_size,
            use_scale,
            normalize,
            use_bias,
            score_mode,
        )
        self.score = score
        self.chunk_size = chunk_size
        self.units = units
        self.rank = rank
        self.use_bias = use_bias
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.use_scale = use_scale
        self.normalize = bool(normalize)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.supports_masking = True

    # The projection weights under the names of 0.1 (read-only views).
    kernel = property(lambda self: self._query_dense.kernel)  # general: W
    query_kernel = property(lambda self: self._query_dense.kernel)
    key_kernel = property(lambda self: self._key_dense.kernel)

    def _denses(self):
        if not self.built:
            return []
        return [
            d for d in (self._query_dense, self._key_dense) if d is not None
        ]

    def load_own_variables(self, store):
        """Also load `.keras` files written by keras_attn 0.1, whose layer
        held the projection kernels itself, before its other weights."""
        legacy_layers.load_own_variables(
            self,
            store,
            self._denses(),
            super().load_own_variables,
            own=(self.score_kernel, self.bias, self.scale),
        )

    def enable_lora(self, rank, targets=None):
        """LoRA (Hu et al. 2021) on the score's projections: `"query"`
        (`W` of `"general"`, `U`/`W₂`) and `"key"` (`V`/`W₁`); both by
        default. The layer's other weights freeze."""
        denses = self._denses()
        if not denses:
            raise ValueError(
                f'score="{self.score}" has no projection for LoRA; build '
                "the layer first, with a general, low_rank or additive score"
            )
        targets = targets or [d.name for d in denses]
        _sublayers.enable_lora(self.name, denses, rank, targets)
        for variable in (self.score_kernel, self.bias, self.scale):
            if variable is not None:
                variable.trainable = False

    def build(
        self, query_shape=None, value_shape=None, key_shape=None, **kwargs
    ):
        if query_shape is None:  # Keras's name for the list of shapes
            query_shape = kwargs.get("input_shape")
        if value_shape is None:  # Keras's convention: [query, value, key]
            query_shape, value_shape, key_shape = _attention_arguments.split(
                query_shape, "query_shape"
            )
        key_shape = value_shape if key_shape is None else key_shape
        _attention_arguments.check_build_shapes(
            self.score, query_shape, value_shape, key_shape
        )
        dq, dk = query_shape[-1], key_shape[-1]
        self._widths = {}
        if self.score not in ("dot", "scaled_dot", "concat"):
            self._widths = {"query": dq, "key": dk}  # fixed by the weights
        score_weights.add(self, dq, dk)
        self.dropout_layer = layers.Dropout(
            self.dropout,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="dropout",
        )
        self.dropout_layer.build(None)
        self.built = True

    # Keras `Attention`'s private helpers, which its tests and subclasses
    # call: the scores with the scale applied, and the padding/causal mask.
    def _calculate_scores(self, query, key, projected_key=None):
        logits = self.compute_scores(query, key, projected_key)
        if self.scale is not None and self.score != "concat":
            logits = ops.multiply(logits, ops.cast(self.scale, logits.dtype))
        return logits

    def _calculate_score_mask(self, scores, v_mask, use_causal_mask):
        shape = ops.shape(scores)
        return masking.merge_masks(
            shape[-2],
            shape[-1],
            value_mask=v_mask,
            use_causal_mask=use_causal_mask,
        )

    def project_key(self, key, value_mask=None):
        """`key (B, Tv, Dk)` through the score's key projection (`V h`
        of `"low_rank"`, `W₁ h` of `"additive"`), padded steps zeroed as
        `call` zeroes them: pass it as `call`'s `projected_key` to
        compute it once for many queries. `None` for the scores that do
        not project their keys (nothing to save)."""
        if not self.built:
            raise ValueError(
                f"Layer {self.name!r} is not built: call it (or `build`) "
                "before `project_key`"
            )
        if self._key_dense is None:
            return None
        key = ops.cast(key, self.compute_dtype)
        return self._key_dense(masking.select(key, value_mask))

    def compute_scores(self, query, key, projected_key=None):
        """Unnormalized scores `(B, Tq, Tk)` for this layer's score
        (`projected_key`: `project_key(key)`, computed already)."""
        if projected_key is None and self._key_dense is not None:
            projected_key = self._key_dense(key)
        if self.score == "dot":
            return scores.dot_score(query, key)
        if self.score == "scaled_dot":
            return scores.scaled_dot_score(query, key)
        if self.score == "general":
            return scores.dot_score(self._query_dense(query), key)
        if self.score == "low_rank":
            return scores.dot_score(self._query_dense(query), projected_key)
        if self.score == "concat":
            return scores.concat_score(
                query, key, self.concat_score_weight, self.scale
            )
        v = self.score_kernel
        if self.norm_scale is not None:
            v = self.norm_scale * v / ops.sqrt(ops.sum(ops.square(v)))
        return scores.additive_score_of_projections(
            self._query_dense(query),
            projected_key,
            v,
            self.bias,
            chunk_size=self.chunk_size,
        )

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        mask=None,
        projected_key=None,
    ):
        if value is None:  # Keras's convention: [query, value, key], mask=[...]
            query, value, key, query_mask, value_mask = (
                _attention_arguments.keras_convention(
                    query, query_mask, value_mask, mask
                )
            )
        key = value if key is None else key
        check_key_value(value.shape, key.shape)
        _attention_arguments.check_projected_key(
            self.score, self._key_dense is not None, projected_key, query
        )
        if len(query.shape) > 3:
            return _attention_arguments.call_nd(
                self.call,
                query,
                value,
                key,
                query_mask,
                value_mask,
                use_causal_mask,
                return_attention_scores,
                training,
            )
        check_features(self._widths, query=query, key=key)
        check_batch(query, value, key)
        query = ops.cast(query, self.compute_dtype)
        check_attention_masks(query, key, query_mask, value_mask)
        # Padded steps are selected out (not multiplied by a zero weight):
        # NaN or inf there never reaches a valid output.
        query = masking.select(query, query_mask)
        key = masking.select(ops.cast(key, self.compute_dtype), value_mask)
        value = masking.select(ops.cast(value, self.compute_dtype), value_mask)
        if projected_key is not None:
            projected_key = masking.select(
                ops.cast(projected_key, self.compute_dtype), value_mask
            )
        logits = self._calculate_scores(query, key, projected_key)
        mask = masking.merge_masks(
            ops.shape(query)[1],
            ops.shape(key)[1],
            query_mask=query_mask,
            value_mask=value_mask,
            use_causal_mask=use_causal_mask,
        )
        weights = masking.masked_softmax(logits, mask)  # (B, Tq, Tv)
        weights = ops.cast(weights, self.compute_dtype)
        dropped = self.dropout_layer(weights, training=training)
        context = ops.einsum("bqk,bkd->bqd", dropped, value)  # (B, Tq, Dv)
        set_output_mask(context, query_mask)
        if return_attention_scores:
            return context, weights
        return context

    def compute_mask(self, inputs, mask=None):
        """The query's mask (the first of a list of masks)."""
        if isinstance(mask, (list, tuple)):
            return mask[0] if mask else None
        return mask

    def compute_output_shape(
        self, query_shape=None, value_shape=None, key_shape=None, **kwargs
    ):
        if query_shape is None:  # Keras's name for the list of shapes
            query_shape = kwargs.get("input_shape")
        if value_shape is None:
            query_shape, value_shape, key_shape = _attention_arguments.split(
                query_shape, "query_shape"
            )
        if key_shape is not None:
            check_key_value(value_shape, key_shape)
        return (*query_shape[:-1], value_shape[-1])

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        mask=None,
        projected_key=None,
    ):
        if value is None:
            query, value, key, query_mask, _ = (
                _attention_arguments.keras_convention(
                    query, query_mask, value_mask, mask
                )
            )
        if key is not None:
            check_key_value(value.shape, key.shape)
        out = keras.KerasTensor(
            (*query.shape[:-1], value.shape[-1]), dtype=self.compute_dtype
        )
        set_output_mask(out, query_mask)
        if return_attention_scores:
            weights = keras.KerasTensor(
                (*query.shape[:-1], value.shape[-2]),
                dtype=self.compute_dtype,
            )
            return out, weights
        return out

    def get_config(self):
        return {
            **super().get_config(),
            "dtype": _sublayers.dtype_config(self, self._denses()),
            "score": self.score,
            "units": self.units,
            "rank": self.rank,
            "use_bias": self.use_bias,
            "dropout": self.dropout,
            "chunk_size": self.chunk_size,
            "use_scale": self.use_scale,
            "normalize": self.normalize,
            "kernel_constraint": keras.constraints.serialize(
                self.kernel_constraint
            ),
            "bias_constraint": keras.constraints.serialize(
                self.bias_constraint
            ),
            "seed": self.seed,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
            "bias_regularizer": keras.regularizers.serialize(
                self.bias_regularizer
            ),
        }
