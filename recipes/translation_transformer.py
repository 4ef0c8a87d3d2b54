"""
Title: English→French translation with a Transformer from MultiHeadPositional
Author: keras_attn contributors
Description: The sibling of `translation.py`: same data, vocabularies,
training, search, evaluation and export, with a Transformer built from
`MultiHeadPositional` layers that decodes with a key/value cache.

Run it: `python recipes/translation_transformer.py --out saved_models`
(at most 30 minutes on two CPU cores). Results beside the GRU's:
docs/results.md.
"""

"""
## The model

Pre-layer-norm blocks: self-attention in the encoder; causal
self-attention, cross-attention and a feed-forward network in the decoder.
`MultiHeadPositional` adds its own sinusoidal positions to queries and
keys. For search, each decoder self-attention keeps a key/value cache
(`empty_cache`, written at `cache_update_index`) and each cross-attention a
memory projected once (`compute_cache`), so a step costs O(T) instead of
re-running the prefix; positions continue at the step's index. The
alignment a step returns is the last cross-attention averaged over heads.
Everything else comes from `translation.py`.
"""

import keras
import translation
from keras import ops

from keras_attn import MultiHeadPositional

HPARAMS = {
    **translation.HPARAMS,
    "members": 1,
    "int8_weights": False,
    "units": 256,  # the model width
    "layers": 2,
    "heads": 4,
    "feed_forward_dim": 512,
    "learning_rate": 1e-3,
    "dropout": 0.1,
    "position": "sinusoidal",  # or "rotary", "alibi", "learned", "none"
    "key_value_heads": 0,  # 0: one per head; fewer: grouped-query (1: MQA)
    # What the decoder's self-attention caches keep while searching: "full",
    # "int8", "window:W" (the last W positions), "sinks:S:W", "int8:W".
    "cache_policy": "full",
}


def cache_policy(name):
    """The `keras_attn.layers` cache policy `name` gives (`None`: full)."""
    from keras_attn.layers import Int8Cache, SinkCache, SlidingWindowCache

    kind, *sizes = name.split(":")
    sizes = [int(n) for n in sizes]
    made = {
        "full": lambda: None,
        "int8": lambda: Int8Cache(*sizes),
        "window": lambda: SlidingWindowCache(*sizes),
        "sinks": lambda: SinkCache(*sizes),
    }.get(kind)
    if made is None:
        raise ValueError(
            "Expected --cache-policy full, int8[:W], window:W or sinks:S:W. "
            f"Received: --cache-policy {name}"
        )
    return made()


def build_transformer(src_vocab, tgt_vocab, hp):
    d, drop = hp["units"], hp["dropout"]
    norm = keras.layers.LayerNormalization

    def attention(policy=None):
        return MultiHeadPositional(
            hp["heads"],
            d // hp["heads"],
            dropout=drop,
            position=None if hp["position"] == "none" else hp["position"],
            max_length=max(hp["source_length"], hp["target_length"]),
            num_key_value_heads=hp["key_value_heads"] or None,
            cache_policy=policy,
        )

    def feed_forward():  # x + W₂ relu(W₁ norm(x))
        layers = [
            norm(),
            keras.layers.Dense(hp["feed_forward_dim"], activation="relu"),
            keras.layers.Dense(d),
        ]
        return lambda x: x + layers[2](layers[1](layers[0](x)))

    src_embed = keras.layers.Embedding(src_vocab, d, mask_zero=True)
    tgt_embed = keras.layers.Embedding(tgt_vocab, d, mask_zero=True)
    enc = [(norm(), attention(), feed_forward()) for _ in range(hp["layers"])]
    dec = [
        (
            norm(),
            attention(cache_policy(hp.get("cache_policy", "full"))),
            norm(),
            attention(),
            feed_forward(),
        )
        for _ in range(hp["layers"])
    ]
    enc_norm, dec_norm = norm(), norm()
    head = translation.TiedOutput(tgt_embed)
    dropout = keras.layers.Dropout(drop)

    # Masks are passed explicitly: `+` between Keras tensors drops them.
    def encode_memory(src, training=None):
        x, mask = dropout(src_embed(src), training=training), src != 0
        for ln, att, ff in enc:
            h = ln(x)
            x = ff(x + att(h, h, query_mask=mask, value_mask=mask))
        return enc_norm(x)

    src = keras.Input((None,), dtype="int32", name="source")
    tgt = keras.Input((None,), dtype="int32", name="target_in")
    memory, src_mask, tgt_mask = encode_memory(src), src != 0, tgt != 0
    x = dropout(tgt_embed(tgt))
    for ln1, self_att, ln2, cross, ff in dec:
        h = ln1(x)
        x = x + self_att(
            h, h, query_mask=tgt_mask, value_mask=tgt_mask, use_causal_mask=True
        )
        x = ff(
            x + cross(ln2(x), memory, query_mask=tgt_mask, value_mask=src_mask)
        )
    trainer = keras.Model([src, tgt], head(dec_norm(x)), name="transformer")

    def encode(source):
        memory = encode_memory(source, training=False)
        return {  # caches sized by the source (a streaming file's input)
            "self": [
                a.empty_cache(source, hp["target_length"]) for _, a, *_ in dec
            ],
            "cross": [c.compute_cache(memory) for _, _, _, c, _ in dec],
            "mask": source != 0,
        }

    def step_fn(tokens, state, index):
        x, caches = tgt_embed(tokens)[:, None], []  # x: (B, 1, d)
        for (ln1, self_att, ln2, cross, ff), cache, memory in zip(
            dec, state["self"], state["cross"], strict=True
        ):
            a, cache = self_att(ln1(x), cache=cache, cache_update_index=index)
            x, caches = x + a, caches + [cache]
            a, _, weights = cross(
                ln2(x),
                cache=memory,
                value_mask=state["mask"],
                start_index=index,
                return_attention_scores=True,
            )  # weights: (B, heads, 1, S)
            x = ff(x + a)
        logits = head(dec_norm(x))[:, 0]  # (B, V)
        alignment = ops.mean(weights[:, :, 0], axis=1)  # (B, S)
        return logits, {**state, "self": caches}, alignment

    return trainer, encode, step_fn


def cache_bytes_per_token(hp):
    """Bytes the decoder's self-attention caches grow by per decoded
    token (float32): keys and values of `key_value_heads` heads in each
    layer. Grouped-query heads divide it by `heads / key_value_heads`."""
    key_dim = hp["units"] // hp["heads"]
    heads = hp["key_value_heads"] or hp["heads"]
    return hp["layers"] * 2 * heads * key_dim * 4


"""
## Train, evaluate, export

`translation.main` does the rest with this builder: the same split,
vocabularies, loss, time budget, searches, BLEU and LiteRT export.
"""


def main(
    pairs=translation.DEFAULT_PAIRS,
    limit=None,
    out=None,
    weights=None,
    verbose=2,
    **overrides,
):
    return translation.main(
        pairs,
        limit,
        out,
        weights,
        verbose,
        build=build_transformer,
        name="translation_en_fr_transformer",
        describe=lambda hp: {
            "kv_cache_bytes_per_token": cache_bytes_per_token(hp)
        },
        **{**HPARAMS, **overrides},
    )


if __name__ == "__main__":
    parser = translation.parse_args(__doc__.split("\n")[1], HPARAMS)
    main(**vars(parser.parse_args()))
