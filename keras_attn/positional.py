"""Position encodings as pure functions (Vaswani et al. 2017, §3.5)."""

from keras import ops


def sinusoidal_encoding(
    positions, depth, max_wavelength=10000.0, dtype="float32"
):
    """Sinusoidal encoding of integer or float `positions`.

    `PE[p, 2i] = sin(p / max_wavelength^(2i/depth))`,
    `PE[p, 2i+1] = cos(p / max_wavelength^(2i/depth))`.

    Args:
        positions: tensor of shape `(T,)`.
        depth: the encoding width `D`.
        max_wavelength: the largest wavelength. Defaults to `10000`.

    Returns:
        Tensor of shape `(T, D)`.
    """
    positions = ops.cast(positions, "float32")
    dims = ops.arange(depth)  # (D,)
    pair = ops.cast(dims // 2 * 2, "float32")  # 0, 0, 2, 2, ...
    inv_freq = ops.power(
        ops.cast(max_wavelength, "float32"), -pair / float(depth)
    )  # (D,)
    angles = positions[:, None] * inv_freq[None, :]  # (T, D)
    is_even = ops.equal(dims % 2, 0)[None, :]
    encoding = ops.where(is_even, ops.sin(angles), ops.cos(angles))
    return ops.cast(encoding, dtype)  # (T, D)
