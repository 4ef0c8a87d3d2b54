"""Pure functions in `keras.ops` the layers share: masking, scores,
positions."""
