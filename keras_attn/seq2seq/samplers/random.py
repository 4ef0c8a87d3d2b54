"""Sampling: ancestral, with a temperature, top-k and top-p (nucleus)."""

import keras
from keras import ops

from keras_attn.seq2seq.samplers.base import NEG_INF, Sampler


def inverse_cdf(logits, u):
    """A token per row of `logits (B, V)` drawn from their softmax by the
    inverse CDF at the uniform numbers `u (B,)` in `[0, 1)`."""
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)  # (B, V)
    token = ops.sum(ops.cast(cdf < u[:, None] * cdf[:, -1:], "int32"), -1)
    return ops.minimum(token, ops.shape(logits)[-1] - 1)


def nucleus(logits, top_p):
    """`logits (B, V)` with every token outside the nucleus at -1e9: the
    most likely tokens whose probability before them is below `top_p`."""
    logits = ops.convert_to_tensor(logits)
    ranked = ops.top_k(logits, logits.shape[-1])[0]  # (B, V), descending
    probs = ops.softmax(ranked, axis=-1)
    before = ops.cumsum(probs, axis=-1) - probs
    kept = ops.where(before < top_p, ranked, float("inf"))
    last = ops.min(kept, axis=-1, keepdims=True)  # the least likely kept
    return ops.where(logits < last, NEG_INF, logits)


def top_k_cut(logits, k):
    """`logits (B, V)` with every token outside the `k` most likely at
    -1e9 (tokens tied with the `k`-th stay in)."""
    kth = ops.top_k(logits, min(k, logits.shape[-1]))[0][:, -1:]
    return ops.where(logits < kth, NEG_INF, logits)


def check_top_k(k, name="k", none_ok=True):
    if (k is None and none_ok) or (isinstance(k, int) and k >= 1):
        return
    also = " or None" if none_ok else ""
    raise ValueError(
        f"Expected {name} to be a positive integer{also}. "
        f"Received: {name}={k!r}"
    )


@keras.saving.register_keras_serializable(package="keras_attn")
class RandomSampler(Sampler):
    """Ancestral sampling from `softmax(logits / temperature)`.

    The random numbers (one per output token) are drawn before the loop
    from `seed`, so a fixed integer seed gives the same outputs on every
    call, also under `jax.jit` and inside an exported graph; or they are
    given (`decode_tokens(..., uniforms=...)`, an input of a LiteRT file).

    Args:
        temperature: divides the logits; must be positive. Defaults to
            `1.0`.
        seed: an int, `None`, or a `keras.random.SeedGenerator` (not
            serializable). Defaults to `None`.
    """

    def __init__(self, temperature=1.0, seed=None):
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(
                "Expected temperature to be positive. "
                f"Received: temperature={temperature!r}"
            )
        self.temperature = temperature
        self.seed = seed

    def get_config(self):
        if isinstance(self.seed, keras.random.SeedGenerator):
            raise ValueError(
                f"A {type(self).__name__} with a SeedGenerator is not "
                "serializable: give an integer seed. Received: "
                f"seed={self.seed!r}"
            )
        return {"temperature": self.temperature, "seed": self.seed}

    def start(self, run, inputs, state, logits, width):
        if run.uniforms is not None:  # given (a LiteRT file's input)
            return state, ops.cast(run.uniforms, "float32")
        shape = (run.max_length, ops.shape(inputs)[0])
        return state, keras.random.uniform(shape, seed=self.seed)

    def cut(self, logits):
        """The logits sampled from: those outside the strategy's cut at
        -1e9 (none here)."""
        return logits

    def next_token(self, logits, index, carry):
        logits = self.cut(logits / self.temperature)
        return inverse_cdf(logits, ops.take(carry, index, axis=0))


@keras.saving.register_keras_serializable(package="keras_attn")
class TopKSampler(RandomSampler):
    """Sampling among the `k` most likely tokens (KerasHub's
    `TopKSampler`).

    Args:
        k: tokens kept per step. Defaults to `5`.
        temperature: as in `RandomSampler`.
        seed: as in `RandomSampler`.
    """

    def __init__(self, k=5, temperature=1.0, seed=None):
        check_top_k(k, "k", none_ok=False)
        super().__init__(temperature, seed)
        self.k = k

    def get_config(self):
        return {"k": self.k, **super().get_config()}

    def cut(self, logits):
        return top_k_cut(logits, self.k)


@keras.saving.register_keras_serializable(package="keras_attn")
class TopPSampler(RandomSampler):
    """Nucleus sampling (Holtzman et al. 2020; KerasHub's `TopPSampler`):
    among the smallest set of most likely tokens whose probability
    reaches `p` (tokens tied with the last one kept stay in), after an
    optional top-`k` cut.

    Args:
        p: a probability in `(0, 1]`. Defaults to `0.1`.
        k: cut to the `k` most likely tokens first. Defaults to `None`.
        temperature: as in `RandomSampler`.
        seed: as in `RandomSampler`.
    """

    def __init__(self, p=0.1, k=None, temperature=1.0, seed=None):
        if not (isinstance(p, (int, float)) and 0 < p <= 1):
            raise ValueError(f"Expected p in (0, 1]. Received: p={p!r}")
        check_top_k(k)
        super().__init__(temperature, seed)
        self.p, self.k = p, k

    def get_config(self):
        return {"p": self.p, "k": self.k, **super().get_config()}

    def cut(self, logits):
        if self.k is not None:
            logits = top_k_cut(logits, self.k)
        return nucleus(logits, self.p)
