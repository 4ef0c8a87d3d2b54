"""Models built from keras_attn's layers that Keras itself lacks."""

from keras_attn.models.causal_lm import CausalLM

__all__ = ["CausalLM"]
