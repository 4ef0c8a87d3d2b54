"""Many streams in one call (`keras_attn_runtime.rows`): a tiny
decoder's bundle with `decode_rows_<R>` signatures, run by
`BundleGenerator`; every stream equals its answer alone at 1, 2, 7 and
16 streams, greedy and seeded, prompts of different lengths; the streams
share calls; rows are freed by readers that leave, by failures, and by
the end of the context; the signature equals Keras's `decode_rows`."""

import threading

import numpy as np
import pytest

from tests.backend import to_numpy
from tests.tiny_models import CONTEXT, END, PREFILLS, START, V

pytest.importorskip("litert_lm_builder")
pytest.importorskip("tokenizers")

# Prompt lengths (start token included): one token, shorter and longer
# than each prefill length, over several prefill calls, near the context.
LENGTHS = (1, 2, 5, 9, 17, 24, 35, 44)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """`(folder, lm)`: the tiny decoder's folder, its bundle exported
    with the default `decode_rows` signatures (float weights)."""
    from keras_attn.models import TextGenerator
    from tests.tiny_models import tiny_decoder, word_tokenizer

    folder = tmp_path_factory.mktemp("rows")
    lm = tiny_decoder()
    generator = TextGenerator(lm, word_tokenizer(), START, [END], CONTEXT)
    generator.save(str(folder))
    generator.export_litertlm(
        str(folder / "model.litertlm"), prefill_lengths=PREFILLS
    )
    return str(folder), lm


def _prompt(length, seed):
    rng = np.random.default_rng(seed)
    return " ".join(f"w{i}" for i in rng.integers(5, V, length - 1))


PROMPTS = [_prompt(LENGTHS[i % len(LENGTHS)], i) for i in range(16)]


def _together(generator, prompts, sampling=None):
    """Each prompt's ids, the streams started at once."""
    got = [None] * len(prompts)
    ready = threading.Barrier(len(prompts))

    def run(i):
        ready.wait()
        got[i] = list(generator.token_ids(prompts[i], sampling=sampling))

    threads = [
        threading.Thread(target=run, args=(i,)) for i in range(len(prompts))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_the_signature_is_the_models_decode_rows(bundle):
    from keras_attn_runtime.engine import LiteRTModel
    from keras_attn_runtime.generator import bundle_model

    folder, lm = bundle
    data, model = bundle_model(f"{folder}/model.litertlm")
    litert = LiteRTModel(data, model, folder, interpreter=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, V, 4).astype("int32")
    positions = np.array([0, 3, 20, CONTEXT - 1], "int32")
    caches, feed = [], {"tokens": tokens, "input_pos": positions}
    for layer in range(2):
        pair = rng.normal(size=(2, 4, 2, CONTEXT, 8)).astype("float32")
        caches.append((pair[0], pair[1]))
        feed[f"cache_k_{layer}"], feed[f"cache_v_{layer}"] = pair
    out = litert.runner("decode_rows_4")(**feed)
    logits, entries = lm.decode_rows(tokens, caches, positions)
    np.testing.assert_allclose(out["logits"], to_numpy(logits), atol=1e-3)
    np.testing.assert_allclose(
        out["new_v_1"], to_numpy(entries[1][1])[:, 0], atol=1e-4
    )


def test_alone_a_stream_is_the_engines_answer(bundle):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1)
    assert [r.max_rows for r in generator.row_loops] == [16]
    engine = BundleGenerator(folder, loops=1, rows=False)  # LiteRT-LM's decode
    for prompt in PROMPTS[:8]:
        want = list(engine.token_ids(prompt))
        assert list(generator.token_ids(prompt)) == want, prompt


@pytest.mark.slow
def test_alone_a_stream_is_kerass_greedy_answer(bundle):
    from keras_attn_runtime.generator import BundleGenerator

    folder, lm = bundle
    generator = BundleGenerator(folder, loops=1)
    end = generator.tokenizer.token_to_id(END)
    for prompt in (PROMPTS[0], PROMPTS[4], PROMPTS[6]):  # 1, 17, 35 tokens
        ids = generator.prompt_ids(prompt)
        new = CONTEXT - len(ids)
        want = to_numpy(lm.generate(np.array([ids], "int32"), new, end))[0]
        want = [int(i) for i in want if i not in (0, end)]
        assert list(generator.token_ids(prompt)) == want, prompt


@pytest.mark.parametrize("streams", [1, 2, 7, 16])
def test_every_stream_equals_its_answer_alone(bundle, streams):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1)
    prompts = PROMPTS[:streams]
    sampling = {"temperature": 1.5, "top_p": 0.9, "seed": 7}
    alone = [list(generator.token_ids(p)) for p in prompts]
    seeded = [list(generator.token_ids(p, sampling=sampling)) for p in prompts]
    (loop,) = generator.row_loops
    before = loop.calls, loop.rows_decoded
    assert _together(generator, prompts) == alone
    assert _together(generator, prompts, sampling) == seeded
    if streams > 1:  # the streams shared calls
        calls, rows = loop.calls - before[0], loop.rows_decoded - before[1]
        assert rows / calls > (1 if streams < 7 else 3)


def test_a_copy_holds_its_rows_and_the_others_wait(bundle):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=2, rows=2)
    assert generator.stream_capacity == 4
    seen = []

    class Fixed(dict):  # a call's cost its rows: no call carries padding
        def __setitem__(self, key, value):
            pass

    for loop in generator.row_loops:
        loop.costs = Fixed({n: float(n) for n in loop.costs})
        for name, runner in list(loop.runners.items()):
            if name.startswith("decode_rows_"):

                def counted(runner=runner, **feed):
                    seen.append(len(feed["tokens"]))
                    return runner(**feed)

                loop.runners[name] = counted
    alone = [list(generator.token_ids(p)) for p in PROMPTS[:7]]
    seen.clear()
    assert _together(generator, PROMPTS[:7]) == alone
    assert max(seen) <= 4 and sum(1 for n in seen if n > 2) == 0


def test_a_reader_that_leaves_frees_its_row(bundle):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1, rows=2)
    alone = list(generator.token_ids(PROMPTS[1]))
    leaving = generator.token_ids(PROMPTS[0])
    next(leaving)
    stop = threading.Event()
    stopped = generator.token_ids(PROMPTS[2], stop=stop)
    next(stopped)
    leaving.close()
    stop.set()
    # Both rows come free: a third stream decodes, as alone.
    assert list(generator.token_ids(PROMPTS[1])) == alone
    assert generator.row_loops[0].in_flight == 0


def test_a_failure_reaches_the_readers_and_the_loop_goes_on(bundle):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1)
    (loop,) = generator.row_loops
    alone = list(generator.token_ids(PROMPTS[3]))
    kept = dict(loop.runners)

    def broken(**feed):
        raise RuntimeError("the rows call failed")

    for name in kept:
        if name.startswith("decode_rows_"):
            loop.runners[name] = broken
    with pytest.raises(RuntimeError, match="the rows call failed"):
        list(generator.token_ids(PROMPTS[3]))
    loop.runners.update(kept)
    assert list(generator.token_ids(PROMPTS[3])) == alone


def test_pieces_handed_over_are_the_stream_and_a_failing_put_is_dropped(
    bundle,
):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1)
    whole = "".join(generator.stream(PROMPTS[4]))
    pieces, done = [], threading.Event()

    def put(item):
        if item is None:
            done.set()
        else:
            pieces.append(item)

    def failing(item):
        raise RuntimeError("the reader's loop is gone")

    generator.stream_into(PROMPTS[5], failing)
    generator.stream_into(PROMPTS[4], put)
    assert done.wait(30)
    assert "".join(pieces) == whole
    assert list(generator.token_ids(PROMPTS[4]))  # the loop goes on


def test_the_loops_thread_ends_with_its_generator(bundle):
    import gc
    import time

    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    generator = BundleGenerator(folder, loops=1)
    list(generator.token_ids(PROMPTS[0]))
    name = generator.row_loops[0].thread_name
    assert any(t.name == name for t in threading.enumerate())
    del generator
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.name == name for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
def test_a_bundle_without_rows_runs_a_stream_a_call(bundle, tmp_path):
    import shutil

    from keras_attn.models import TextGenerator
    from keras_attn_runtime.generator import BundleGenerator
    from tests.tiny_models import word_tokenizer

    folder, lm = bundle
    for name in ("generation.json", "tokenizer.json"):
        shutil.copy(f"{folder}/{name}", tmp_path / name)
    TextGenerator(lm, word_tokenizer(), START, [END], CONTEXT).export_litertlm(
        str(tmp_path / "model.litertlm"),
        prefill_lengths=PREFILLS,
        decode_rows=(),
    )
    plain = BundleGenerator(str(tmp_path), loops=1)
    assert plain.row_loops == ()
    off = BundleGenerator(folder, loops=1, rows=False)
    assert off.row_loops == ()
    assert list(plain.token_ids(PROMPTS[2])) == list(off.token_ids(PROMPTS[2]))


def test_the_calls_that_cover_the_rows_cost_least():
    from keras_attn_runtime.rows import plan

    costs = {1: 2.6, 4: 5.9, 16: 21.9}
    assert plan(1, costs) == [1]
    assert plan(5, costs) == [4, 1]
    assert plan(16, costs) == [16]
    assert plan(12, costs) == [4, 4, 4]
    for count in range(1, 33):
        got = plan(count, costs)
        assert sum(got) >= count
        cost = sum(costs[n] for n in got)
        for n in costs:  # no single size alone covers them for less
            assert cost <= -(-count // n) * costs[n] + 1e-9


@pytest.mark.parametrize(
    "value, message",
    [(0, "decode_rows=0"), ("4", "a sequence"), ([2, -1], "decode_rows=-1")],
)
def test_bad_row_counts_are_refused_by_name(bundle, tmp_path, value, message):
    from keras_attn.export import export_litertlm
    from tests.tiny_models import word_tokenizer

    _, lm = bundle
    with pytest.raises(ValueError, match=message):
        export_litertlm(
            lm,
            str(tmp_path / "model.litertlm"),
            tokenizer=word_tokenizer(),
            start_token=START,
            stop_tokens=[END],
            context_length=CONTEXT,
            decode_rows=value if value != 0 else [0],
        )
    assert not (tmp_path / "model.litertlm").exists()


@pytest.mark.parametrize("rows", [0, -2, True, 2.5, "4"])
def test_a_bad_row_count_is_refused_by_name(bundle, rows):
    from keras_attn_runtime.generator import BundleGenerator

    folder, _ = bundle
    with pytest.raises(ValueError, match=f"rows={rows!r}"):
        BundleGenerator(folder, loops=1, rows=rows)
