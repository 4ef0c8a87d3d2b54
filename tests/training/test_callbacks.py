import keras
import numpy as np
import pytest

from keras_attn.training.callbacks import TimeBudget


class FakeClock:
    """Each reading advances by `tick` seconds."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def __call__(self):
        self.now += self.tick
        return self.now


class RecordLR(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        lr = self.model.optimizer.learning_rate
        self.rates.append(float(keras.ops.convert_to_numpy(lr)))


def tiny_model(optimizer=None):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer or keras.optimizers.SGD(0.5), "mse")
    return model


XY = (np.ones((8, 2)), np.ones((8, 1)))


def test_stops_within_one_step_of_the_budget():
    # A clock of 1 s a reading: the start reads 1, the batch ends 2, 3, ...
    # With a 10 s budget training stops after the batch that reads 11.
    budget = TimeBudget(10, clock=FakeClock(1.0))
    history = tiny_model().fit(
        *XY, batch_size=2, epochs=100, verbose=0, callbacks=[budget]
    )
    epochs = len(history.history["loss"])
    assert epochs == 3  # 4 batches an epoch; the 10th batch ends in the 3rd
    assert budget.spent() >= 1.0


def test_anneal_takes_the_rate_linearly_to_zero():
    clock = FakeClock(1.0)
    budget = TimeBudget(20, anneal=True, clock=clock)
    record = RecordLR()  # after the budget, so it sees the rate it set
    tiny_model().fit(
        *XY, batch_size=2, epochs=100, verbose=0, callbacks=[budget, record]
    )
    # start=1; batch k (from 0) reads 2k+2 at its begin and 2k+3 at its end.
    expected = [0.5 * (1 - (2 * k + 1) / 20) for k in range(len(record.rates))]
    np.testing.assert_allclose(record.rates, expected, rtol=1e-6)
    assert len(record.rates) == 10 and record.rates[-1] < 0.5 / 19


def test_anneal_reaches_an_optimizer_inside_a_loss_scaler():
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5))
    record = RecordLR()
    tiny_model(scaled).fit(
        *XY,
        batch_size=2,
        epochs=1,
        verbose=0,
        callbacks=[TimeBudget(20, anneal=True, clock=FakeClock(1.0)), record],
    )
    np.testing.assert_allclose(
        record.rates,
        [0.5 * (1 - (2 * k + 1) / 20) for k in range(4)],
        rtol=1e-6,
    )


def test_leaves_an_earlier_stop_in_place():
    # The budget runs after EarlyStopping; it may add a stop, never undo one.
    class StopNow(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = True

    history = tiny_model().fit(
        *XY, epochs=5, verbose=0, callbacks=[StopNow(), TimeBudget(3600)]
    )
    assert len(history.history["loss"]) == 1


def test_refuses_a_schedule_when_annealing():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    model = tiny_model(keras.optimizers.SGD(schedule))
    with pytest.raises(ValueError, match="schedule"):
        model.fit(*XY, verbose=0, callbacks=[TimeBudget(60, anneal=True)])


@pytest.mark.parametrize("seconds", [0, -5, "60", True, None])
def test_bad_budget_names_the_argument(seconds):
    with pytest.raises(ValueError, match=f"`seconds`.*{seconds!r}"):
        TimeBudget(seconds)
