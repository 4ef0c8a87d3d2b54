"""The training loss of a sequence model, for `model.compile(loss=...)`."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class SequenceLoss(keras.losses.Loss):
    """Per-token cross-entropy of target sequences, zero at padding.

    The Keras 3 counterpart of `tfa.seq2seq.SequenceLoss`: targets are
    token ids `(B, T)`, predictions are `(B, T, V)` logits (or
    probabilities), and positions whose target is `ignore_class` (the
    padding id) add nothing. With `label_smoothing` `ε`, the target
    distribution is `(1 − ε)·one_hot + ε / V` (as
    `keras.losses.CategoricalCrossentropy`, which
    `SparseCategoricalCrossentropy` does not offer).

    Targets may also be distributions `(B, T, V)` (one-hot or soft); a
    position whose row is all zeros is padding there.

    The per-token losses go through Keras's `reduction`. With the default
    `"sum_over_batch_size"`, when `y_pred` carries a Keras mask (a model
    whose output follows `Embedding(mask_zero=True)`, as in `compile`), the
    sum is divided by the number of unmasked positions, as tfa's
    `sequence_loss` divided by its weights' sum; on plain arrays it is
    divided by all `B·T` positions.

    Args:
        from_logits: whether `y_pred` are logits. Defaults to `True`.
        label_smoothing: `ε` in `[0, 1]`. Defaults to `0.0`.
        ignore_class: the target id that adds no loss (padding), or
            `None`. Defaults to `0`.
        average_across_timesteps: one of tfa's `SequenceLoss`
            reductions, which replace `reduction` when one is set:
            "average" divides a sum by the sum of the weights, "sum" by
            their number of non-zeros, along the named axis (both axes: a
            scalar; one: `(B,)` or `(T,)`). The weights are
            `sample_weight` `(B, T)` when given, else the non-padding
            positions. Defaults to `False`.
        average_across_batch: as `average_across_timesteps`, over the
            batch. Defaults to `False`.
        sum_over_timesteps: as `average_across_timesteps`, a sum over
            time. Defaults to `False`.
        sum_over_batch: as `average_across_timesteps`, a sum over the
            batch. Defaults to `False`.
        reduction: as for any `keras.losses.Loss`.
        name: as for any `keras.losses.Loss`.
        dtype: as for any `keras.losses.Loss`.

    Example:

    >>> import numpy as np
    >>> loss = SequenceLoss(label_smoothing=0.1)
    >>> y_true = np.array([[3, 1, 0]])  # 0: padding
    >>> y_pred = np.zeros((1, 3, 4))  # uniform over 4 tokens
    >>> round(float(loss(y_true, y_pred)), 4)  # 2 of 3 positions count
    0.9242
    """

    def __init__(
        self,
        from_logits=True,
        label_smoothing=0.0,
        ignore_class=0,
        reduction="sum_over_batch_size",
        name="sequence_loss",
        dtype=None,
        average_across_timesteps=False,
        average_across_batch=False,
        sum_over_timesteps=False,
        sum_over_batch=False,
    ):
        for axis in ("timesteps", "batch"):
            if (
                locals()[f"average_across_{axis}"]
                and locals()[f"sum_over_{axis}"]
            ):
                raise ValueError(
                    f"average_across_{axis} and sum_over_{axis} cannot both "
                    "be set. Received: both True"
                )
        for average, total in (
            ("average_across_batch", "sum_over_timesteps"),
            ("average_across_timesteps", "sum_over_batch"),
        ):
            if locals()[average] and locals()[total]:
                raise ValueError(
                    f"{average} and {total} cannot both be set: the order "
                    "of the mean and the sum is ambiguous (tfa refuses it "
                    "too). Received: both True"
                )
        if not 0.0 <= float(label_smoothing) <= 1.0:
            raise ValueError(
                "Expected label_smoothing in [0, 1]. "
                f"Received: label_smoothing={label_smoothing!r}"
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)
        self.ignore_class = ignore_class
        self.tfa_reduction = {
            "average_across_timesteps": bool(average_across_timesteps),
            "average_across_batch": bool(average_across_batch),
            "sum_over_timesteps": bool(sum_over_timesteps),
            "sum_over_batch": bool(sum_over_batch),
        }

    def _keep(self, y_true, y_pred):
        """Positions that count, `(B, T)` bool, or `None` (all)."""
        if len(y_true.shape) == len(y_pred.shape):  # distributions
            return ops.any(ops.not_equal(y_true, 0), axis=-1)
        if self.ignore_class is None:
            return None
        return ops.not_equal(ops.cast(y_true, "int32"), self.ignore_class)

    def call(self, y_true, y_pred):
        if len(y_true.shape) == len(y_pred.shape):
            target = ops.cast(y_true, y_pred.dtype)
        else:
            target = ops.one_hot(
                ops.cast(y_true, "int32"), ops.shape(y_pred)[-1]
            )
        per_token = keras.losses.categorical_crossentropy(
            target,
            y_pred,
            from_logits=self.from_logits,
            label_smoothing=self.label_smoothing,
        )  # (B, T)
        keep = self._keep(y_true, y_pred)
        if keep is None:
            return per_token
        return per_token * ops.cast(keep, per_token.dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        flags = self.tfa_reduction
        if not any(flags.values()):
            return super().__call__(y_true, y_pred, sample_weight)
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        per_token = self.call(y_true, y_pred)
        if sample_weight is None:
            keep = self._keep(y_true, y_pred)
            weights = ops.ones_like(per_token) if keep is None else keep
        else:
            weights = sample_weight
        weights = ops.cast(weights, per_token.dtype)
        loss = per_token * weights
        return _tfa_reduce(loss, weights, **flags)

    def get_config(self):
        return {
            **super().get_config(),
            "from_logits": self.from_logits,
            "label_smoothing": self.label_smoothing,
            "ignore_class": self.ignore_class,
            **self.tfa_reduction,
        }


def _tfa_reduce(
    loss,
    weights,
    average_across_timesteps,
    average_across_batch,
    sum_over_timesteps,
    sum_over_batch,
):
    """tfa's `sequence_loss` reductions of weighted per-token losses."""

    def divide(total, size):
        return ops.where(
            size == 0, 0.0, total / ops.where(size == 0, 1.0, size)
        )

    nonzero = ops.cast(ops.not_equal(weights, 0), loss.dtype)
    if average_across_timesteps and average_across_batch:
        return divide(ops.sum(loss), ops.sum(weights))
    if sum_over_timesteps and sum_over_batch:
        return divide(ops.sum(loss), ops.sum(nonzero))
    if average_across_timesteps or average_across_batch:
        axis = 0 if average_across_batch else 1
        # As tfa: with an average and a sum on different axes, the average
        # alone applies.
        return divide(ops.sum(loss, axis=axis), ops.sum(weights, axis=axis))
    axis = 0 if sum_over_batch else 1
    return divide(ops.sum(loss, axis=axis), ops.sum(nonzero, axis=axis))
