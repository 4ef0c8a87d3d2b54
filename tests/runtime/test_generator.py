"""A decoder-only folder run from its `.litertlm` bundle by the runtime
(`keras_attn_runtime.generator`): no TensorFlow or Keras imported, the
engine's prompt and prefill, streams that join into the answer, seeded
samples that repeat alone and under load, and (slow) the answers of
LiteRT-LM's own engine on the same bundle."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from tests.paths import ROOT

pytest.importorskip("tokenizers")

LM = os.path.join(ROOT, "saved_models", "translation_en_fr_lm")
SENTENCES = ["I am tired.", "Where is the station?", "We have to leave now."]


@pytest.fixture(scope="module")
def generator():
    from keras_attn_runtime.generator import BundleGenerator

    return BundleGenerator(LM, loops=2)


def test_the_shipped_folder_opens_as_its_bundle_without_tensorflow():
    code = (
        "import sys, numpy as np\n"
        "from keras_attn_runtime import opener\n"
        f"artifact = opener.open({LM!r})\n"
        "out = artifact.run('generate', {'text': np.array([b'I am tired.'], "
        "dtype=object)})\n"
        "assert artifact.kind == 'litertlm', artifact.kind\n"
        "assert opener.streams(artifact)\n"
        "heavy = [m for m in ('tensorflow', 'keras') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print(out['completion'][0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("Je suis fatigu")


def test_a_stream_joins_into_the_answer_and_stops_when_asked(generator):
    whole = generator.generate(SENTENCES)
    for sentence, answer in zip(SENTENCES, whole, strict=True):
        pieces = list(generator.stream(sentence))
        assert "".join(pieces) == answer
        assert len(pieces) >= len(answer.split())
    stop = threading.Event()
    stop.set()
    assert list(generator.stream(SENTENCES[0], stop)) == []


def test_a_seed_gives_the_same_sample_alone_and_under_load(generator):
    sampling = {"temperature": 1.3, "top_p": 0.95, "seed": 11}
    sentence = "We will go to the station tomorrow morning."
    alone = "".join(generator.stream(sentence, sampling=sampling))
    assert alone == "".join(generator.stream(sentence, sampling=sampling))
    others = {
        "".join(generator.stream(sentence, sampling={**sampling, "seed": s}))
        for s in range(12, 20)
    }
    assert len(others | {alone}) > 1  # seeds matter
    got = [None] * 6

    def run(i):
        got[i] = "".join(generator.stream(sentence, sampling=sampling))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [alone] * 6


def test_streams_side_by_side_answer_as_alone(generator):
    alone = generator.generate(SENTENCES)
    got = [None] * len(SENTENCES)

    def run(i):
        got[i] = "".join(generator.stream(SENTENCES[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone


def test_a_prompt_past_the_window_is_refused_before_any_call(generator):
    from keras_attn_runtime.opener import PromptTooLong

    with pytest.raises(PromptTooLong, match="at most 127 tokens"):
        list(generator.stream("word " * 200))
    with pytest.raises(PromptTooLong):
        generator.run("generate", {"text": np.array([b"a " * 300])})


def test_files_that_are_not_bundles_are_refused_by_name(tmp_path):
    from keras_attn_runtime.generator import BundleGenerator, bundle_model

    text = tmp_path / "model.litertlm"
    text.write_text("not a bundle")
    with pytest.raises(ValueError, match="no LITERTLM magic"):
        bundle_model(str(text))
    text.write_bytes(b"LITERTLM" + bytes(40000))
    with pytest.raises(ValueError, match="No LiteRT model"):
        bundle_model(str(text))
    with pytest.raises(ValueError, match="loops=0"):
        BundleGenerator(LM, loops=0)


def test_top_p_keeps_the_nucleus_and_top_k_the_best():
    from keras_attn_runtime.search import sample_with

    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    # A nucleus of 0.6 holds the two most likely tokens: every uniform
    # number lands on one of them, in proportion 0.5 : 0.3.
    u = np.linspace(0.0, 0.999, 200, dtype="float32")[:, None]
    picked = [int(sample_with(x[None], top_p=0.6)(logits, 0)[0]) for x in u]
    assert set(picked) == {0, 1}
    assert abs(picked.count(0) / len(picked) - 0.5 / 0.8) < 0.02
    assert {int(sample_with(x[None], top_k=1)(logits, 0)[0]) for x in u} == {0}
    full = [int(sample_with(x[None])(logits, 0)[0]) for x in u]
    assert set(full) == {0, 1, 2, 3}


ENGINE = """
import json, sys
import litert_lm

litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
engine = litert_lm.Engine(
    sys.argv[1], backend=litert_lm.Backend.CPU(), cache_dir=sys.argv[3]
)
out = []
for sentence in json.loads(sys.argv[2]):
    session = engine.create_session(apply_prompt_template=True)
    session.run_prefill([sentence])
    out.append("".join(r.texts[0] for r in session.run_decode_async()))
    session.close()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_greedy_answers_are_litert_lms_on_the_same_bundle(generator, tmp_path):
    import shutil

    pytest.importorskip("litert_lm")
    path = os.path.join(ROOT, "tests", "data", "everyday_sentences.txt")
    with open(path, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()][:40]
    bundle = tmp_path / "model.litertlm"  # the engine writes a cache beside
    shutil.copy(os.path.join(LM, "model.litertlm"), bundle)
    done = subprocess.run(
        [sys.executable, "-c", ENGINE, str(bundle), json.dumps(sentences)]
        + [str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    engine = json.loads(done.stdout.strip().splitlines()[-1])
    assert generator.generate(sentences) == engine


def test_a_prompt_is_prefilled_in_the_chunks_that_cost_least():
    from keras_attn_runtime.generator import CALL_COSTS, chunks

    for cost_of_a_call in CALL_COSTS.values():
        for count in range(0, 130):
            got = chunks(count, [8, 32], cost_of_a_call)
            assert sum(got) >= count  # every token prefilled
            assert sum(got[:-1]) < count or not got  # only the last padded
            cost = sum(n + cost_of_a_call for n in got)
            # No single length, nor eights alone, costs less.
            for n in (8, 32):
                calls = -(-count // n)
                assert cost <= calls * (n + cost_of_a_call)
    assert chunks(9, [8, 32], CALL_COSTS["builtin"]) == [8, 8]
    assert chunks(20, [8, 32], CALL_COSTS["builtin"]) == [32]
    # On XNNPACK's kernels a call costs far more than its tokens.
    assert chunks(9, [8, 32], CALL_COSTS["xnnpack"]) == [32]
    assert sorted(chunks(40, [8, 32], CALL_COSTS["xnnpack"])) == [8, 32]


def test_the_chunks_follow_the_kernels_the_copies_run(generator):
    from keras_attn_runtime.generator import CALL_COSTS, BundleGenerator

    assert generator.cpu_settings == "xnnpack"
    assert generator.call_cost == CALL_COSTS["xnnpack"]
    builtin = BundleGenerator(LM, loops=1, cpu_kernels="builtin")
    assert builtin.call_cost == CALL_COSTS["builtin"]
    # The same answers, whichever chunks the prompt was prefilled in.
    assert builtin.generate(SENTENCES) == generator.generate(SENTENCES)


def test_without_tokenizers_the_folder_says_what_to_install(monkeypatch):
    from keras_attn_runtime.generator import BundleGenerator

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"keras-attn-runtime\[generator\]"):
        BundleGenerator(LM)


def _counted(generator, calls):
    """Each copy's runners, wrapped to append their signature's name to
    `calls` (a list) when called."""
    for copy in generator._copies:
        for name, runner in list(copy.runners.items()):

            def counted(runner=runner, name=name, **feed):
                calls.append(name)
                return runner(**feed)

            copy.runners[name] = counted


def _second_token_waits(generator, calls, event):
    """The one copy's decode made to wait for `event` (10 s at most)
    before its second call (`calls`, as `_counted` keeps them); returns
    the decode it wraps."""
    (copy,) = generator._copies
    decode = copy.runners["decode"]

    def held(**feed):
        if calls.count("decode") == 1:
            event.wait(10)
        return decode(**feed)

    copy.runners["decode"] = held
    return decode


def test_a_prompt_is_prefilled_between_the_calls_of_the_streams_decoding():
    from keras_attn_runtime.generator import BundleGenerator

    one = BundleGenerator(LM, loops=1)
    calls, entered = [], threading.Event()
    _counted(one, calls)
    _second_token_waits(one, calls, entered)  # for the second stream
    decoding = one.token_ids(
        "Tomorrow morning we will take the early train to the sea."
    )
    next(decoding)  # the first stream decodes
    long = "We walked along the river until the sun went down. " * 3
    assert one.prompt_length(long) > 32  # prefilled in two chunks
    later = one.token_ids(long)
    entered.set()
    rest = list(decoding)
    list(later)
    prefills = [i for i, name in enumerate(calls) if name.startswith("prefill")]
    # The first stream's prefill, then the second's two chunks, each
    # followed by a call of the first stream while it still decodes.
    assert len(prefills) == 3
    assert calls[prefills[1] + 1] == "decode"
    assert prefills[2] - prefills[1] >= 2
    assert len(rest) > 2


def test_a_stream_its_reader_leaves_stops_decoding():
    from keras_attn_runtime.generator import BundleGenerator

    one = BundleGenerator(LM, loops=1)
    calls, closed = [], threading.Event()
    _counted(one, calls)
    _second_token_waits(one, calls, closed)  # for the reader
    reader = one.token_ids("We will go to the station tomorrow morning.")
    next(reader)
    reader.close()
    closed.set()
    # The copy goes on serving: the next request's answer is the event
    # waited for, and its calls are the only ones after the stream's.
    assert one.generate([SENTENCES[0]])[0].startswith("Je suis fatigu")
    alone, calls_alone = BundleGenerator(LM, loops=1), []
    _counted(alone, calls_alone)
    alone.generate([SENTENCES[0]])
    # Its prefill, the first token, the one under way; then none of its.
    assert calls == ["prefill_32", "decode", "decode", *calls_alone]


def test_a_model_failure_reaches_its_reader_and_the_copies_go_on():
    from keras_attn_runtime.generator import BundleGenerator

    one = BundleGenerator(LM, loops=1)
    (copy,) = one._copies
    decode = copy.runners["decode"]

    def broken(**feed):
        raise RuntimeError("the decode call failed")

    copy.runners["decode"] = broken
    with pytest.raises(RuntimeError, match="the decode call failed"):
        list(one.stream(SENTENCES[0]))
    copy.runners["decode"] = decode
    assert one.generate([SENTENCES[0]])[0].startswith("Je suis fatigu")


def test_the_copies_threads_end_with_their_generator():
    from keras_attn_runtime.generator import BundleGenerator
    from tests.timing import threads_end_with

    def used():
        two = BundleGenerator(LM, loops=2)
        two.generate([SENTENCES[0]])
        return two

    threads_end_with(used, 2)


def _handed(generator, text, **kwargs):
    """What `stream_into` hands over for `text`, and the threads it was
    handed on, once it ends."""
    import queue

    got, threads = queue.SimpleQueue(), set()

    def put(item):
        threads.add(threading.get_ident())
        got.put(item)

    generator.stream_into(text, put, **kwargs)
    items = []
    while True:
        item = got.get(timeout=60)
        items.append(item)
        if item is None or isinstance(item, Exception):
            return items, threads


def test_pieces_handed_over_from_the_copies_threads_are_the_stream(generator):
    sampling = {"temperature": 1.3, "top_p": 0.95, "seed": 5}
    for sentence in SENTENCES:
        items, threads = _handed(generator, sentence)
        assert items[-1] is None
        assert items[:-1] == list(generator.stream(sentence))
        assert threading.get_ident() not in threads
        items, _ = _handed(generator, sentence, sampling=sampling)
        joined = "".join(generator.stream(sentence, sampling=sampling))
        assert "".join(items[:-1]) == joined
    stop = threading.Event()
    stop.set()
    assert _handed(generator, SENTENCES[0], stop=stop)[0] == [None]


def test_a_failure_is_handed_over_and_a_long_prompt_refused_at_once():
    from keras_attn_runtime.generator import BundleGenerator
    from keras_attn_runtime.opener import PromptTooLong

    one = BundleGenerator(LM, loops=1)
    (copy,) = one._copies
    calls = []
    _counted(one, calls)
    with pytest.raises(PromptTooLong):
        one.stream_into("word " * 200, lambda item: None)
    assert calls == []
    decode = copy.runners["decode"]

    def broken(**feed):
        raise RuntimeError("the decode call failed")

    copy.runners["decode"] = broken
    items, _ = _handed(one, SENTENCES[0])
    assert len(items) == 1 and "decode call failed" in str(items[0])
    copy.runners["decode"] = decode


def test_a_failing_put_drops_its_stream_and_not_the_copy():
    from keras_attn_runtime.generator import BundleGenerator

    one = BundleGenerator(LM, loops=1)

    def closed(item):
        raise RuntimeError("Event loop is closed")

    one.stream_into(SENTENCES[1], closed)
    # The copy's only thread still serves the next stream (`_handed`
    # gives up after 60 s without a piece).
    items, _ = _handed(one, SENTENCES[0])
    assert "".join(items[:-1]).startswith("Je suis fatigu")


def test_a_prompt_is_tokenized_once_for_its_window_and_its_stream():
    """The server checks a prompt's window before its stream begins; the
    stream then reads the same ids, not a second tokenization."""
    from keras_attn_runtime.generator import BundleGenerator

    one = BundleGenerator(LM, loops=1)
    calls = []

    class Counting:
        def __init__(self, tokenizer):
            self.inner = tokenizer

        def encode(self, *args, **kwargs):
            calls.append(args[0])
            return self.inner.encode(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    one.tokenizer = Counting(one.tokenizer)
    text = SENTENCES[0]
    one.check_prompt(text)
    alone = "".join(one.stream(text))
    assert len(calls) == 1 and text in calls[0]
    assert alone.startswith("Je suis fatigu")
