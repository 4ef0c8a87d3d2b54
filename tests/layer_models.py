"""Small models built from each layer (each score function, causal or
not, MultiHeadPositional under every position and feed-forward,
StructuredSelfAttention), on token ids `IDS` (`T` long, half the rows
padded), for the export matrix and the edge targets' tests."""

import keras
import numpy as np

import keras_attn

T, V = 12, 60
RNG = np.random.default_rng(0)
IDS = RNG.integers(1, V, size=(8, T)).astype("int32")
IDS[::2, 8:] = 0  # half the rows padded
# Largest |keras - export| allowed, relative to the output's largest |y|.
# Full integer: measured 2% to 25% on these untrained models (see
# docs/export.md); the bound catches a broken conversion, not int8 error.
TOLERANCE = {"none": 1e-4, "float16": 2e-2, "dynamic": 0.1, "int8": 0.5}


def model_with(layer_call, name):
    keras.utils.set_random_seed(1)
    tokens = keras.Input((T,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(V, 16, mask_zero=True)(tokens)
    y, weights = layer_call(x)
    pooled = (
        keras.layers.GlobalAveragePooling1D()(y)
        if len(y.shape) == 3
        else (keras.layers.Flatten()(y))
    )
    out = keras.layers.Dense(2, name="logits")(pooled)
    return keras.Model(tokens, [out, weights], name=name)


def score_model(score, causal=False):
    layer = keras_attn.Attention(score=score, units=8, rank=4)
    return model_with(
        lambda x: layer(
            x, x, use_causal_mask=causal, return_attention_scores=True
        ),
        f"attention_{score}{'_causal' if causal else ''}",
    )


def additive_model():
    layer = keras_attn.AdditiveAttention(units=8)
    return model_with(
        lambda x: layer(x, x, return_attention_scores=True), "additive_layer"
    )


def mhp_model(causal=False, **kwargs):
    layer = keras_attn.MultiHeadPositional(2, 8, **kwargs)
    name = "mhp_" + "_".join(f"{k}-{v}" for k, v in kwargs.items())
    return model_with(
        lambda x: layer(
            x, x, use_causal_mask=causal, return_attention_scores=True
        ),
        name + ("_causal" if causal else ""),
    )


def ssa_model():
    layer = keras_attn.StructuredSelfAttention(
        8, num_hops=3, penalty_coefficient=0.1
    )
    return model_with(
        lambda x: layer(x, return_attention_scores=True), "ssa_penalty"
    )


BUILDERS = {
    "dot": lambda: score_model("dot"),
    "scaled_dot_causal": lambda: score_model("scaled_dot", causal=True),
    "general": lambda: score_model("general"),
    "low_rank": lambda: score_model("low_rank"),
    "additive": lambda: score_model("additive"),
    "additive_causal": lambda: score_model("additive", causal=True),
    "additive_layer": additive_model,
    "mhp_sinusoidal_causal": lambda: mhp_model(True, position="sinusoidal"),
    "mhp_learned": lambda: mhp_model(position="learned", max_length=T),
    "mhp_none_concat": lambda: mhp_model(position=None, feed_forward="concat"),
    "mhp_per_head_gate": lambda: mhp_model(
        position="sinusoidal", feed_forward="per_head", use_gate=True
    ),
    "mhp_learned_concat_causal": lambda: mhp_model(
        True, position="learned", max_length=T, feed_forward="concat"
    ),
    "mhp_rotary_causal": lambda: mhp_model(True, position="rotary"),
    "mhp_alibi_causal": lambda: mhp_model(True, position="alibi"),
    "mhp_rotary_gqa": lambda: mhp_model(
        position="rotary", num_key_value_heads=1
    ),
    "ssa_penalty": ssa_model,
}

# MultiHeadPositional's options the compiled and initial-weight tests
# pin, one a case.
OPTIONS = [
    {"position": None, "num_key_value_heads": 2},
    {"position": None, "num_key_value_heads": 1, "use_gate": True},
    {"position": "rotary", "num_key_value_heads": 2, "use_gate": True},
    {"position": "alibi", "num_key_value_heads": 2},
    {"position": "sinusoidal", "feed_forward": "concat"},
    {"position": "learned", "max_length": 8, "feed_forward": "per_head"},
    {
        "position": "learned",
        "max_length": 8,
        "num_key_value_heads": 2,
        "feed_forward": "concat",
        "feed_forward_dim": 32,
        "use_gate": True,
        "value_dim": 6,
        "output_dim": 10,
    },
]
