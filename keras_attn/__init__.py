"""keras_attn: serializable Keras 3 attention layers."""

from keras_attn.layers.additive_attention import AdditiveAttention
from keras_attn.layers.alibi_bias import AlibiBias
from keras_attn.layers.attention import Attention
from keras_attn.layers.learned_position_embedding import (
    LearnedPositionEmbedding,
)
from keras_attn.layers.multi_head_positional import MultiHeadPositional
from keras_attn.layers.rotary_embedding import RotaryEmbedding
from keras_attn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.layers.structured_self_attention import StructuredSelfAttention
from keras_attn.models.causal_lm import CausalLM
from keras_attn.seq2seq import AttentionDecoder
from keras_attn.text import standardize_review

__version__ = "0.3.0.dev0"

__all__ = [
    "AdditiveAttention",
    "AlibiBias",
    "AttentionDecoder",
    "CausalLM",
    "Attention",
    "LearnedPositionEmbedding",
    "MultiHeadPositional",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "StructuredSelfAttention",
    "standardize_review",
    "__version__",
]
