"""Decoding strategies over one loop, serializable as KerasHub's samplers.

`Sampler.__call__` runs the loop (`base.py`); each strategy is a class:
`GreedySampler`, `RandomSampler`, `TopKSampler`, `TopPSampler`,
`BeamSampler`, `ContrastiveSampler` and `MultiLabelSampler`.
`get("top_k")` (a name, a config dict or a sampler) gives one;
`serialize` and `deserialize` go through Keras's serialization.
"""

import keras

from keras_attn.seq2seq.samplers.base import Sampler
from keras_attn.seq2seq.samplers.beam import BeamSampler
from keras_attn.seq2seq.samplers.contrastive import ContrastiveSampler
from keras_attn.seq2seq.samplers.greedy import GreedySampler
from keras_attn.seq2seq.samplers.multilabel import MultiLabelSampler
from keras_attn.seq2seq.samplers.random import (
    RandomSampler,
    TopKSampler,
    TopPSampler,
)

#: The names `get` knows, each a sampler class.
NAMES = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
    "contrastive": ContrastiveSampler,
    "multilabel": MultiLabelSampler,
}

__all__ = [
    "BeamSampler",
    "ContrastiveSampler",
    "GreedySampler",
    "MultiLabelSampler",
    "RandomSampler",
    "Sampler",
    "TopKSampler",
    "TopPSampler",
    "deserialize",
    "get",
    "serialize",
]


def serialize(sampler):
    """`sampler` as a JSON-ready config (Keras's serialization)."""
    return keras.saving.serialize_keras_object(sampler)


def deserialize(config, custom_objects=None):
    """The sampler of a config written by `serialize`."""
    classes = {cls.__name__: cls for cls in NAMES.values()}
    return keras.saving.deserialize_keras_object(
        config,
        module_objects=classes,
        custom_objects=custom_objects,
    )


def get(identifier):
    """A sampler from a name of `NAMES` (default settings), a config
    dict, or a `Sampler` (returned as is)."""
    if isinstance(identifier, Sampler):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str) and identifier in NAMES:
        return NAMES[identifier]()
    raise ValueError(
        f"Expected a sampler, one of {sorted(NAMES)} or a config dict. "
        f"Received: identifier={identifier!r}"
    )
