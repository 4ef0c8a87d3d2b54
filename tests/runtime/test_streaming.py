"""A streaming LiteRT decoder (`export_streaming_tflite`, run by
`keras_attn_runtime.StreamingDecoder`): a tiny encoder-decoder of
`MultiHeadPositional` layers, its caches explicit inputs and outputs,
decodes token for token as Keras's cached search does, under LiteRT's
`CompiledModel` (in a child process: a crash fails the test) and the
`Interpreter`, for a batch of 3, with each cache policy."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_attn.layers import Int8Cache, SinkCache, SlidingWindowCache
from tests.paths import ROOT

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="exports need TensorFlow"
)

VOCAB, SOURCE, STEPS, WIDTH = 13, 7, 9, 16
START, END = 1, 2


def tiny_model(policy):
    """`encode(source)` and `step_fn` of an encoder-decoder: source
    embedding and self-attention, target embedding, cached causal
    self-attention (with `policy`), cross-attention, logits."""
    from keras_attn import MultiHeadPositional

    keras.utils.set_random_seed(7)
    src_embed = keras.layers.Embedding(VOCAB, WIDTH)
    tgt_embed = keras.layers.Embedding(VOCAB, WIDTH)
    enc = MultiHeadPositional(num_heads=2, key_dim=8)
    window = getattr(policy, "window", None)
    self_att = MultiHeadPositional(
        num_heads=2,
        key_dim=8,
        num_key_value_heads=1,
        position="rotary",
        cache_policy=policy,
        sliding_window=None if getattr(policy, "sinks", 0) else window,
    )
    cross = MultiHeadPositional(num_heads=2, key_dim=8, position=None)
    normal = keras.initializers.RandomNormal(stddev=1.0)
    head = keras.layers.Dense(VOCAB)
    recall = keras.layers.Dense(VOCAB, kernel_initializer=normal)  # the cache
    bigram = keras.layers.Embedding(VOCAB, VOCAB, embeddings_initializer=normal)
    by_step = keras.layers.Embedding(
        STEPS, VOCAB, embeddings_initializer=normal
    )
    x = tgt_embed(np.zeros((1, 2), "int32"))
    memory = enc(src_embed(np.zeros((1, 3), "int32")))
    recall(self_att(x, use_causal_mask=True))
    head(cross(self_att(x, use_causal_mask=True), memory))
    kernel, bias = head.get_weights()
    bias[END] -= 2.0  # sentences longer than a word or two
    head.set_weights([kernel, bias])

    def encode(source):
        mask = source != 0
        memory = enc(src_embed(source), query_mask=mask, value_mask=mask)
        return {
            "self": self_att.empty_cache(source, STEPS),  # sized by source
            "memory": cross.compute_cache(memory),
            "mask": keras.ops.cast(mask, "int32"),
        }

    def step_fn(tokens, state, index):
        x = tgt_embed(tokens[:, None])
        y, cache = self_att(x, cache=state["self"], cache_update_index=index)
        z, _, weights = cross(
            y,
            cache=state["memory"],
            value_mask=state["mask"] > 0,
            return_attention_scores=True,
        )
        # The source, the last token and the step all count: varied tokens.
        logits = (
            head(z)[:, 0] * 1.5
            + recall(y)[:, 0]
            + bigram(tokens)
            + by_step(index[None])
        )
        return logits, {**state, "self": cache}, weights[:, 0, 0]

    return encode, step_fn


def source_batch():
    rng = np.random.default_rng(1)
    ids = rng.integers(3, VOCAB, size=(3, SOURCE)).astype("int32")
    ids[1, 4:] = 0  # shorter sentences, padded
    ids[2, 2:] = 0
    return ids


POLICIES = {
    "full": lambda: None,
    "window": lambda: SlidingWindowCache(3),
    "int8": lambda: Int8Cache(),
    "sinks": lambda: SinkCache(1, 3),
}


def interpreter_greedy(path, ids):
    """Greedy decoding of the file with LiteRT's `Interpreter`: `(B, n)`
    ids, 0 after each row's end."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    start = interpreter.get_signature_runner("prefill")
    step = interpreter.get_signature_runner("decode")
    padded = np.concatenate([ids, np.zeros((1, SOURCE), "int32")])
    state = start(source=padded)
    tokens = np.full((len(padded),), START, "int32")
    done, rows = np.arange(len(padded)) >= len(ids), []
    for index in range(STEPS):
        out = step(tokens=tokens, index=np.array(index, "int32"), **state)
        state.update({k: v for k, v in out.items() if k.startswith("state_")})
        logits = out["logits"].copy()
        logits[:, 0] = -1e9  # padding is never emitted
        tokens = np.where(done, 0, logits.argmax(-1)).astype("int32")
        rows.append(tokens[: len(ids)])
        done |= tokens == END
        if done.all():
            break
    return np.stack(rows, 1)


def in_child(script, path, ids):
    """What `script` prints last (JSON), run on the file and `ids` in a
    child process: a crash of LiteRT fails the test, not the run."""
    done = subprocess.run(
        [sys.executable, "-c", script, path, json.dumps(ids.tolist())],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


CHILD = """
import json, sys
import numpy as np
from keras_attn_runtime import StreamingDecoder
path, ids = sys.argv[1], np.array(json.loads(sys.argv[2]), "int32")
decoder = StreamingDecoder(path, num_threads=1)
rows = [t.tolist() for t in decoder.stream({"source": ids}, 1, 2, 9)]
print(json.dumps({"engine": decoder.engine, "ids": rows}))
"""


@pytest.mark.parametrize(
    "policy",
    [
        p if p == "full" else pytest.param(p, marks=pytest.mark.slow)
        for p in POLICIES
    ],
)
def test_streaming_file_decodes_as_keras_cached_greedy(policy, tmp_path):
    from keras_attn import export, seq2seq
    from keras_attn_runtime import StreamingDecoder

    encode, step_fn = tiny_model(POLICIES[policy]())
    ids = source_batch()
    keras_ids = seq2seq.greedy_search(step_fn, encode(ids), START, END, STEPS)[
        "ids"
    ]
    keras_ids = keras.ops.convert_to_numpy(keras_ids)
    path = str(tmp_path / "decoder.tflite")
    spec = {"source": tf.TensorSpec([4, SOURCE], tf.int32)}  # 3 rows fed
    export.export_streaming_tflite(
        (encode, step_fn),
        path,
        start_signature=spec,
        settings={"start_id": START},
    )
    # Under the Interpreter, in this process, as LiteRT documents it.
    streamed = interpreter_greedy(path, ids)
    assert StreamingDecoder(path).config["start_id"] == START
    width = streamed.shape[1]
    np.testing.assert_array_equal(streamed, keras_ids[:, :width])
    assert not keras_ids[:, width:].any()  # nothing after every end
    # Under CompiledModel, with its own buffers, in a child process.
    child = in_child(CHILD, path, ids)
    assert child["engine"] == "compiled_model"
    np.testing.assert_array_equal(np.array(child["ids"]).T, streamed)


BEAM_CHILD = """
import json, sys
import numpy as np
from keras_attn_runtime import StreamingDecoder
path, ids = sys.argv[1], np.array(json.loads(sys.argv[2]), "int32")
decoder = StreamingDecoder(path, num_threads=1)
beam = dict(beam_width=2, coverage_penalty=0.2, source_mask=ids != 0)
best = decoder.beam_search({"source": ids}, 1, 2, 9, **beam)
pieces = list(decoder.stream_beam({"source": ids}, 1, 2, 9, **beam))
streamed = [np.concatenate([p[b] for p in pieces]).tolist() for b in range(2)]
print(json.dumps({"ids": best["ids"].tolist(), "streamed": streamed,
                  "score": best["score"].tolist(), "steps": len(pieces)}))
"""


def test_streaming_file_beam_searches_as_keras_cached_beam(tmp_path):
    # Two sentences, two beams each: the batch-4 file's rows reordered by
    # beam between steps, in NumPy, under CompiledModel.
    from keras_attn import export, seq2seq

    encode, step_fn = tiny_model(None)
    ids = source_batch()[1:]
    want = seq2seq.beam_search(
        step_fn,
        encode(ids),
        START,
        END,
        STEPS,
        beam_width=2,
        coverage_penalty=0.2,
        source_mask=ids != 0,
    )
    want_ids = keras.ops.convert_to_numpy(want["ids"])
    path = str(tmp_path / "decoder.tflite")
    spec = {"source": tf.TensorSpec([4, SOURCE], tf.int32)}
    export.export_streaming_tflite(
        (encode, step_fn), path, start_signature=spec
    )
    child = in_child(BEAM_CHILD, path, ids)
    got = np.array(child["ids"])
    np.testing.assert_array_equal(got, want_ids[:, : got.shape[1]])
    assert not want_ids[:, got.shape[1] :].any()
    np.testing.assert_allclose(child["score"], want["score"], rtol=1e-4)
    for row, streamed in zip(got, child["streamed"], strict=True):
        assert streamed == row[row != 0].tolist()  # the winner, in pieces
    assert child["steps"] > 1


@pytest.mark.slow
def test_the_state_is_explicit_and_the_ops_builtin(tmp_path):
    from keras_attn import export
    from keras_attn.export import edge_targets
    from keras_attn_runtime import StreamingDecoder

    encode, step_fn = tiny_model(POLICIES["int8"]())
    path = str(tmp_path / "decoder.tflite")
    spec = {"source": tf.TensorSpec([2, SOURCE], tf.int32)}
    export.export_streaming_tflite(
        (encode, step_fn), path, start_signature=spec
    )
    decoder = StreamingDecoder(path)
    step = decoder.litert.signatures["decode"]
    states = sorted(n for n in step["inputs"] if n.startswith("state_"))
    # memory, mask, and the int8 cache's values, scales and positions
    assert states == sorted(decoder.state_names) and len(states) == 5
    updated = decoder.config["step_state"]  # the cache; the rest passes
    assert len(updated) == 3 and set(updated) < set(states)
    outputs = set(step["outputs"])
    assert outputs == {"logits", "alignment", *updated}
    ops = {op for op, _ in edge_targets.op_signatures(path)[0]}
    assert not {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"} & ops
    assert not any(op.startswith("FLEX") or op == "CUSTOM" for op in ops)


def test_equal_state_parts_merged_by_the_converter_come_back_apart(tmp_path):
    # Two layers' empty caches are one computation: the converter makes
    # them one tensor under two names, which `CompiledModel` reports once.
    from keras_attn import MultiHeadPositional, export
    from keras_attn_runtime import StreamingDecoder

    layer = MultiHeadPositional(num_heads=2, key_dim=4)
    layer.build((None, None, 8))

    def start(source):
        return [layer.empty_cache(source, 5), layer.empty_cache(source, 5)]

    def step_fn(tokens, state, index):
        logits = keras.ops.one_hot(tokens, 4)
        return logits, [state[0] + 1.0, state[1] + 2.0], None

    path = str(tmp_path / "twins.tflite")
    spec = {"source": tf.TensorSpec([2, 3], tf.int32)}
    export.export_streaming_tflite((start, step_fn), path, start_signature=spec)
    decoder = StreamingDecoder(path)
    state = decoder.start(source=np.ones((2, 3), "int32"))
    assert sorted(state) == ["state_0", "state_1"]
    _, state, _ = decoder.step(np.array([1, 2], "int32"), 0, state)
    np.testing.assert_array_equal(state["state_0"], 1.0)
    np.testing.assert_array_equal(state["state_1"], 2.0)


def test_a_file_with_the_former_signature_names_still_runs(
    tmp_path, monkeypatch
):
    # Files written before LiteRT-LM's names (`start`, `step`) name their
    # signatures in their config: the runtime reads them from there.
    from keras_attn import export
    from keras_attn.export import streaming
    from keras_attn_runtime import StreamingDecoder

    def start(source):
        return {"count": keras.ops.cast(source, "float32") * 0.0}

    def step_fn(tokens, state, index):
        logits = keras.ops.one_hot(tokens, 4)
        return logits, {"count": state["count"] + 1.0}, None

    spec = {"source": tf.TensorSpec([2, 3], tf.int32)}
    files = {}
    for names in (("start", "step"), (streaming.START, streaming.STEP)):
        monkeypatch.setattr(streaming, "START", names[0])
        monkeypatch.setattr(streaming, "STEP", names[1])
        files[names] = str(tmp_path / f"{names[0]}.tflite")
        export.export_streaming_tflite(
            (start, step_fn), files[names], start_signature=spec
        )
    answers = []
    for names, path in files.items():
        decoder = StreamingDecoder(path)
        assert sorted(decoder.litert.signatures) == sorted(names)
        state = decoder.start(source=np.ones((2, 3), "int32"))
        logits, state, _ = decoder.step(np.array([1, 2], "int32"), 0, state)
        answers.append((logits, state["state_0"]))
    np.testing.assert_array_equal(answers[0][0], answers[1][0])
    np.testing.assert_array_equal(answers[0][1], answers[1][1])


PROMPT_LENGTHS = (8, 16)  # the file's starts, one a prompt length
RING = 24  # prompt and output fit: a window that forgets nothing


def tiny_language_model():
    """`prefill(prompt)` and `step_fn` of a decoder-only stack: token
    embedding, cached causal self-attention with rotary positions over a
    ring of `RING` positions (which skips left padding: its slots are
    never attended), logits. The prompt is left-padded with zeros; its
    last token is the first step's input, at position `offset`."""
    from keras_attn import MultiHeadPositional

    keras.utils.set_random_seed(11)
    normal = keras.initializers.RandomNormal(stddev=1.0)
    embed = keras.layers.Embedding(VOCAB, WIDTH)
    layer = MultiHeadPositional(
        num_heads=2,
        key_dim=8,
        position="rotary",
        cache_policy=SlidingWindowCache(RING),
    )
    head = keras.layers.Dense(VOCAB, kernel_initializer=normal)
    bigram = keras.layers.Embedding(VOCAB, VOCAB, embeddings_initializer=normal)
    head(layer(embed(np.ones((1, 2), "int32"))))

    def prefill(prompt):
        context = prompt[:, :-1]
        cache = layer.empty_cache(prompt, RING)
        _, cache = layer(
            embed(context),
            query_mask=context != 0,
            cache=cache,
            cache_update_index=0,
        )
        # The position of the prompt's last token (a value, not a
        # constant: a constant output has no buffer to bind).
        offset = keras.ops.sum(keras.ops.cast(context >= 0, "int32"), 1)
        return {"cache": cache, "offset": offset}

    def step_fn(tokens, state, index):
        position = index + state["offset"][0]
        y, cache = layer(
            embed(tokens[:, None]),
            cache=state["cache"],
            cache_update_index=position,
        )
        logits = head(y)[:, 0] * 8.0 + bigram(tokens) * 0.5
        return logits, {**state, "cache": cache}, None

    return prefill, step_fn


def left_padded(prompts, length):
    out = np.zeros((len(prompts), length), "int32")
    for row, prompt in zip(out, prompts, strict=True):
        row[length - len(prompt) :] = prompt
    return out


def test_a_decoder_only_stack_streams_from_prompts_of_several_lengths(
    tmp_path,
):
    # One file, a start for prompts of 8 and of 16 tokens: a prompt runs
    # through the first it fits and decodes as Keras's cached greedy
    # search on the same padded prompt; with rotary positions and padding
    # never attended, a prompt gives the same tokens through either.
    from keras_attn import export, seq2seq
    from keras_attn_runtime import StreamingDecoder

    prefill, step_fn = tiny_language_model()
    rng = np.random.default_rng(6)
    prompts = [rng.integers(3, VOCAB, size=n) for n in (5, 6, 3)]
    specs = [
        {"prompt": tf.TensorSpec([4, n], tf.int32)} for n in PROMPT_LENGTHS
    ]
    path = str(tmp_path / "lm.tflite")
    export.export_streaming_tflite(
        (prefill, step_fn), path, start_signature=specs, padding="left"
    )
    decoder = StreamingDecoder(path)
    assert sorted(decoder.litert.signatures) == [
        "decode",
        "prefill_0",
        "prefill_1",
    ]
    streamed = {}
    for length in (6, 12):  # fed as 6 and 12 columns: to 8 and 16
        fed = left_padded(prompts, length)
        rows = decoder.stream({"prompt": fed}, fed[:, -1], END, STEPS)
        streamed[length] = np.stack(list(rows), 1)
        full = left_padded(prompts, 8 if length == 6 else 16)
        keras_ids = seq2seq.greedy_search(
            step_fn, prefill(full), full[:, -1], END, STEPS
        )["ids"]
        keras_ids = keras.ops.convert_to_numpy(keras_ids)
        width = streamed[length].shape[1]
        np.testing.assert_array_equal(streamed[length], keras_ids[:, :width])
    np.testing.assert_array_equal(streamed[6], streamed[12])
    assert len({tuple(r) for r in streamed[6]}) == 3  # prompts count
    with pytest.raises(ValueError, match="largest start"):
        decoder.start(prompt=left_padded(prompts, 17))
