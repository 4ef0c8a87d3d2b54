"""Greedy search: the most likely token at every step."""

import keras

from keras_attn.seq2seq.samplers.base import Sampler, argmax


@keras.saving.register_keras_serializable(package="keras_attn")
class GreedySampler(Sampler):
    """The most likely token at every step (first id on ties).

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> # Row = previous token: start (1) → 3 → end (2).
    >>> table = np.log(np.array([[.1, .1, .7, .1], [.1, .1, .1, .7],
    ...                          [.1, .1, .7, .1], [.1, .1, .7, .1]]))
    >>> def step_fn(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), state, None
    >>> out = GreedySampler()(step_fn, np.zeros((1, 1)), 1, 2, 4)
    >>> ops.convert_to_numpy(out["ids"]).tolist()
    [[3, 2, 0, 0]]
    """

    def next_token(self, logits, index, carry):
        return argmax(logits)
