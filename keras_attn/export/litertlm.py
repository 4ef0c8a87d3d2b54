"""A decoder-only Keras model as a `.litertlm` bundle, the file Google's
on-device engine LiteRT-LM runs (its Python API, `litert-lm run`,
`litert-lm serve`).

The bundle holds, written by `litert-lm-builder`:

- a LiteRT model (`prefill_decode`) with one `prefill_<T>` signature a
  prefill length and a `decode` signature. Inputs: `tokens` `[1, T]`
  int32, `input_pos` `[T]` int32 (absolute positions) and, a layer `l`,
  `kv_cache_k_<l>` and `kv_cache_v_<l>` `[1, H_kv, S, key_dim]` float32;
  outputs: the same caches, whole and updated (the engine binds one
  buffer to both sides), and for `decode` `logits` `[1, 1, V]`; and,
  which the engine does not read, `decode_rows_<R>` signatures over the
  same weights: `R` streams' tokens `[R]` at their own positions
  `input_pos` `[R]`, over caches `cache_k_<l>`/`cache_v_<l>`
  `[R, H_kv, S, key_dim]` that the call only reads; out come `logits`
  `[R, V]` and each layer's new key and value `new_k_<l>`/`new_v_<l>`
  `[R, H_kv, key_dim]`, which the caller writes in place (a server's
  many streams in one call);
- the tokenizer (a Hugging Face `tokenizer.json` or a SentencePiece
  model);
- the `LlmMetadata`: start and stop tokens, the prompt template, the
  sampler (greedy: LiteRT-LM's CPU sampler runs `TOP_P` only, so `k=1`),
  the context length.

How the engine feeds the model, which the signatures follow: it prepends
the start token, prefills every prompt token but the last (split over the
prefill signatures, a chunk padded with token 0 at position 0), and
decodes from the last. A padded step is told by its position (not the
first's plus its row), is attended by no one and writes only slots after
the chunk's tokens, which the next steps overwrite before reading.

What the engine cannot carry is refused by name: a model without
`call_with_cache` (an encoder-decoder's cross-attention memory), a
`cache_policy` (ring slots, positions and int8 scales have no place in
one key and one value buffer a layer; Keras's `sliding_window` on a full
cache does), beam search (the engine samples one sequence).
"""

import json
import os

from keras_attn.export.destination import check_destination, staged
from keras_attn.export.litert import export_signatures_tflite, scratch_dir
from keras_attn_runtime.rows import PREFIX as DECODE_ROWS_PREFIX
from keras_attn_runtime.rows import cache_names as row_cache_names
from keras_attn_runtime.rows import engine_cache_names as cache_names

PREFILL, DECODE = "prefill", "decode"
# The engine's cache layout from a layer's `(1, S, H_kv, key_dim)` keys
# or values: `[1, H_kv, S, key_dim]` (without a mask input the engine reads
# the context length from axis 2). The permutation is its own inverse.
ENGINE_CACHE_AXES = (0, 2, 1, 3)
TOKENS, POSITIONS, LOGITS = "tokens", "input_pos", "logits"
SAMPLERS = ("greedy",)
# The row counts of the signatures that decode many streams in one call
# (`decode_rows_<R>`, read by `keras_attn_runtime.rows`).
DECODE_ROWS = (1, 4, 16)


def _cache_shapes(model, context_length):
    """`[(H_kv, key_dim)]` a layer, refusing what the engine cannot run."""
    from keras_attn.layers.multi_head_positional import MultiHeadPositional

    if not callable(getattr(model, "call_with_cache", None)) or not callable(
        getattr(model, "empty_cache", None)
    ):
        raise ValueError(
            "Expected a decoder-only model with call_with_cache(token_ids, "
            "cache, cache_update_index, padding_mask) and empty_cache("
            "batch_size, length), such as keras_attn.models.CausalLM; "
            "LiteRT-LM runs decoder-only models (an encoder-decoder's "
            "cross-attention memory has no place in it). Received: "
            f"model={type(model).__name__}"
        )
    for layer in model._flatten_layers(include_self=False):
        if not isinstance(layer, MultiHeadPositional):
            continue
        if layer.cache_policy is not None:
            raise ValueError(
                "LiteRT-LM keeps one key and one value buffer a layer, "
                f"[1, heads, {context_length}, key_dim]; layer "
                f"{layer.name!r} has cache_policy={layer.cache_policy!r}, "
                "whose state (ring slots, positions, int8 scales) does not "
                "fit there. Use the full cache (a window as Keras's "
                "sliding_window= is exported)."
            )
        limit = getattr(layer, "max_length", None)
        if layer.position == "learned" and limit and limit < context_length:
            raise ValueError(
                f"Layer {layer.name!r} learned positions up to "
                f"max_length={limit}; expected context_length <= {limit}. "
                f"Received: context_length={context_length}"
            )
    shapes = []
    for cache in model.empty_cache(1, context_length):
        shape = tuple(getattr(cache, "shape", ()))
        if len(shape) != 5 or shape[:3] != (1, 2, context_length):
            raise ValueError(
                "Expected each layer's cache as MultiHeadPositional's "
                "full cache (1, 2, length, heads, key_dim). Received: a "
                f"cache of shape {shape or type(cache).__name__}"
            )
        shapes.append(shape[3:])
    return shapes


def _check_lengths(context_length, prefill_lengths):
    from keras_attn.validation import positive_int

    positive_int("context_length", context_length)
    lengths = list(prefill_lengths)
    if not lengths:
        raise ValueError(
            "Expected at least one prefill length. Received: "
            f"prefill_lengths={prefill_lengths!r}"
        )
    for length in lengths:
        positive_int("prefill_lengths", length)
        if length > context_length:
            raise ValueError(
                "Expected prefill_lengths to be at most context_length "
                f"({context_length}). Received: prefill_lengths={lengths!r}"
            )
    return sorted(set(lengths))


def _check_rows(decode_rows):
    from keras_attn.validation import positive_int

    if isinstance(decode_rows, (str, bytes)) or not hasattr(
        decode_rows, "__iter__"
    ):
        raise ValueError(
            "Expected decode_rows to be a sequence of row counts. "
            f"Received: decode_rows={decode_rows!r}"
        )
    rows = list(decode_rows)
    for n in rows:
        positive_int("decode_rows", n)
    return sorted(set(rows))


def _signature(model, shapes, context_length, steps, with_logits):
    """One signature of `steps` tokens: the engine's inputs and
    outputs around `model.call_with_cache`."""
    import tensorflow as tf
    from keras import ops

    specs = [
        tf.TensorSpec([1, steps], tf.int32, name=TOKENS),
        tf.TensorSpec([steps], tf.int32, name=POSITIONS),
    ]
    names = [TOKENS, POSITIONS]
    for layer, (heads, dim) in enumerate(shapes):
        for name in cache_names(layer):
            layer_shape = (1, context_length, heads, dim)
            shape = [layer_shape[a] for a in ENGINE_CACHE_AXES]
            specs.append(tf.TensorSpec(shape, tf.float32, name))
            names.append(name)

    def run(*inputs):
        given = dict(zip(names, inputs, strict=True))
        positions = given[POSITIONS]
        first = positions[0]
        # A padded step's position is not its row's (the engine pads a
        # prefill chunk with position 0).
        steps_mask = ops.equal(
            positions, first + ops.arange(steps, dtype="int32")
        )[None]  # (1, T)
        cache = []
        for layer in range(len(shapes)):
            k, v = (
                ops.transpose(given[n], ENGINE_CACHE_AXES)  # (1, S, H, K)
                for n in cache_names(layer)
            )
            cache.append(ops.stack([k, v], axis=1))  # (1, 2, S, H, K)
        logits, cache = model.call_with_cache(
            given[TOKENS], cache, first, padding_mask=steps_mask
        )
        out = {LOGITS: ops.cast(logits, "float32")} if with_logits else {}
        for layer, c in enumerate(cache):
            c = ops.cast(c, "float32")
            k_name, v_name = cache_names(layer)
            out[k_name] = ops.transpose(c[:, 0], ENGINE_CACHE_AXES)
            out[v_name] = ops.transpose(c[:, 1], ENGINE_CACHE_AXES)
        return out

    return tf.function(run, input_signature=specs)


def _rows_signature(model, shapes, context_length, rows):
    """`decode_rows_<rows>`: one token a row, each at its own position,
    over caches `[R, H_kv, S, key_dim]` the call only reads; the new keys
    and values `[R, H_kv, key_dim]` come out for the caller to write
    (`CausalLM.decode_rows`)."""
    import tensorflow as tf
    from keras import ops

    specs = [
        tf.TensorSpec([rows], tf.int32, name=TOKENS),
        tf.TensorSpec([rows], tf.int32, name=POSITIONS),
    ]
    names = [TOKENS, POSITIONS]
    for layer, (heads, dim) in enumerate(shapes):
        for name in row_cache_names(layer)[0]:
            shape = [rows, heads, context_length, dim]
            specs.append(tf.TensorSpec(shape, tf.float32, name))
            names.append(name)

    def run(*inputs):
        given = dict(zip(names, inputs, strict=True))
        caches = [
            tuple(given[n] for n in row_cache_names(layer)[0])
            for layer in range(len(shapes))
        ]
        logits, entries = model.decode_rows(
            given[TOKENS], caches, given[POSITIONS]
        )
        out = {LOGITS: ops.cast(logits, "float32")}
        for layer, pair in enumerate(entries):
            for name, entry in zip(
                row_cache_names(layer)[1], pair, strict=True
            ):
                out[name] = ops.cast(entry[:, 0], "float32")
        return out

    return tf.function(run, input_signature=specs)


def _token_id(tokenizer, token, arg):
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(
            f"Expected {arg} to be a token of the tokenizer. Received: "
            f"{arg}={token!r}"
        )
    return found


def _tokenizer(tokenizer):
    """`(kind, path or Tokenizer)`: a SentencePiece `.model` path, or a
    `tokenizers.Tokenizer` (given or read from a `tokenizer.json`)."""
    if isinstance(tokenizer, (str, os.PathLike)):
        path = os.fspath(tokenizer)
        if not os.path.isfile(path):
            raise ValueError(
                f"Expected tokenizer to be a file. Received: tokenizer={path!r}"
            )
        if path.endswith(".model"):
            return "sentencepiece", path
        from tokenizers import Tokenizer

        try:
            return "hf", Tokenizer.from_file(path)
        except Exception as error:
            raise ValueError(
                "Expected tokenizer to be a tokenizer.json or a SentencePiece "
                f".model. Received: tokenizer={path!r} ({error})"
            ) from None
    if callable(getattr(tokenizer, "token_to_id", None)):
        return "hf", tokenizer
    raise ValueError(
        "Expected tokenizer to be a tokenizers.Tokenizer, a tokenizer.json "
        f"or a SentencePiece .model. Received: tokenizer={tokenizer!r}"
    )


class _Ids:
    """`token_to_id` of a SentencePiece model."""

    def __init__(self, path):
        import sentencepiece

        self.model = sentencepiece.SentencePieceProcessor(model_file=path)

    def token_to_id(self, token):
        found = self.model.piece_to_id(token)
        return (
            None if found == self.model.unk_id() and token != "<unk>" else found
        )


def llm_metadata(ids, start_token, stop_tokens, prompt, context_length):
    """The bundle's `LlmMetadata` (a protocol buffer)."""
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    meta = llm_metadata_pb2.LlmMetadata()
    meta.start_token.token_ids.ids.append(
        _token_id(ids, start_token, "start_token")
    )
    for token in stop_tokens:
        stop = meta.stop_tokens.add()
        stop.token_ids.ids.append(_token_id(ids, token, "stop_tokens"))
    prefix, suffix = prompt
    meta.prompt_templates.user.prefix = prefix
    meta.prompt_templates.user.suffix = suffix
    # The conversation API (`litert-lm run --prompt`) renders this one:
    # each user turn between the prefix and the suffix.
    meta.jinja_prompt_template = (
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'user' -%}"
        f"{json.dumps(prefix)[1:-1]}"
        "{%- if message['content'] is string -%}{{ message['content'] }}"
        "{%- else -%}{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}"
        f"{json.dumps(suffix)[1:-1]}"
        "{%- endif -%}{%- endfor -%}"
    )
    sampler = meta.sampler_params
    sampler.type = sampler.TOP_P  # the CPU sampler's one type; k=1 is greedy
    sampler.k, sampler.p, sampler.temperature = 1, 1.0, 1.0
    meta.max_num_tokens = context_length
    meta.llm_model_type.generic_model.SetInParent()
    meta.supports_thinking = False
    meta.supports_function_calling = False
    return meta


def _write_bundle(target, functions, quantize, tokenizer, meta):
    """The LiteRT model of `functions`, the tokenizer (a
    `tokenizers.Tokenizer` or a SentencePiece model's path) and `meta`,
    bundled by `litert-lm-builder` into `target`, atomically."""
    from litert_lm_builder import litertlm_builder as builder

    with scratch_dir() as tmp:
        tflite = os.path.join(tmp, "model.tflite")
        export_signatures_tflite(functions, tflite, quantize=quantize)
        bundle = builder.LitertLmFileBuilder()
        bundle.add_tflite_model(tflite, builder.TfLiteModelType.PREFILL_DECODE)
        if isinstance(tokenizer, str):
            bundle.add_sentencepiece_tokenizer(tokenizer)
        else:
            tokenizer_path = os.path.join(tmp, "tokenizer.json")
            tokenizer.save(tokenizer_path)
            bundle.add_hf_tokenizer(tokenizer_path)
        meta_path = os.path.join(tmp, "llm_metadata.pb")
        with open(meta_path, "wb") as f:
            f.write(meta.SerializeToString())
        bundle.add_llm_metadata(meta_path)
        with staged(target) as (staging,):
            with open(staging, "wb") as f:
                bundle.build(f)


def export_litertlm(
    model,
    path,
    *,
    tokenizer,
    start_token,
    stop_tokens,
    context_length,
    prefill_lengths=(8, 32),
    prompt_prefix="",
    prompt_suffix="",
    sampler="greedy",
    quantize="none",
    decode_rows=DECODE_ROWS,
    overwrite=False,
    protect=(),
):
    """Write `path`, a `.litertlm` bundle of a decoder-only Keras model.

    Args:
        model: a decoder-only model with KerasHub's cache contract,
            `call_with_cache(token_ids, cache, cache_update_index,
            padding_mask)` and `empty_cache(batch_size, length)`, whose
            caches are `MultiHeadPositional`'s full caches (such as
            `keras_attn.models.CausalLM`).
        path: the `.litertlm` file.
        tokenizer: a `tokenizers.Tokenizer`, a `tokenizer.json` path, or
            a SentencePiece `.model` path: the engine tokenizes with it.
        start_token: the token the engine puts before every prompt.
        stop_tokens: tokens that end an answer.
        context_length: the cache's positions: prompt and answer.
        prefill_lengths: the prefill signatures' lengths; the engine
            splits a prompt over them. Defaults to `(8, 32)`.
        prompt_prefix: text the engine puts before a user's prompt.
        prompt_suffix: text the engine puts after a user's prompt (e.g.
            `" [sep]"` after a sentence to translate).
        sampler: `"greedy"` (the only search the bundle's metadata sets;
            the engine's `SamplerConfig` may still choose top-k/top-p).
        quantize: `"none"`, `"float16"` or `"dynamic"` (int8 weights).
        decode_rows: the row counts of the `decode_rows_<R>` signatures
            added beside the engine's (over the same weights), which
            decode many streams in one call
            (`keras_attn_runtime.generator.BundleGenerator`); LiteRT-LM
            reads only its own. Defaults to `(1, 4, 16)`; `()` adds none.
        overwrite: replace `path` even when it is not a LiteRT-LM bundle.
        protect: paths never to replace (see `check_destination`).

    Returns:
        `path`.
    """
    if sampler not in SAMPLERS:
        raise ValueError(
            f"Expected sampler in {SAMPLERS}: LiteRT-LM decodes one "
            "sequence, so beam search cannot run in it. Received: "
            f"sampler={sampler!r}"
        )
    lengths = _check_lengths(context_length, prefill_lengths)
    rows = _check_rows(decode_rows)
    target = check_destination(path, "litertlm", overwrite, protect)
    kind, tok = _tokenizer(tokenizer)
    ids = tok if kind == "hf" else _Ids(tok)
    meta = llm_metadata(
        ids,
        start_token,
        list(stop_tokens),
        (prompt_prefix, prompt_suffix),
        context_length,
    )
    functions = _functions(model, context_length, lengths, rows)
    _write_bundle(target, functions, quantize, tok, meta)
    return path


def _functions(model, context_length, lengths, rows):
    """The bundle's signatures by name: the engine's `prefill_<T>` and
    `decode`, and `decode_rows_<R>` for each of `rows`."""
    shapes = _cache_shapes(model, context_length)
    if rows and not callable(getattr(model, "decode_rows", None)):
        raise ValueError(
            "Expected a model with decode_rows(token_ids, caches, "
            "positions) (keras_attn.models.CausalLM) for the decode_rows_"
            "<R> signatures, or decode_rows=(). Received: model="
            f"{type(model).__name__}, decode_rows={tuple(rows)!r}"
        )
    functions = {
        f"{PREFILL}_{n}": _signature(model, shapes, context_length, n, False)
        for n in lengths
    }
    functions[DECODE] = _signature(model, shapes, context_length, 1, True)
    for n in rows:
        functions[f"{DECODE_ROWS_PREFIX}{n}"] = _rows_signature(
            model, shapes, context_length, n
        )
    return functions
