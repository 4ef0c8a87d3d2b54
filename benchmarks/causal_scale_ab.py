"""Where our causal step's time goes on PyTorch: three training steps
timed in one process, interleaved (medians of 40 each).

- `ours_prescaled`: `MultiHeadPositional(4, 64, position=None)` as it
  ships: the query is scaled before the fused kernel (the float16
  overflow fix);
- `ours_kernel_scale`: the same layer with the scale handed to the kernel
  instead, as Keras does (its private `_attend` replaced for the run);
- `keras`: `keras.layers.MultiHeadAttention(4, 64)`.

    KERAS_BACKEND=torch python -m benchmarks.causal_scale_ab 16384

bf16, batch 1, width 256; prints one JSON line with the medians (ms) and
the ratios to Keras. Made for a GPU (it synchronizes CUDA when present).
"""

import json
import sys
import time

import keras
import numpy as np
from keras import ops

import keras_attn
from keras_attn.layers import multi_head_positional as mhp

WIDTH, HEADS = 256, 4


def kernel_scaled(orig):
    """`_attend` with the scale given to the fused causal kernel."""

    def attend(self, query, key, value, mask, bias, training, explicit, causal):
        fused = not (explicit or self._dropout > 0.0 or len(query.shape) != 4)
        if fused and causal and mask is None and bias is None:
            context = ops.dot_product_attention(
                query,
                key,
                value,
                scale=self._inverse_sqrt_key_dim,
                is_causal=True,
                flash_attention=self._flash_attention,
            )
            return context, None
        return orig(
            self, query, key, value, mask, bias, training, explicit, causal
        )

    return attend


def training_step(layer, x, self_attention):
    import torch

    weights = [
        v.value.detach().requires_grad_(True) for v in layer.trainable_variables
    ]

    def loss():
        inputs = (x,) if self_attention else (x, x)
        out = layer.stateless_call(weights, [], *inputs, use_causal_mask=True)
        return ops.mean(ops.square(ops.cast(out[0], "float32")))

    def run():
        torch.autograd.grad(loss(), weights)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    return run


def main(length, reps=40):
    keras.config.set_dtype_policy("bfloat16")
    rng = np.random.default_rng(0)
    x = ops.convert_to_tensor(rng.normal(size=(1, length, WIDTH)), "bfloat16")
    ours = keras_attn.MultiHeadPositional(HEADS, WIDTH // HEADS, position=None)
    ours(x, use_causal_mask=True)
    theirs = keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS)
    theirs(x, x, use_causal_mask=True)
    shipped = mhp.MultiHeadPositional._attend
    ours_step = training_step(ours, x, True)

    def with_kernel_scale():
        mhp.MultiHeadPositional._attend = kernel_scaled(shipped)
        try:
            ours_step()
        finally:
            mhp.MultiHeadPositional._attend = shipped

    steps = {
        "ours_prescaled": ours_step,
        "ours_kernel_scale": with_kernel_scale,
        "keras": training_step(theirs, x, False),
    }
    for step in steps.values():  # warm up
        step()
        step()
    times = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    ms = {k: 1000 * sorted(v)[len(v) // 2] for k, v in times.items()}
    row = {"length": length, **{k: round(v, 3) for k, v in ms.items()}}
    for name in ("ours_prescaled", "ours_kernel_scale"):
        row[f"{name}_ratio"] = round(ms[name] / ms["keras"], 3)
    print(json.dumps(row))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
