"""Attributions for Keras text models and SavedModels, on every backend.

`keras_attn_runtime.attribution` owns the methods, the default and the
erasure test, over *readers*. This module adds the readers that need
Keras or TensorFlow: `KerasReader` (a raw-text Keras model, or a model
of token ids with its vocabulary: the gradient methods differentiate
through its `Embedding` layers on TensorFlow, JAX or PyTorch, and
`"norm"` reads the vectors its `StructuredSelfAttention` averages) and
`SavedModelReader` (a text classifier's `serving_default`: the methods
that need no gradients).
"""

import os

import numpy as np

from keras_attn.explain.attention import find_vectorizer, own_words, walk
from keras_attn_runtime import attribution as core
from keras_attn_runtime.opener import is_saved_model
from keras_attn_runtime.text import tokens


def attribute(model, texts, method=None, seed=0, vocabulary=None, **options):
    """Which words `model` used for each of `texts`.

    Returns, per text, a dict: `words` (the tokens the model read),
    `scores` (one float a word, higher meaning more support for the
    predicted class), `probability` (`P(positive)`), `method`, `known`
    (per word, whether the vocabulary holds it) and the cost (`passes`:
    rows run; `seconds`). `"attention"` also gives `hops` `(hops, n)`.

    Args:
        model: a raw-text Keras model (one string input, a dict output
            with `probability`, and `attention` for the attention
            methods); a Keras model of token ids with its `vocabulary`;
            a loaded SavedModel (or its folder); a runtime classifier
            (`keras_attn_runtime.LiteRTClassifier`, full-integer files
            included, or an artifact of `keras_attn_runtime.open`); or a
            path to any of these files.
        texts: a string or a list of strings.
        method: one of `keras_attn_runtime.attribution.METHODS`:
            `"attention"` (summed over hops), `"norm"` (Kobayashi et al.
            2020), `"gradient_x_input"`, `"integrated_gradients"`,
            `"occlusion"` (leave one out, batched), `"shapley"`
            (permutation sampling) or `"random"` (the floor). Defaults
            to `None`: `DEFAULT_METHOD`, the most faithful method every
            file can run within its stated cost.
        seed: fixes `"shapley"`'s orders and `"random"`. Defaults to `0`.
        vocabulary: the token list of a token-id Keras model (index 0
            padding, 1 unknown). Defaults to `None`.
        **options: `samples` (`"shapley"`'s orders, default 8), `steps`
            (`"integrated_gradients"`, default 32).

    Example:

    ```python
    (result,) = keras_attn.explain.attribute(model, ["a great film"])
    best = result["words"][int(np.argmax(result["scores"]))]
    ```
    """
    reader = reader_for(model, vocabulary)
    texts = [texts] if isinstance(texts, str) else list(texts)
    return core.attribute_items(
        reader, reader.read(texts), method, seed, **options
    )


def reader_for(model, vocabulary=None):
    """`model` (see `attribute`) as a reader of
    `keras_attn_runtime.attribution`."""
    import keras

    if isinstance(model, (str, os.PathLike)):
        return _reader_of_path(os.fspath(model))
    if isinstance(model, keras.Model):
        return KerasReader(model, vocabulary)
    inner = getattr(model, "model", None)  # keras_attn.loading's artifacts
    if isinstance(inner, keras.Model):
        return KerasReader(inner, vocabulary)
    loaded = getattr(model, "loaded", model)
    if hasattr(loaded, "signatures") and not hasattr(model, "predict_ids"):
        return SavedModelReader(loaded)
    return core.as_reader(model)


def _reader_of_path(path):
    from keras_attn.loading import opener

    if path.endswith(".keras") or os.path.isfile(
        os.path.join(path, "model.keras")
    ):
        return KerasReader(opener.load_keras_model(path))
    if is_saved_model(path):
        return SavedModelReader(opener.load_saved_model(path), path=path)
    return core.as_reader(opener.open(path))


def _pad(rows, length):
    width = length or max([len(r) for r in rows] + [1])
    batch = np.zeros((len(rows), width), "int32")
    for i, row in enumerate(rows):
        row = np.asarray(row)[:width]
        batch[i, : len(row)] = row
    return batch


class KerasReader(core.NamedOutputs):
    """A Keras text classifier as a reader.

    A raw-text model is read through its `TextVectorization` layer (ids,
    and the text's own words where its standardization is the runtime's)
    and run from the vectorizer's output on; a token-id model needs its
    `vocabulary` and reads texts with the runtime's tokenizer."""

    def __init__(self, model, vocabulary=None, batch_size=128):
        import keras

        self.model = model
        self.batch_size = batch_size
        string_input = [t for t in model.inputs if t.dtype == "string"]
        if string_input:
            self.vectorizer = find_vectorizer(model)
            self.vocabulary = self.vectorizer.get_vocabulary()
            self.token_input = self.vectorizer.output
            self.tokens = keras.Model(self.token_input, model.output)
            self.length = self.vectorizer.output.shape[-1]
        else:
            if vocabulary is None:
                raise ValueError(
                    "A Keras model of token ids needs its vocabulary. "
                    f"Received: vocabulary=None for model={model.name!r}"
                )
            self.vectorizer = None
            self.vocabulary = list(vocabulary)
            (self.token_input,) = model.inputs
            self.tokens = model
            self.length = model.inputs[0].shape[-1]
        self.index = {w: i for i, w in enumerate(self.vocabulary) if i > 1}
        outputs = self.tokens.output
        self.outputs = sorted(outputs) if isinstance(outputs, dict) else []
        if self.outputs and "probability" not in self.outputs:
            raise ValueError(
                "Expected a model whose outputs include 'probability'. "
                f"Received outputs: {self.outputs}"
            )
        self.embeddings = [
            layer
            for layer in walk(self.tokens)
            if isinstance(layer, keras.layers.Embedding)
        ]
        self._values = None
        self._compiled = None

    def read(self, texts):
        if self.vectorizer is None:
            items = []
            for text in texts:
                words = list(tokens(text, self.length))
                ids = np.array([self.index.get(w, 1) for w in words], "int32")
                items.append(core.Item(text, ids, words, ids > 1))
            return items
        ids = np.asarray(self.vectorizer(np.array(texts, dtype=object)))
        items = []
        for text, row in zip(texts, ids, strict=True):
            row = np.asarray(row[: int(np.count_nonzero(row))], "int32")
            words = own_words(text, len(row), self.index, row)
            if words is None:
                words = [self.vocabulary[t] for t in row]
            items.append(core.Item(text, row, words, row > 1))
        return items

    def run(self, rows, name):
        # Rows padded to a power of two (at most `batch_size`): a few
        # shapes, so the compiled predict step is traced a few times.
        size = min(self.batch_size, 1 << max(len(rows) - 1, 0).bit_length())
        batch = _pad(rows, self.length)
        spare = -len(rows) % size
        batch = np.concatenate(
            [batch, np.zeros((spare, batch.shape[1]), "int32")]
        )
        out = self.tokens.predict(batch, batch_size=size, verbose=0)
        return np.asarray(out[name] if self.outputs else out)[: len(rows)]

    def _values_model(self):
        """Token ids → (the vectors the attention averages, attention)."""
        import keras

        from keras_attn.layers import StructuredSelfAttention

        if self._values is None:
            found = [
                (host, layer)
                for host in [self.tokens, *walk(self.tokens)]
                for layer in getattr(host, "layers", [])
                if isinstance(layer, StructuredSelfAttention)
            ]
            if len(found) != 1:
                raise ValueError(
                    "method='norm' needs a model with one "
                    "StructuredSelfAttention layer. Received: "
                    f"{len(found)} in model={self.model.name!r}"
                )
            host, layer = found[0]
            node = layer._inbound_nodes[0]
            if len(node.outputs) != 2:
                raise ValueError(
                    "method='norm' needs the StructuredSelfAttention layer "
                    "called with return_attention_scores=True. Received: "
                    f"{len(node.outputs)} output in model={self.model.name!r}"
                )
            inputs = host.inputs[0] if len(host.inputs) == 1 else host.inputs
            if host.inputs[0].dtype == "string":
                inputs = self.token_input
            self._values = keras.Model(
                inputs, [node.arguments.args[0], node.outputs[1]]
            )
        return self._values

    def value_norms(self, item):
        values, attention = self._values_model().predict(
            _pad([item.ids], self.length), verbose=0
        )
        n = len(item.ids)
        norms = np.linalg.norm(np.asarray(values)[0, :n], axis=-1)
        return np.asarray(attention)[0, :, :n], norms

    def embedding_gradients(self, item, scales, positive):
        """The token embeddings `(n, d)` and the gradients `(S, n, d)` of
        the predicted class's probability at each `scale · embedding`
        (every `Embedding` layer's output scaled; several layers' columns
        side by side). While the gradient is taken, the `Embedding`
        layers' `call` is wrapped: do not call the same model from
        another thread meanwhile."""
        from keras import ops

        if not self.embeddings:
            raise ValueError(
                "The gradient methods need an Embedding layer. Received: "
                f"none in model={self.model.name!r}"
            )
        ids = _pad([item.ids], self.length)
        n = len(item.ids)
        batch = np.repeat(ids, len(scales), 0)
        scale = np.asarray(scales, "float32").reshape(-1, 1, 1)
        values = [
            ops.convert_to_numpy(ops.stop_gradient(layer(ids)))
            for layer in self.embeddings
        ]
        grads = _gradients(self, batch, scale, values, positive)
        return (
            np.concatenate([v[0, :n] for v in values], -1),
            np.concatenate([g[:, :n] for g in grads], -1),
        )


def _class_probability(reader, batch, scale, deltas, positive):
    """The predicted class's probability summed over the batch, with each
    `Embedding`'s output `scale · e + delta`."""
    from keras import ops

    originals = [layer.call for layer in reader.embeddings]

    def patched(original, delta):
        def call(inputs, *args, **kwargs):
            out = original(inputs, *args, **kwargs)
            return ops.add(ops.multiply(out, ops.cast(scale, out.dtype)), delta)

        return call

    try:
        for layer, original, delta in zip(
            reader.embeddings, originals, deltas, strict=True
        ):
            object.__setattr__(layer, "call", patched(original, delta))
        out = reader.tokens(batch, training=False)
    finally:
        for layer in reader.embeddings:
            object.__delattr__(layer, "call")
    p = out["probability"] if reader.outputs else out
    p = ops.reshape(p, (-1,))
    return ops.sum(p if positive else 1.0 - p)


def _gradients(reader, batch, scale, values, positive):
    """Gradients of `_class_probability` with respect to each delta (at
    zero), on the running Keras backend."""
    import keras

    shapes = [(len(batch), *v.shape[1:]) for v in values]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if reader._compiled is None:  # one graph a reader, not one a call

            @tf.function(reduce_retracing=True)
            def step(batch, scale, deltas, positive):
                with tf.GradientTape() as tape:
                    tape.watch(deltas)
                    total = _class_probability(
                        reader, batch, scale, deltas, positive
                    )
                return tape.gradient(total, deltas)

            reader._compiled = step
        deltas = [tf.zeros(s) for s in shapes]
        grads = reader._compiled(
            tf.constant(batch), tf.constant(scale), deltas, bool(positive)
        )
        return [np.asarray(g) for g in grads]
    if backend == "jax":
        import jax

        def f(deltas):
            return _class_probability(reader, batch, scale, deltas, positive)

        grads = jax.grad(f)([jax.numpy.zeros(s) for s in shapes])
        return [np.asarray(g) for g in grads]
    if backend == "torch":
        import torch

        with torch.enable_grad():
            deltas = [torch.zeros(s, requires_grad=True) for s in shapes]
            total = _class_probability(reader, batch, scale, deltas, positive)
            grads = torch.autograd.grad(total, deltas)
        return [g.detach().cpu().numpy() for g in grads]
    raise ValueError(
        "The gradient methods run on TensorFlow, JAX or PyTorch. Received: "
        f"KERAS_BACKEND={backend}"
    )


class SavedModelReader(core.NamedOutputs):
    """A text-classifier SavedModel's `serving_default` as a reader.

    The SavedModel takes strings, so a row of tokens goes in as their
    words joined by spaces (the runtime's standardization gives the same
    tokens back); ids are the reader's own numbering of the words it
    has seen. `known` comes from a `known_words` output where there is
    one."""

    def __init__(self, loaded, batch_size=64, path="the SavedModel"):
        from keras_attn.loading.opener import saved_classifier

        self.function = saved_classifier(loaded, path)
        _, specs = self.function.structured_input_signature
        (self.input,) = specs
        outputs = self.function.structured_outputs
        self.outputs = sorted(outputs)
        shape = outputs["attention"].shape if "attention" in outputs else None
        self.limit = shape[-1] if shape is not None else None
        self.batch_size = batch_size
        self.words = ["", "[UNK]"]
        self.index = {}

    def _id(self, word):
        if word not in self.index:
            self.index[word] = len(self.words)
            self.words.append(word)
        return self.index[word]

    def read(self, texts):
        items = []
        for text in texts:
            words = list(tokens(text, self.limit))
            ids = np.array([self._id(w) for w in words], "int32")
            known = np.ones(len(words), bool)
            if "known_words" in self.outputs and words:
                counts = self.run([[i] for i in ids], "known_words")
                known = np.asarray(counts).reshape(-1) > 0
            items.append(core.Item(text, ids, words, known))
        return items

    def run(self, rows, name):
        import tensorflow as tf

        texts = [" ".join(self.words[i] for i in row) for row in rows]
        parts = []
        for start in range(0, len(texts), self.batch_size):
            chunk = tf.constant(texts[start : start + self.batch_size])
            parts.append(np.asarray(self.function(**{self.input: chunk})[name]))
        return np.concatenate(parts)
