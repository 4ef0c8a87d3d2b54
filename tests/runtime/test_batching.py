"""Iteration-level batching (`keras_attn_runtime.batching`): sentences
decoded side by side in shared loops (one or two), each advancing a token
a call, get the answers they get alone, in fewer calls than alone; a
caller that stops reading frees its rows; a file whose step reads its
index is refused."""

import threading

import keras
import numpy as np
import pytest

from keras_attn.seq2seq import samplers
from tests.translation.test_translator import tiny_model, tiny_translator

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="exports need TensorFlow"
)

TEXTS = ["a b c", "d .", "c c a b", "a", "a zz b", "b d c", "d d a b c"]


@pytest.fixture(scope="module")
def streaming_file(tmp_path_factory):
    from keras_attn.translation import files

    translator = tiny_translator(
        tiny_model(), sampler=samplers.BeamSampler(2, 0.6, 0.2)
    )
    path = str(tmp_path_factory.mktemp("batching") / "both.tflite")
    files.export_tflite(
        translator, path, search_method="beam", stream_batch=[2, 4, 8]
    )
    return path


def slowed(decoder, seconds):
    """`decoder`'s step taking `seconds` more: callers started together
    then surely overlap, however fast the machine."""
    import time

    step = decoder.step

    def slow_step(*args):
        time.sleep(seconds)
        return step(*args)

    decoder.step = slow_step


def drained(batcher, seconds=5):
    """Whether `batcher` holds no request within `seconds` (a request
    leaves its loop just after handing over its last tokens)."""
    import time

    deadline = time.monotonic() + seconds
    while batcher.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return batcher.in_flight == 0


def _side_by_side(run, texts):
    """`run(text)` for every text on its own thread, all started at once."""
    out, barrier = [None] * len(texts), threading.Barrier(len(texts))

    def worker(i):
        barrier.wait()
        out[i] = run(texts[i])

    threads = [
        threading.Thread(target=worker, args=(i,)) for i in range(len(texts))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("greedy, loops", [(False, 2), (True, 1)])
def test_side_by_side_answers_are_the_answers_alone(
    streaming_file, greedy, loops
):
    from keras_attn_runtime import LiteRTTranslator

    alone = LiteRTTranslator(streaming_file)
    want = ["".join(alone.stream(t, greedy=greedy)) for t in TEXTS]
    assert len(set(want)) > 3, want  # the sentences translate differently
    lite = LiteRTTranslator(streaming_file)
    batcher = lite.batch_streams(loops=loops)
    for loop in batcher.batchers:
        assert loop.decoder.engine == "interpreter"  # lets threads run
        slowed(loop.decoder, 0.02)
    got = _side_by_side(lambda t: "".join(lite.stream(t, greedy=greedy)), TEXTS)
    assert got == want
    # Rows of several sentences shared calls: fewer calls than sentence
    # steps, and more than one sentence's rows in a call on average.
    width = 1 if greedy else 2
    assert batcher.rows_decoded / batcher.steps > width
    assert all(loop.steps for loop in batcher.batchers)  # every loop ran
    assert drained(batcher)


def test_a_caller_that_stops_reading_frees_its_rows(streaming_file):
    from keras_attn_runtime import LiteRTTranslator

    lite = LiteRTTranslator(streaming_file)
    batcher = lite.batch_streams(max_rows=2)  # one sentence at a time
    source = np.zeros((1, lite.length), "int32")
    source[0, :3] = [lite.index.get(w, 1) for w in ("a", "b", "c")]
    first = batcher.search({"source": source})
    next(first)  # one step decoded, the sentence still in flight
    waiting = batcher.search({"source": source})
    first.close()  # the caller hangs up
    *_, (ids, _) = waiting  # the rows went to the next request
    alone = LiteRTTranslator(streaming_file)
    *_, (want, _) = alone._decoded(source)
    assert ids == want
    assert drained(batcher)


def test_capacity_counts_sentences_not_rows(streaming_file):
    from keras_attn_runtime import LiteRTTranslator

    lite = LiteRTTranslator(streaming_file)
    loops = lite.batch_streams(max_rows=6, loops=2)
    assert [b.capacity for b in loops.batchers] == [3, 3]  # beams of 2
    assert loops.capacity == 6


def test_a_file_whose_step_reads_its_index_is_refused(tmp_path):
    from keras_attn import export
    from keras_attn_runtime import StreamingDecoder
    from keras_attn_runtime.batching import RowBatcher

    def start(source):
        return {"h": tf.cast(source, tf.float32)}

    def step_fn(tokens, state, index):
        logits = tf.one_hot(tokens, 4) + tf.cast(index, tf.float32)
        return logits, state, None

    path = str(tmp_path / "positions.tflite")
    spec = {"source": tf.TensorSpec([2, 3], tf.int32)}
    export.export_streaming_tflite((start, step_fn), path, start_signature=spec)
    decoder = StreamingDecoder(path)
    assert decoder.config["reads_index"] is True
    with pytest.raises(ValueError, match="reads_index"):
        RowBatcher(decoder)
