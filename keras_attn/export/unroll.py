"""RNN layers made LiteRT-ready: bidirectional and masked recurrent
layers rewritten with unrolled, reversible-by-length equivalents."""

_RNN_CLASSES = ("LSTM", "GRU", "SimpleRNN")


def reverse_valid(x, mask):
    """Reverse each sequence's valid prefix in time; padding stays put.

    `x` is `(B, T, ...)`, `mask` a boolean `(B, T)` prefix mask. Step `t`
    of example `b` takes step `len_b - 1 - t` when `t < len_b`.
    """
    from keras import ops

    steps = ops.shape(x)[1]
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)[:, None]  # (B, 1)
    t = ops.arange(steps, dtype="int32")[None, :]  # (1, T)
    index = ops.where(t < lengths, lengths - 1 - t, t)  # (B, T)
    index = ops.reshape(index, (*ops.shape(index), *([1] * (x.ndim - 2))))
    return ops.take_along_axis(x, ops.broadcast_to(index, ops.shape(x)), 1)


def _unrolled_bidirectional(layer):
    """An unrolled stand-in for a masked `Bidirectional(LSTM/GRU)`.

    Keras 3.15's unrolled `go_backwards` RNN inside `Bidirectional`
    misaligns the backward outputs of padded sequences, so the backward
    direction here runs forwards over the reversed valid prefix.
    """
    import keras
    from keras import ops

    def rnn(sub):
        config = keras.saving.serialize_keras_object(sub)
        config["config"].update(unroll=True, go_backwards=False)
        return keras.saving.deserialize_keras_object(config)

    class UnrolledBidirectional(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.forward_rnn = rnn(layer.forward_layer)
            self.backward_rnn = rnn(layer.backward_layer)
            self.supports_masking = True

        def build(self, input_shape):
            self.forward_rnn.build(input_shape)
            self.backward_rnn.build(input_shape)
            self.built = True

        def call(self, inputs, mask=None):
            if mask is None:
                mask = ops.ones(ops.shape(inputs)[:2], dtype="bool")
            fw = self.forward_rnn(inputs, mask=mask)
            bw = self.backward_rnn(reverse_valid(inputs, mask), mask=mask)
            bw = reverse_valid(bw, mask)
            return ops.concatenate([fw, bw], axis=-1)

        def compute_mask(self, inputs, mask=None):
            return mask

    return UnrolledBidirectional(name=layer.name)


def litert_ready(model):
    """A copy of `model` whose recurrent layers are unrolled.

    Keras 3 lowers a rolled `LSTM`/`GRU` to TensorList ops, which LiteRT
    only runs through Flex (Select TF ops). Unrolled over a fixed length
    they become plain builtin ops. Weights are copied; the inputs must have
    a static time length.
    """
    import keras

    def unroll(config):
        if config.get("class_name") in _RNN_CLASSES:
            config["config"]["unroll"] = True
        for key in ("layer", "backward_layer"):
            inner = config.get("config", {}).get(key)
            if isinstance(inner, dict):
                unroll(inner)
        return config

    def clone(layer):
        if isinstance(layer, keras.Model):
            return keras.models.clone_model(layer, clone_function=clone)
        if (
            isinstance(layer, keras.layers.Bidirectional)
            and layer.merge_mode == "concat"
            and layer.return_sequences
            and not layer.return_state
        ):
            return _unrolled_bidirectional(layer)
        config = unroll(keras.saving.serialize_keras_object(layer))
        return keras.saving.deserialize_keras_object(config)

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy


def with_dynamic_length(model):
    """A copy of a one-input token model whose time axis is `None`."""
    import keras

    (spec,) = model.inputs
    tokens = keras.Input((None,), dtype=spec.dtype, name="tokens")
    copy = keras.models.clone_model(model, input_tensors=tokens)
    copy.set_weights(model.get_weights())
    return copy


def has_rnn(model):
    """Whether `model` (or a sub-model) holds a recurrent layer."""
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.Model) and has_rnn(layer):
            return True
        if isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional)):
            return True
    return False
