"""`CausalLM`: a decoder-only Transformer of `MultiHeadPositional` layers
with a key/value cache, the model `keras_attn.export.export_litertlm`
bundles for LiteRT-LM."""

import warnings

import keras
from keras import layers, ops

from keras_attn.layers.multi_head_positional import MultiHeadPositional
from keras_attn.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class CausalLM(keras.Model):
    """A decoder-only language model: token embedding, `num_layers`
    pre-norm blocks of causal self-attention (`MultiHeadPositional`) and
    a feed-forward network, a final norm and logits tied to the
    embedding (Radford et al. 2019; Press & Wolf 2017):

        x_0 = E[t]
        y_l = x_l + Attn_l(LN(x_l))          causal, cached
        x_{l+1} = y_l + W_2 gelu(W_1 LN(y_l))
        logits = LN(x_L) Eᵀ

    The cache follows KerasHub's `call_with_cache` contract: a list of one
    `MultiHeadPositional` cache `(B, 2, S, H_kv, key_dim)` a layer, written
    at `cache_update_index`, so a prompt run through the cache and then one
    token at a time gives the logits of the full pass.

    Args:
        vocabulary_size: tokens, id 0 being padding.
        num_layers: blocks.
        num_heads: query heads of each self-attention.
        hidden_dim: the model width (a multiple of `num_heads`).
        intermediate_dim: the feed-forward network's hidden width.
        num_key_value_heads: key/value heads (grouped-query attention);
            `None`: one a query head.
        position: `MultiHeadPositional`'s `position`: `"rotary"` (the
            default), `"alibi"`, `"learned"` or `"sinusoidal"`.
        max_length: the longest sequence, needed by `"learned"`.
        sliding_window: each query attends to the last `sliding_window`
            positions only (Keras's `sliding_window`); `None`: all.
        dropout: dropout rate in training.
        layer_norm_epsilon: the norms' epsilon.
        quantization: what `quantize` recorded (set by reloading, not by
            hand).

    Example:

    >>> import numpy as np
    >>> lm = CausalLM(50, num_layers=1, num_heads=2, hidden_dim=8,
    ...               intermediate_dim=16)
    >>> tuple(lm(np.ones((2, 5), "int32")).shape)
    (2, 5, 50)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_key_value_heads=None,
        position="rotary",
        max_length=None,
        sliding_window=None,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        quantization=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name in ("vocabulary_size", "num_layers", "num_heads"):
            positive_int(name, locals()[name])
        positive_int("intermediate_dim", intermediate_dim)
        if not isinstance(hidden_dim, int) or hidden_dim % num_heads:
            raise ValueError(
                "Expected hidden_dim to be a multiple of num_heads. "
                f"Received: hidden_dim={hidden_dim!r}, num_heads={num_heads}"
            )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.num_key_value_heads = num_key_value_heads
        self.position = position
        self.max_length = max_length
        self.sliding_window = sliding_window
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.quantization = quantization
        # Every sublayer gets the model's dtype (e.g. mixed precision).
        self._sublayer_dtype = kwargs.get("dtype")
        self.token_embedding = layers.Embedding(
            vocabulary_size,
            hidden_dim,
            name="token_embedding",
            dtype=self._sublayer_dtype,
        )
        self.attention_layers, self.blocks = [], []
        for i in range(num_layers):
            self.attention_layers.append(
                MultiHeadPositional(
                    num_heads,
                    hidden_dim // num_heads,
                    num_key_value_heads=num_key_value_heads,
                    position=position,
                    max_length=max_length,
                    sliding_window=sliding_window,
                    dropout=dropout,
                    name=f"self_attention_{i}",
                    dtype=self._sublayer_dtype,
                )
            )
            self.blocks.append(self._block_layers(i))
        self.final_norm = self._norm("final_norm")
        self.dropout_layer = layers.Dropout(dropout)

    def _norm(self, name):
        return layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon,
            name=name,
            dtype=self._sublayer_dtype,
        )

    def _block_layers(self, i):
        """The norms and feed-forward layers of block `i`."""
        return {
            "attention_norm": self._norm(f"attention_norm_{i}"),
            "feed_forward_norm": self._norm(f"feed_forward_norm_{i}"),
            "intermediate": layers.Dense(
                self.intermediate_dim,
                activation="gelu",
                name=f"ffn_1_{i}",
                dtype=self._sublayer_dtype,
            ),
            "output": layers.Dense(
                self.hidden_dim,
                name=f"ffn_2_{i}",
                dtype=self._sublayer_dtype,
            ),
        }

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        shape = (*input_shape, self.hidden_dim)
        for attention, block in zip(
            self.attention_layers, self.blocks, strict=True
        ):
            block["attention_norm"].build(shape)
            attention.build(shape, shape)
            block["feed_forward_norm"].build(shape)
            block["intermediate"].build(shape)
            block["output"].build((*input_shape, self.intermediate_dim))
        self.final_norm.build(shape)
        self.built = True
        if self.quantization is not None:  # a reloaded quantized model
            given = self.quantization
            config = keras.saving.deserialize_keras_object(given["config"])
            self.quantize(
                given["mode"], config=config, filters=given["filters"]
            )

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Keras's `Model.quantize`, recorded in the config, so that a
        reloaded model quantizes its layers as this one did before its
        weights load: the quantization config (a weight-only int8, say)
        survives a `.keras` file, which a `DTypePolicyMap` alone does not
        carry (Keras 3.15 rebuilds such layers with default quantizers).
        `filters`: `None` or regex strings (a callable cannot be saved)."""
        if callable(filters):
            raise ValueError(
                "Expected filters to be None, a regex string or a list of "
                "them: CausalLM saves its quantization. Received: "
                f"filters={filters!r}"
            )
        with warnings.catch_warnings():  # norms and softmax stay float
            warnings.filterwarnings(
                "ignore", "Layer .* does not have a `quantize` method"
            )
            super().quantize(mode, config=config, filters=filters, **kwargs)
        self.quantization = {
            "mode": mode,
            "config": keras.saving.serialize_keras_object(config),
            "filters": filters,
        }

    def _output_table(self):
        """The embedding table `(V, D)` the logits are tied to, read
        through the layer's call so that a quantized embedding (Keras's
        int8 or int4) gives its dequantized values."""
        embedding = self.token_embedding
        if embedding.quantization_mode is None:
            return embedding.embeddings
        return embedding(ops.arange(self.vocabulary_size, dtype="int32"))

    def _blocks(self, x, training, attend):
        """`x` through every block; `attend(i, layer, h)` runs block
        `i`'s self-attention on the normed `h`, returning its output."""
        for i, (attention, block) in enumerate(
            zip(self.attention_layers, self.blocks, strict=True)
        ):
            x = x + self.dropout_layer(
                attend(i, attention, block["attention_norm"](x)),
                training=training,
            )
            h = block["intermediate"](block["feed_forward_norm"](x))
            x = x + self.dropout_layer(block["output"](h), training=training)
        x = self.final_norm(x)
        table = ops.cast(self._output_table(), x.dtype)
        return ops.matmul(x, ops.transpose(table))  # (B, T, V)

    def call(self, token_ids, padding_mask=None, training=None):
        """Logits `(B, T, V)` of next tokens; `padding_mask` `(B, T)`
        (default: `token_ids != 0`)."""
        if padding_mask is None:
            padding_mask = ops.not_equal(token_ids, 0)
        x = self.dropout_layer(
            self.token_embedding(token_ids), training=training
        )

        def attend(i, attention, h):
            return attention(
                h,
                query_mask=padding_mask,
                value_mask=padding_mask,
                use_causal_mask=True,
                training=training,
            )

        return self._blocks(x, training, attend)

    def empty_cache(self, batch_size, length):
        """One all-zero cache a layer for `length` positions (see
        `MultiHeadPositional.empty_cache`)."""
        return [
            a.empty_cache(batch_size, length) for a in self.attention_layers
        ]

    def call_with_cache(
        self,
        token_ids,
        cache,
        cache_update_index,
        padding_mask=None,
        cache_mask=None,
    ):
        """`(logits, cache)`: `token_ids` `(B, T)` at positions
        `cache_update_index...`, attending to the cache's earlier
        positions and causally among themselves.

        Args:
            token_ids: `(B, T)` int32.
            cache: `empty_cache`'s list, or a previous call's.
            cache_update_index: the position of `token_ids`' first step,
                or a position a row `(B,)` (rows at different positions
                in one call, as a server's decode loop runs them).
            padding_mask: `(B, T)`: the steps that are tokens (padded
                steps are written nowhere another step reads). Defaults
                to every step.
            cache_mask: `(B, S)`: the cache positions that hold tokens
                (e.g. a left-padded prompt's); positions after the
                written ones are masked anyway. Defaults to `None`.
        """

        def attend(i, attention, h):
            out, cache[i] = attention(
                h,
                query_mask=padding_mask,
                value_mask=cache_mask,
                cache=cache[i],
                cache_update_index=cache_update_index,
                use_causal_mask=True,
            )
            return out

        cache = list(cache)
        x = self.token_embedding(token_ids)
        logits = self._blocks(x, False, attend)
        return logits, cache

    def decode_rows(self, token_ids, caches, positions):
        """`(logits (R, V), entries)`: one token a row, each row at a
        position of its own, over caches the call only reads (see
        `MultiHeadPositional.decode_rows`): what a server calls to
        advance many streams at once, writing each layer's new key and
        value in place.

        Args:
            token_ids: `(R,)` int32, a row's token.
            caches: a `(keys, values)` pair a layer, each
                `(R, H_kv, S, key_dim)`: row `r`'s positions
                `0..positions[r]-1`.
            positions: `(R,)` int32: each token's position.

        Returns:
            The logits, and a `(key, value)` pair a layer, each
            `(R, 1, H_kv, key_dim)`, to write at `positions`. Equal to
            `call_with_cache` with the same keys in a full cache and
            `cache_update_index=positions`.
        """
        entries = []

        def attend(i, attention, h):
            keys, values = caches[i]
            out, k, v = attention.decode_rows(h, keys, values, positions)
            entries.append((k, v))
            return out

        x = self.token_embedding(ops.reshape(token_ids, (-1, 1)))
        logits = self._blocks(x, False, attend)
        return logits[:, 0], entries

    def generate(self, token_ids, max_new_tokens, end_token_id, sampler=None):
        """Continue prompts as LiteRT-LM's engine does: every prompt
        token but the last through the cache at once, then one token a
        step from the last, greedily unless `sampler` says otherwise.

        Args:
            token_ids: `(B, T)` int32 prompts (start token included),
                left-padded with 0.
            max_new_tokens: the most tokens a row gets, its end included.
            end_token_id: the token (or list of tokens) that ends a row.
            sampler: a `keras_attn.seq2seq.samplers` sampler; `None`:
                greedy.

        Returns:
            `(B, max_new_tokens)` int32: the new tokens, 0 after the end.
        """
        from keras_attn.seq2seq import samplers

        token_ids = ops.convert_to_tensor(token_ids, "int32")
        length = ops.shape(token_ids)[1]
        positions = length + max_new_tokens
        given = ops.not_equal(token_ids, 0)
        cache_mask = ops.concatenate(
            [
                given,
                ops.ones((ops.shape(token_ids)[0], max_new_tokens), "bool"),
            ],
            axis=1,
        )  # (B, S)
        cache = self.empty_cache(token_ids, positions)
        if token_ids.shape[1] != 1:  # a one-token prompt has nothing before
            _, cache = self.call_with_cache(
                token_ids[:, :-1], cache, 0, given[:, :-1], cache_mask
            )

        def step_fn(tokens, state, index):
            logits, cache = self.call_with_cache(
                tokens[:, None],
                state["cache"],
                length - 1 + index,
                cache_mask=cache_mask,
            )
            return logits[:, 0], {"cache": cache}, None

        sampler = sampler or samplers.GreedySampler()
        out = sampler(
            step_fn,
            {"cache": cache},
            token_ids[:, -1],
            end_token_id,
            max_new_tokens,
        )
        return out["ids"]

    def get_config(self):
        return {
            **super().get_config(),
            "quantization": self.quantization,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "num_key_value_heads": self.num_key_value_heads,
            "position": self.position,
            "max_length": self.max_length,
            "sliding_window": self.sliding_window,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
