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
        reduction, name, dtype: as for any `keras.losses.Loss`.

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
    ):
        if not 0.0 <= float(label_smoothing) <= 1.0:
            raise ValueError(
                "Expected label_smoothing in [0, 1]. "
                f"Received: label_smoothing={label_smoothing!r}"
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)
        self.ignore_class = ignore_class

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        per_token = keras.losses.categorical_crossentropy(
            ops.one_hot(y_true, ops.shape(y_pred)[-1]),
            y_pred,
            from_logits=self.from_logits,
            label_smoothing=self.label_smoothing,
        )  # (B, T)
        if self.ignore_class is None:
            return per_token
        keep = ops.not_equal(y_true, self.ignore_class)
        return per_token * ops.cast(keep, per_token.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "from_logits": self.from_logits,
            "label_smoothing": self.label_smoothing,
            "ignore_class": self.ignore_class,
        }
