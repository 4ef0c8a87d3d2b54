"""How the sampling loop calls the decoder: on the real state only, once
a step, and compiled over inputs of unknown length without help.

The loop sizes its buffers before it runs. Where a backend reads shapes
by running a function on stand-in inputs (Keras's PyTorch backend fills
them with ones when the meta device refuses a call), the decoder must
not be one of them: a decoder that indexes with its state fails on ones,
and each search would pay a step more. Where the alignment's length is
unknown at trace time (`tf.function` over `None` dimensions), the loop
reads it from the first real step, as tfa's `dynamic_decode` does. Part
of the JAX and PyTorch suite.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import samplers, search
from tests.search_cases import END, START

RNG = np.random.default_rng(11)
VOCAB = 7
LOGITS = RNG.normal(scale=2.0, size=(VOCAB, VOCAB)).astype("float32")
BIAS = RNG.normal(size=(1, VOCAB)).astype("float32")  # one row: index 0


def concrete(x):
    """`x` as an int, or `None` for a symbolic or traced value."""
    try:
        return int(ops.convert_to_numpy(x))
    except Exception:
        return None


def recording_decoder(calls):
    """A decoder that indexes a one-row table with its state (zeros: any
    other value is out of range) and records the index of each call it
    gets concrete values in."""

    def step_fn(tokens, state, index):
        calls.append(concrete(index))
        row = ops.take(ops.convert_to_tensor(BIAS), state["row"], axis=0)
        logits = ops.take(ops.convert_to_tensor(LOGITS), tokens, axis=0) + row
        return logits, state, None

    return step_fn


def real_calls(calls, steps, before_loop=0):
    """Check that the decoder ran on real values only, once a step, in
    order: on PyTorch every call (it traces nothing, so a call on
    anything else is a call on stand-ins, meta tensors or ones); on
    TensorFlow every call with concrete values (its eager loop), besides
    the symbolic one that reads the shapes; on JAX none (`jit`'s loop
    traces its body)."""
    backend = keras.backend.backend()
    concrete_calls = [c for c in calls if c is not None]
    if backend == "torch":
        assert calls == list(range(steps)), calls
    elif backend == "tensorflow":
        assert concrete_calls == list(range(steps)), calls
    else:
        assert concrete_calls == list(range(before_loop)), calls


CASES = [
    (samplers.GreedySampler(), 1),
    (samplers.RandomSampler(seed=2), 1),
    (samplers.TopKSampler(k=3, seed=2), 1),
    (samplers.BeamSampler(beam_width=3), 3),
]


@pytest.mark.parametrize("sampler,rows", CASES, ids=lambda c: str(c))
def test_the_decoder_sees_the_real_state_once_a_step(sampler, rows):
    calls = []
    state = {"row": np.zeros((2,), "int32")}
    length = 5
    out = sampler(
        recording_decoder(calls), state, START, END, length, banned_ids=(END,)
    )
    ids = ops.convert_to_numpy(out["ids"])
    assert ids.shape == (2, length) and (ids > 0).all()
    real_calls(calls, length)


def test_contrastive_search_calls_the_decoder_once_a_step():
    calls = []
    state = {"row": np.zeros((2,), "int32"), "h": np.ones((2, 3), "float32")}
    sampler = samplers.ContrastiveSampler(k=2, alpha=0.3)
    out = sampler(
        recording_decoder(calls),
        state,
        START,
        END,
        4,
        banned_ids=(END,),
        hidden_fn=lambda s: s["h"],
    )
    assert ops.convert_to_numpy(out["ids"]).shape == (2, 4)
    # The start token's step, before the loop, then a look-ahead a step.
    real_calls(calls, 5, before_loop=1)


def test_a_decoder_that_reads_its_state_on_the_host_runs_eagerly():
    """PyTorch runs the loop eagerly, so a decoder may read a state value
    on the host (here an index into a one-row table): on ones, which
    Keras puts in place of every input when the meta device refuses a
    call, it would raise `IndexError`."""
    if keras.backend.backend() != "torch":
        pytest.skip("a host read needs an eager loop (PyTorch's)")
    calls = []

    def step_fn(tokens, state, index):
        calls.append(concrete(index))
        row = int(ops.convert_to_numpy(state["row"])[0])  # on the host
        logits = ops.take(ops.convert_to_tensor(LOGITS), tokens, axis=0)
        return logits + ops.convert_to_tensor(BIAS[row]), state, None

    state = {"row": np.zeros((2,), "int32")}
    for sampler in (samplers.GreedySampler(), samplers.BeamSampler(2)):
        calls.clear()
        out = sampler(step_fn, state, START, END, 3, banned_ids=(END,))
        assert ops.convert_to_numpy(out["ids"]).shape == (2, 3)
        assert calls == [0, 1, 2], calls


def attending_decoder():
    """A decoder that attends over its memory `(B, S, D)`: the alignment
    is as long as the memory, known only when the memory is."""
    table = RNG.normal(size=(VOCAB, 4)).astype("float32")
    head = RNG.normal(size=(4, VOCAB)).astype("float32")

    def step_fn(tokens, state, index):
        query = ops.take(ops.convert_to_tensor(table), tokens, axis=0)
        scores = ops.einsum("bsd,bd->bs", state["memory"], query)  # (B, S)
        align = ops.softmax(scores, axis=-1)
        context = ops.einsum("bs,bsd->bd", align, state["memory"])
        return ops.matmul(context, ops.convert_to_tensor(head)), state, align

    return step_fn


SEARCHES = {
    "greedy": lambda f, s: search.greedy_search(f, s, START, END, 4),
    "beam": lambda f, s: search.beam_search(
        f, s, START, END, 4, beam_width=2, coverage_penalty=0.2
    ),
    "sample": lambda f, s: search.sample_search(f, s, START, END, 4, seed=1),
    "contrastive": lambda f, s: search.contrastive_search(
        f, s, START, END, 4, hidden_fn=lambda s: s["memory"][:, 0]
    ),
}


def memories(lengths=(3, 6)):
    return [RNG.normal(size=(2, n, 4)).astype("float32") for n in lengths]


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_a_compiled_search_over_unknown_lengths_needs_no_length(name):
    """`tf.function` with `None` dimensions, `jax.jit` over several
    lengths: the same tokens and alignments as eagerly, and no
    `alignment_length` asked for."""
    run = SEARCHES[name]
    decoder = attending_decoder()
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        spec = tf.TensorSpec([None, None, 4], tf.float32)

        @tf.function(input_signature=[spec])
        def compiled(memory):
            out = run(decoder, {"memory": memory})
            return out["ids"], out["alignment"]

    elif backend == "jax":
        import jax

        @jax.jit
        def compiled(memory):
            out = run(decoder, {"memory": memory})
            return out["ids"], out["alignment"]

    else:
        pytest.skip(f"{backend} runs the search eagerly")
    for memory in memories():
        eager = run(decoder, {"memory": memory})
        ids, alignment = compiled(memory)
        np.testing.assert_array_equal(
            ops.convert_to_numpy(ids), ops.convert_to_numpy(eager["ids"])
        )
        alignment = ops.convert_to_numpy(alignment)
        assert alignment.shape == (2, 4, memory.shape[1])
        np.testing.assert_allclose(
            alignment, ops.convert_to_numpy(eager["alignment"]), atol=1e-6
        )


def test_an_unknown_length_decodes_with_its_alignment_eagerly_too():
    """Every backend, eagerly: the alignment is as long as each memory."""
    decoder = attending_decoder()
    for memory in memories((2, 5)):
        out = search.greedy_search(decoder, {"memory": memory}, START, END, 3)
        alignment = ops.convert_to_numpy(out["alignment"])
        assert alignment.shape == (2, 3, memory.shape[1])
        np.testing.assert_allclose(alignment[:, 0].sum(-1), 1.0, rtol=1e-5)
