"""`MultiHeadPositional`'s positions: added to the inputs (sinusoidal,
learned), rotating queries and keys (rotary), or biasing the scores
(ALiBi, `attention_bias`, an overridden `score_bias`)."""

from keras import ops

from keras_attn.layers._multi_head.arguments import ADDED
from keras_attn.layers.learned_position_embedding import (
    LearnedPositionEmbedding,
)
from keras_attn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.ops import positional


class PositionsMixin:
    """For a `MultiHeadAttention` subclass with `position`, `max_length`,
    `max_wavelength`, `scaling_factor` and `_position_axis`."""

    def _build_positions(self, widths):
        """The position layers; `widths` maps each stream to its input
        width. A sinusoidal encoding fits any width: one layer. A learned
        table is made per distinct width (one for self-attention)."""
        self._stream_positions = {}
        if self.position not in ADDED:
            return
        tables = {}
        for stream in ("query", "value", "key"):
            width = widths[stream]
            if not tables or (
                self.position == "learned" and width not in tables
            ):
                name = f"{stream}_position"
                if self.position == "sinusoidal":
                    table = SinusoidalPositionEncoding(
                        dtype=self.dtype_policy, name=name
                    )
                else:
                    table = LearnedPositionEmbedding(
                        self.max_length, dtype=self.dtype_policy, name=name
                    )
                table.build((None, None, width))
                setattr(self, name, table)
                tables[width] = table
            self._stream_positions[stream] = tables.get(
                width, self.query_position
            )

    def _add_positions(self, x, stream, start_index=0):
        """`x + p(start_index + i)` along the attention axis."""
        if self.position not in ADDED:
            return x
        axis, table = self._position_axis, self._stream_positions[stream]
        if axis == len(x.shape) - 2:
            return x + table(x, start_index=start_index)
        moved = ops.moveaxis(x, axis, -2)  # (B, ..., T, D)
        moved = moved + table(moved, start_index=start_index)
        return ops.moveaxis(moved, -2, axis)

    def _rotate(self, x, start):
        """`x` `(B, T, H, K)` rotated at positions `start..start+T-1`."""
        if self.position != "rotary":
            return x
        positions = ops.arange(ops.shape(x)[1]) + start
        return positional.rotary(
            x, positions, self.max_wavelength, self.scaling_factor
        )

    def score_bias(self, query_positions, key_positions):
        """A bias for the scores, broadcastable to `(B, H, Tq, Tk)`, or
        `None`: ALiBi's for `position="alibi"`. Override it for other
        relative positions (e.g. a learned T5 bucket table built in
        `build`); `query_positions` `(Tq,)` and `key_positions` `(Tk,)`
        are the steps' absolute positions (they continue in a cache)."""
        if self.position != "alibi":
            return None
        slopes = positional.alibi_slopes(self.num_heads)
        return positional.alibi_bias(slopes, query_positions, key_positions)

    def _total_bias(self, q, start, length, attention_bias):
        """`attention_bias` plus `score_bias`'s for queries `q`
        `(B, Tq, H, K)` from position `start` over `length` keys."""
        if len(q.shape) != 4:
            return attention_bias
        own = self.score_bias(
            ops.arange(ops.shape(q)[1]) + start, ops.arange(length)
        )
        if own is None or attention_bias is None:
            return own if attention_bias is None else attention_bias
        return ops.add(attention_bias, own)
