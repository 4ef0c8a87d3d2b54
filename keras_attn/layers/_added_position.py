"""What a position encoding added to the inputs does inside
`MultiHeadPositional`: the mixin of `SinusoidalPositionEncoding` and
`LearnedPositionEmbedding`."""

from keras import ops


class AddedToInputs:
    """An encoding `MultiHeadPositional` adds to its query, key and value
    inputs (`attention_role = "inputs"`); the layer's call returns the
    encoding of `(B, T, D)` inputs at positions `start_index...`."""

    attention_role = "inputs"

    def add_to(self, x, axis, start_index=0):
        """`x + p(start_index + i)` along `x`'s `axis`."""
        if axis == len(x.shape) - 2:
            return x + self(x, start_index=start_index)
        moved = ops.moveaxis(x, axis, -2)  # (B, ..., T, D)
        moved = moved + self(moved, start_index=start_index)
        return ops.moveaxis(moved, -2, axis)
