"""Position encodings as pure functions (Vaswani et al. 2017, §3.5)."""

from keras import ops


def per_row(start):
    """Whether `start` gives each row its own position: a `(B,)` tensor
    (rows at different steps in one call), not one position for all."""
    return len(getattr(start, "shape", ())) == 1


def step_positions(length, start):
    """The positions of `length` steps from `start`: `(T,)` from one
    position, `(B, T)` from a position a row (`per_row`)."""
    if per_row(start):
        steps = ops.arange(length, dtype="int32")
        return ops.cast(start, "int32")[:, None] + steps[None]
    return ops.arange(length) + start


def sinusoidal_encoding(
    positions, depth, max_wavelength=10000.0, dtype="float32"
):
    """Sinusoidal encoding of integer or float `positions`.

    `PE[p, 2i] = sin(p / max_wavelength^(2i/depth))`,
    `PE[p, 2i+1] = cos(p / max_wavelength^(2i/depth))`.

    Args:
        positions: tensor of shape `(T,)`, or `(B, T)`.
        depth: the encoding width `D`.
        max_wavelength: the largest wavelength. Defaults to `10000`.

    Returns:
        Tensor of shape `(T, D)` (or `(B, T, D)`).
    """
    positions = ops.cast(positions, "float32")
    dims = ops.arange(depth)  # (D,)
    pair = ops.cast(dims // 2 * 2, "float32")  # 0, 0, 2, 2, ...
    inv_freq = ops.power(
        ops.cast(max_wavelength, "float32"), -pair / float(depth)
    )  # (D,)
    angles = positions[..., None] * inv_freq  # (..., T, D)
    is_even = ops.equal(dims % 2, 0)
    encoding = ops.where(is_even, ops.sin(angles), ops.cos(angles))
    return ops.cast(encoding, dtype)  # (T, D)


def rotary(x, positions, max_wavelength=10000.0, scaling_factor=1.0):
    """Rotary position embedding (Su et al. 2021) of `x` `(..., T, H, K)`.

    KerasHub's half-split layout: with `x = [x₁; x₂]` (halves of the last
    axis) and angles `θ_j = (p / s) · w^(−2j/K)`, `j < K/2`,
    `rotary(x) = x · cos Θ + [−x₂; x₁] · sin Θ` where `Θ = [θ; θ]`, so
    `rotary(q, p) · rotary(k, p')` depends on `p − p'` only.

    Args:
        x: `(..., T, H, K)` with `K` even.
        positions: `(T,)` positions of the `T` steps, or `(B, T)` (a row
            each, `x` then `(B, T, H, K)`).
        max_wavelength: `w`. Defaults to `10000`.
        scaling_factor: `s`, dividing positions (position interpolation).
            Defaults to `1`.
    """
    depth = x.shape[-1]
    exponent = ops.arange(0, depth, 2, dtype="float32") / float(depth)
    inv_freq = ops.power(ops.cast(max_wavelength, "float32"), -exponent)
    scaled = ops.cast(positions, "float32") / float(scaling_factor)
    angles = scaled[..., None] * inv_freq  # (..., T, K/2)
    angles = ops.concatenate([angles, angles], axis=-1)[..., None, :]
    cos, sin = ops.cos(angles), ops.sin(angles)  # (..., T, 1, K)
    x32 = ops.cast(x, "float32")
    first, second = ops.split(x32, 2, axis=-1)
    # −x₂ as a product with −1 (the same floats): NPU compilers that run
    # no negation run it.
    turned = ops.concatenate([ops.multiply(second, -1.0), first], axis=-1)
    return ops.cast(x32 * cos + turned * sin, x.dtype)


def alibi_slopes(num_heads):
    """ALiBi head slopes (Press et al. 2022): `2^(−8h/H)`, `h = 1..H`, for
    `H` a power of two; otherwise those of the nearest smaller power of
    two `n`, then every other slope of `2n` heads (the paper's code)."""
    import math

    def powers(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    return powers(n) + powers(2 * n)[0::2][: num_heads - n]


def alibi_bias(slopes, query_positions, key_positions):
    """`−m_h · |i − j|`, `(1, H, Tq, Tk)`: ALiBi's score bias for query
    positions `i` `(Tq,)` and key positions `j` `(Tk,)` (in causal
    attention the masked keys `j > i` never count, so this is the paper's
    `−m_h (i − j)`); `(B, H, Tq, Tk)` for query positions a row `(B, Tq)`."""
    slopes = ops.convert_to_tensor(slopes, "float32")
    i = ops.cast(query_positions, "float32")[..., None]
    j = ops.cast(key_positions, "float32")[None, :]
    distance = ops.abs(i - j)  # (Tq, Tk) or (B, Tq, Tk)
    if len(distance.shape) == 3:
        return -slopes[None, :, None, None] * distance[:, None]
    return -slopes[None, :, None, None] * distance[None, None]
