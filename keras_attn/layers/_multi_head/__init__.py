"""The parts `MultiHeadPositional` adds to Keras's `MultiHeadAttention`,
one concern per module: `arguments` (checks), `sublayers` (grouped heads,
the feed-forward `g`, weight names and LoRA), `positions` (added,
rotary and ALiBi positions, the score bias), `masks` (merging masks and
the masked softmax) and `cache` (the key/value cache)."""
