"""Moved to `keras_attn.loading.opener` (this name goes in 1.0)."""

from keras_attn.legacy.modules import alias

alias(__name__)
