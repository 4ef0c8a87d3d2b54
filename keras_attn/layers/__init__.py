"""The attention layers (Keras layers a model holds)."""

from keras_attn.layers.additive_attention import AdditiveAttention
from keras_attn.layers.alibi_bias import AlibiBias
from keras_attn.layers.attention import Attention
from keras_attn.layers.cache_policies import (
    Int8Cache,
    SinkCache,
    SlidingWindowCache,
)
from keras_attn.layers.learned_position_embedding import (
    LearnedPositionEmbedding,
)
from keras_attn.layers.multi_head_positional import MultiHeadPositional
from keras_attn.layers.rotary_embedding import RotaryEmbedding
from keras_attn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.layers.structured_self_attention import (
    StructuredSelfAttention,
)

__all__ = [
    "AdditiveAttention",
    "AlibiBias",
    "Attention",
    "Int8Cache",
    "LearnedPositionEmbedding",
    "MultiHeadPositional",
    "RotaryEmbedding",
    "SinkCache",
    "SinusoidalPositionEncoding",
    "SlidingWindowCache",
    "StructuredSelfAttention",
]
