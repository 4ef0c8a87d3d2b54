"""StructuredSelfAttention: the einsum form it had vs the matmul form now.

One run, interleaved repetitions (benchmarks.layer_speed.time_pair):
training step (forward + backward) of the current layer against a subclass
whose `call` is the previous einsum version (no mask, no penalty).

    python -m benchmarks.ssa_einsum_vs_matmul
"""

import numpy as np
import tensorflow as tf
from keras import ops

import keras_attn
from benchmarks.layer_speed import time_pair
from keras_attn.ops import masking


class EinsumSSA(keras_attn.StructuredSelfAttention):
    """The layer's call before it used matmul (unmasked path)."""

    def call(self, inputs, mask=None, training=None):
        hidden = ops.cast(inputs, self.compute_dtype)  # (B, T, D)
        x = ops.einsum("btd,du->btu", hidden, self.hidden_kernel)
        logits = ops.einsum("btu,ur->brt", ops.tanh(x), self.hop_kernel)
        weights = masking.masked_softmax(logits, None)  # (B, r, T)
        return ops.einsum("brt,btd->brd", weights, hidden)


def main():
    rng = np.random.default_rng(0)
    rows = []
    for seq in (64, 256, 1024):
        x = tf.constant(rng.normal(size=(32, seq, 128)).astype("float32"))
        for jit in (False, True):
            r = time_pair(
                lambda: keras_attn.StructuredSelfAttention(
                    350, 30, penalty_coefficient=0.0
                ),
                lambda: EinsumSSA(350, 30, penalty_coefficient=0.0),
                "single",
                x,
                jit,
                9,
            )
            rows.append({"seq": seq, "jit": jit, **r})
            print(
                f"T={seq:5d} jit={jit!s:5s} matmul={r['ours_ms']:8.2f}ms "
                f"einsum={r['keras_ms']:8.2f}ms ratio={r['ratio']:.3f}",
                flush=True,
            )
    return rows


if __name__ == "__main__":
    main()
