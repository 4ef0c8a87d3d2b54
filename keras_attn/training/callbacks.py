"""Training callbacks: a wall-clock budget that can anneal the learning rate."""

import time

import keras
from keras import ops


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` once `seconds` of training have passed.

    The check runs after every batch, so training ends within one step of
    the budget; the epoch's validation still runs. With `anneal=True` the
    learning rate also falls linearly from its value when training begins
    to zero at the budget, so the last weights are those of a finished
    schedule rather than a run cut short at full learning rate (Li et al.
    2020, "Budgeted training", https://arxiv.org/abs/1905.04753). The
    replacement for `tfa.callbacks.TimeStopping`, which stopped only
    between epochs and could not anneal.

    Args:
        seconds: the budget, from the start of `fit`. Positive.
        anneal: decay the learning rate linearly to zero over the budget.
            The optimizer's learning rate must be a number, not a
            `LearningRateSchedule`; the rate is set before every batch,
            so other learning-rate callbacks (`ReduceLROnPlateau`) have
            no effect. Defaults to `False`.
        clock: a function returning seconds. Defaults to `time.monotonic`.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    >>> history = model.fit(
    ...     np.ones((8, 2)), np.ones((8, 1)), batch_size=2, epochs=3,
    ...     callbacks=[TimeBudget(600, anneal=True)], verbose=0)
    >>> len(history.history["loss"])  # 3 epochs take less than 600 s
    3
    """

    def __init__(self, seconds, anneal=False, clock=time.monotonic):
        super().__init__()
        if isinstance(seconds, bool) or not (
            isinstance(seconds, (int, float)) and seconds > 0
        ):
            raise ValueError(
                f"`seconds` must be a positive number; received {seconds!r}."
            )
        self.seconds = seconds
        self.anneal = bool(anneal)
        self.clock = clock
        self.start = None

    def on_train_begin(self, logs=None):
        self.start = self.clock()
        if self.anneal:
            optimizer = self.model.optimizer  # or the one a loss scaler wraps
            lr = getattr(optimizer, "inner_optimizer", optimizer)._learning_rate
            if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
                raise ValueError(
                    "`TimeBudget(anneal=True)` sets the learning rate itself; "
                    f"the optimizer has a schedule, {lr!r}. Pass a number."
                )
            self.base = float(ops.convert_to_numpy(lr))

    def spent(self):
        """The fraction of the budget used so far (0 before `fit`)."""
        if self.start is None:
            return 0.0
        return (self.clock() - self.start) / self.seconds

    def on_train_batch_begin(self, batch, logs=None):
        if self.anneal:
            left = max(0.0, 1.0 - self.spent())
            self.model.optimizer.learning_rate = self.base * left

    def on_train_batch_end(self, batch, logs=None):
        if self.spent() >= 1.0:
            self.model.stop_training = True
