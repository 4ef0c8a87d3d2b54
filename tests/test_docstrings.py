"""The `Example:` sections of the public docstrings run and print what
they show (doctest)."""

import doctest
import importlib

import pytest

MODULES = [
    "keras_attn.layers.additive_attention",
    "keras_attn.layers.attention",
    "keras_attn.training.callbacks",
    "keras_attn.layers.structured_self_attention",
    "keras_attn.layers.multi_head_positional",
    "keras_attn.layers.sinusoidal_position_encoding",
    "keras_attn.layers.learned_position_embedding",
    "keras_attn.seq2seq.attention_decoder",
    "keras_attn.seq2seq.ensemble",
    "keras_attn.seq2seq.losses",
    "keras_attn.seq2seq.search",
    "keras_attn.seq2seq.monotonic",
    "keras_attn.seq2seq.samplers.greedy",
    "keras_attn.seq2seq.scheduled",
    "keras_attn.translation.evaluation",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
