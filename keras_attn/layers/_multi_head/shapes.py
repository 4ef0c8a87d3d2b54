"""`MultiHeadPositional`'s output shapes and specs, and the Keras
settings it exposes under the public names of keras_attn 0.2."""

from keras_attn.layers._multi_head.arguments import output_spec
from keras_attn.validation import check_key_value


class ShapesMixin:
    """For a `MultiHeadAttention` subclass."""

    # Keras's private settings under the public names our 0.2 layer had.
    flash_attention = property(lambda self: self._flash_attention)
    sliding_window = property(lambda self: self._sliding_window)
    use_gate = property(lambda self: self._use_gate)

    def compute_output_shape(
        self, query_shape, value_shape=None, key_shape=None, **kwargs
    ):
        if value_shape is not None and key_shape is not None:
            check_key_value(value_shape, key_shape)
        tail = self._output_shape or (query_shape[-1],)
        return (*query_shape[:-1], *tail)

    def compute_output_spec(
        self, query, value=None, key=None, return_attention_scores=False, **kw
    ):
        value = query if value is None else value
        if key is not None:
            check_key_value(value.shape, key.shape)
        return output_spec(self, query, value, return_attention_scores, kw)
