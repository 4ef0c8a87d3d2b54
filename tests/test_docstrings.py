"""The `Example:` sections of the public docstrings run and print what
they show (doctest)."""

import doctest
import importlib

import pytest

MODULES = [
    "keras_attn.additive_attention",
    "keras_attn.attention",
    "keras_attn.callbacks",
    "keras_attn.structured_self_attention",
    "keras_attn.multi_head_positional",
    "keras_attn.sinusoidal_position_encoding",
    "keras_attn.learned_position_embedding",
    "keras_attn.seq2seq.attention_decoder",
    "keras_attn.seq2seq.ensemble",
    "keras_attn.seq2seq.losses",
    "keras_attn.seq2seq.search",
    "keras_attn.seq2seq.monotonic",
    "keras_attn.seq2seq.contrastive",
    "keras_attn.seq2seq.scheduled",
    "keras_attn.seq2seq.evaluation",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
