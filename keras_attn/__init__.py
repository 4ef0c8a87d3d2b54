"""keras_attn: serializable Keras 3 attention layers."""

from keras_attn.additive_attention import AdditiveAttention
from keras_attn.attention import Attention
from keras_attn.structured_self_attention import StructuredSelfAttention

__version__ = "0.1.0"

__all__ = [
    "AdditiveAttention",
    "Attention",
    "StructuredSelfAttention",
    "__version__",
]
