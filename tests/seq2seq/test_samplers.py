"""`keras_attn.seq2seq.samplers`: one loop, one class a strategy.

Each sampler gives what its search function gives (the functions are thin
wrappers, checked here against the classes and in `test_search.py`
against brute force), serializes like KerasHub's samplers, and decodes
its first token inside the loop, so a traced or exported search holds the
decoder once. Part of the JAX and PyTorch suite.
"""

import ast
import json
import pathlib

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import samplers, search
from tests.search_cases import END, START, chain, strip

RNG = np.random.default_rng(5)
LOGITS = RNG.normal(scale=2.0, size=(7, 7)).astype("float32")
ATTENTION = RNG.dirichlet(np.ones(4), size=7).astype("float32")
STATE = np.zeros((3, 1), "float32")
STARTS = np.array([START, 4, 5], "int32")

SETTINGS = [
    samplers.GreedySampler(),
    samplers.RandomSampler(temperature=0.7, seed=3),
    samplers.TopKSampler(k=3, temperature=1.5, seed=4),
    samplers.TopPSampler(p=0.6, k=4, temperature=0.9, seed=5),
    samplers.BeamSampler(
        beam_width=3,
        length_penalty=1.0,
        coverage_penalty=0.3,
        count_end_token=False,
        coverage_on_finished_only=True,
        return_all_beams=True,
        output_all_scores=True,
    ),
    samplers.ContrastiveSampler(k=3, alpha=0.4),
    samplers.MultiLabelSampler(threshold=0.3, seed=2),
]


@pytest.mark.parametrize("sampler", SETTINGS, ids=lambda s: type(s).__name__)
def test_config_round_trips_through_json(sampler):
    config = json.loads(json.dumps(samplers.serialize(sampler)))
    again = samplers.deserialize(config)
    assert type(again) is type(sampler)
    assert again.get_config() == sampler.get_config()
    assert samplers.get(config).get_config() == sampler.get_config()


def test_get_takes_names_configs_and_samplers():
    assert isinstance(samplers.get("top_k"), samplers.TopKSampler)
    assert samplers.get("beam").beam_width == 4
    beam = samplers.BeamSampler(beam_width=2)
    assert samplers.get(beam) is beam
    for name, cls in samplers.NAMES.items():
        assert type(samplers.get(name)) is cls
    with pytest.raises(ValueError, match="identifier='top-k'"):
        samplers.get("top-k")
    with pytest.raises(ValueError, match="identifier=3"):
        samplers.get(3)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: samplers.TopKSampler(k=0), "k=0"),
        (lambda: samplers.TopPSampler(p=1.5), "p=1.5"),
        (lambda: samplers.TopPSampler(p=0.5, k=-1), "k=-1"),
        (lambda: samplers.RandomSampler(temperature=0), "temperature=0"),
        (lambda: samplers.BeamSampler(beam_width=0), "beam_width=0"),
        (lambda: samplers.ContrastiveSampler(alpha=2), "alpha=2"),
        (lambda: samplers.MultiLabelSampler(threshold=1), "threshold=1"),
    ],
)
def test_bad_settings_are_named(make, needle):
    with pytest.raises(ValueError, match=needle):
        make()


def test_a_seed_generator_is_refused_by_serialization_only():
    sampler = samplers.RandomSampler(seed=keras.random.SeedGenerator(1))
    out = sampler(chain(LOGITS), STATE, START, END, 4)
    assert tuple(out["ids"].shape) == (3, 4)
    with pytest.raises(ValueError, match="seed="):
        samplers.serialize(sampler)


def ids(out):
    return ops.convert_to_numpy(out["ids"])


def test_each_class_equals_its_search_function():
    step = chain(LOGITS, ATTENTION)
    common = (step, STATE, STARTS, END, 6)
    pairs = [
        (samplers.GreedySampler(), search.greedy_search(*common)),
        (
            samplers.TopPSampler(p=0.7, k=3, temperature=1.2, seed=8),
            search.sample_search(
                *common, temperature=1.2, top_k=3, top_p=0.7, seed=8
            ),
        ),
        (
            samplers.TopKSampler(k=2, seed=8),
            search.sample_search(*common, top_k=2, seed=8),
        ),
        (
            samplers.BeamSampler(3, 0.2, 0.5, return_all_beams=True),
            search.beam_search(
                *common,
                beam_width=3,
                length_penalty=0.2,
                coverage_penalty=0.5,
                return_all_beams=True,
            ),
        ),
    ]
    for sampler, expected in pairs:
        got = sampler(*common)
        assert sorted(got) == sorted(expected), sampler
        for key, value in expected.items():
            np.testing.assert_array_equal(
                ops.convert_to_numpy(got[key]),
                ops.convert_to_numpy(value),
                err_msg=f"{sampler} {key}",
            )


class LowestAllowed(samplers.Sampler):
    """A strategy of one method: the smallest id not banned."""

    def next_token(self, logits, index, carry):
        allowed = ops.cast(logits > -1e8, "int32")
        return ops.argmax(allowed, axis=-1)


def test_a_new_strategy_overrides_next_token_only():
    out = LowestAllowed()(chain(LOGITS), STATE, START, [3, 4], 5, (1, 2))
    # Padding (0) and the banned 1, 2 are never emitted: 3 ends at once.
    assert ids(out).tolist() == [[3, 0, 0, 0, 0]] * 3


def test_the_decoder_runs_inside_the_loop_only():
    """Traced, a search holds the decoder once, inside the `While` body:
    no decoder matrix product outside it (the first token was decoded
    before the loop by a second copy of the loop's code)."""
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("reads a TensorFlow graph")
    table = RNG.normal(size=(7, 5)).astype("float32")
    head = RNG.normal(size=(5, 7)).astype("float32")

    def step_fn(tokens, state, index):
        h = ops.matmul(ops.take(table, tokens, axis=0), head)
        return h, state, None

    for sampler in (samplers.GreedySampler(), samplers.BeamSampler(2)):

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
        def run(state, sampler=sampler):
            return sampler(step_fn, state, START, END, 4)["ids"]

        graph = run.get_concrete_function().graph
        top = {op.type for op in graph.get_operations()}
        assert "While" in top or "StatelessWhile" in top
        assert not top & {"MatMul", "BatchMatMulV2", "Einsum"}, sampler


def test_an_unrolled_first_step_decodes_the_same():
    """`unroll_first_step=True` (`Translator.export_tflite`'s default,
    for the converter to fold the start token's work) takes the first
    step before the loop, and every output is the same."""
    step = chain(LOGITS, ATTENTION)
    for sampler in (
        samplers.GreedySampler(),
        samplers.BeamSampler(
            3, 0.4, 0.3, return_all_beams=True, output_all_scores=True
        ),
    ):
        common = (step, STATE, STARTS, END, 6)
        looped = sampler.decode_tokens(*common)
        unrolled = sampler.decode_tokens(*common, unroll_first_step=True)
        assert sorted(looped) == sorted(unrolled)
        for key, value in looped.items():
            np.testing.assert_array_equal(
                ops.convert_to_numpy(unrolled[key]),
                ops.convert_to_numpy(value),
                err_msg=f"{sampler} {key}",
            )
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        return
    table = RNG.normal(size=(7, 5)).astype("float32")
    head = RNG.normal(size=(5, 7)).astype("float32")

    def step_fn(tokens, state, index):
        return ops.matmul(ops.take(table, tokens, axis=0), head), state, None

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
    def run(state):
        sampler = samplers.GreedySampler()
        out = sampler.decode_tokens(step_fn, state, START, END, 4, (), None)
        return out["ids"]

    # Without the option, test_the_decoder_runs_inside_the_loop_only.
    top = {op.type for op in run.get_concrete_function().graph.get_operations()}
    assert "MatMul" not in top

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
    def unrolled(state):
        sampler = samplers.GreedySampler()
        return sampler.decode_tokens(
            step_fn, state, START, END, 4, unroll_first_step=True
        )["ids"]

    graph = unrolled.get_concrete_function().graph
    assert "MatMul" in {op.type for op in graph.get_operations()}


def test_a_given_alignment_length_decodes_as_none_given():
    """`alignment_length` is optional: a graph with a variable source
    length reads it from the first step; given, it changes nothing."""
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow graph with a variable source length")

    def step_fn(tokens, state, index):
        logits = ops.take(LOGITS, tokens, axis=0)
        return logits, state, ops.softmax(state, axis=-1)

    def run(alignment_length):
        @tf.function(input_signature=[tf.TensorSpec([None, None])])
        def f(state):
            out = samplers.BeamSampler(2)(
                step_fn,
                state,
                START,
                END,
                4,
                alignment_length=alignment_length and tf.shape(state)[1],
            )
            return out["alignment"]

        return ops.convert_to_numpy(f(tf.zeros((2, 3))))

    given = run(True)
    np.testing.assert_allclose(given[:, 0], 1 / 3)
    np.testing.assert_array_equal(run(None), given)


def _while_loops(path):
    tree = ast.parse(path.read_text())
    return sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "while_loop"
        for node in ast.walk(tree)
    )


def test_one_decoding_loop_in_seq2seq():
    """One `while_loop` call in `seq2seq/` (the samplers' loop), and one
    in `translation/` (the WordPiece tokenizer's)."""
    root = pathlib.Path(samplers.__file__).parent.parent.parent
    counts = {
        str(p.relative_to(root)): _while_loops(p)
        for folder in ("seq2seq", "translation")
        for p in sorted((root / folder).rglob("*.py"))
    }
    counts = {k: v for k, v in counts.items() if v}
    assert counts == {
        "seq2seq/samplers/base.py": 1,
        "translation/subwords.py": 1,
    }


@pytest.mark.parametrize(
    "sampler",
    [s for s in SETTINGS if not isinstance(s, samplers.MultiLabelSampler)],
    ids=lambda s: type(s).__name__,
)
def test_banned_ids_and_padding_never_come_out(sampler):
    """Logits where padding, the banned id and tokens far below them
    tie in probability (a 1e9 spike on one token): every strategy still
    emits allowed ids only."""
    spike = np.full((7, 7), -50.0, "float32")
    spike[:, 0] = 1e9  # padding, the most likely by far
    spike[:, 6] = 1e9 - 1e3
    spike[:, END] = -60.0

    def step_fn(tokens, state, index):
        return ops.take(spike, tokens, axis=0), state * 0.5, None

    extra = {}
    if isinstance(sampler, samplers.ContrastiveSampler):
        extra["hidden_fn"] = lambda state: state
    if getattr(sampler, "coverage_penalty", 0):
        sampler = samplers.BeamSampler(3, return_all_beams=True)
    out = sampler(
        step_fn, np.ones((2, 3), "float32"), START, END, 4, (6,), **extra
    )
    got = ids(out)
    for row in got:
        emitted = strip(row)
        assert emitted and not set(emitted) & {0, 6}, got


def test_a_state_that_changes_form_at_the_first_step_still_decodes():
    """A decoder given part of its state (one entry, the step returns two,
    as `AttentionDecoder` with `input_feeding`) takes its first step
    before the loop, and decodes as when given the full state."""
    feed = RNG.normal(size=(7, 2)).astype("float32")

    def step_fn(tokens, state, index):
        logits = ops.take(LOGITS, tokens, axis=0) + ops.sum(state[-1])
        return logits, [state[0], ops.take(feed, tokens, axis=0)], None

    part = [np.zeros((3, 1), "float32")]
    full = part + [np.zeros((3, 2), "float32")]
    for sampler in (samplers.GreedySampler(), samplers.BeamSampler(2)):
        np.testing.assert_array_equal(
            ids(sampler(step_fn, part, STARTS, END, 5)),
            ids(sampler(step_fn, full, STARTS, END, 5)),
        )
