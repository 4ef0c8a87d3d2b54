"""Models built from keras_attn's layers that Keras itself lacks."""

from keras_attn.models.causal_lm import CausalLM
from keras_attn.models.text_generator import Sampling, TextGenerator

__all__ = ["CausalLM", "Sampling", "TextGenerator"]
