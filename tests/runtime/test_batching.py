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
from tests.timing import drained, slowed  # noqa: F401
from tests.tiny_models import tiny_model, tiny_translator

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


@pytest.mark.parametrize("greedy", [False, True])
def test_a_sentence_hands_over_the_same_tokens_batched_or_alone(
    streaming_file, greedy
):
    """One hand-over (`keras_attn_runtime.search.Handover`) under both
    loops: the same decided tokens and alignments at the same steps, the
    last one the answer up to its end."""
    from keras_attn_runtime import LiteRTTranslator

    alone, lite = (
        LiteRTTranslator(streaming_file),
        LiteRTTranslator(streaming_file),
    )
    lite.batch_streams()
    end = alone.decoder.config["end_id"]
    for text in TEXTS:
        source = alone.source_ids(alone.source_words(text))
        want = list(alone._decoded(source, greedy))
        got = list(lite._decoded(source, greedy))
        assert [ids for ids, _ in got] == [ids for ids, _ in want]
        for (_, a), (_, b) in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        grown = [len(ids) for ids, _ in want]
        assert grown == sorted(set(grown)) or grown[-2] == grown[-1]
        assert 0 not in want[-1][0] and (end in want[-1][0] or len(want) > 1)


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


def _tiny_causal_lm(position="rotary"):
    from keras_attn.models import CausalLM

    keras.utils.set_random_seed(3)
    model = CausalLM(
        vocabulary_size=24,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        num_key_value_heads=1,
        position=position,
    )
    model(np.ones((1, 3), "int32"))
    return model


@pytest.fixture(scope="module")
def decoder_only_file(tmp_path_factory):
    from keras_attn import export

    model = _tiny_causal_lm()
    path = str(tmp_path_factory.mktemp("rows") / "decoder_only.tflite")
    export.export_streaming_tflite(
        export.cached_decoder(model, 16),
        path,
        start_signature=[
            {"prompt": tf.TensorSpec([1, n], tf.int32)} for n in (4, 8)
        ],
        step_batch=[1, 2, 4],
        settings={"start_id": 1, "end_id": 2, "max_length": 8},
    )
    return model, path


def test_decoder_only_rows_at_different_positions_share_decode_calls(
    decoder_only_file,
):
    # Each request: its prompt but the last token prefilled, the last fed
    # as the first step's token, its rows at its own positions; together
    # they must give what `CausalLM.generate` gives each prompt alone.
    from keras_attn_runtime import StreamingDecoder
    from keras_attn_runtime.batching import RowBatcher

    model, path = decoder_only_file
    decoder = StreamingDecoder(path)
    assert decoder.config["reads_index"] is False
    batcher = RowBatcher(decoder)
    prompts = [[1, 5, 9], [1, 7, 3, 11, 4, 6], [1], [1, 20, 8, 8, 13]]
    expected = []
    for prompt in prompts:
        new = np.asarray(model.generate(np.array([prompt], "int32"), 8, 2))
        ids = new[0].tolist()
        expected.append(ids[: ids.index(2) + 1] if 2 in ids else ids)
    answers = [None] * len(prompts)

    def run(i):
        prompt = np.array([prompts[i][:-1]], "int32")
        *_, (ids, _) = batcher.search(
            {"prompt": prompt}, first_token=prompts[i][-1]
        )
        answers[i] = ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == expected
    assert batcher.rows_decoded > batcher.steps  # calls were shared


def test_a_requests_own_max_length_is_checked_by_name(decoder_only_file):
    from keras_attn_runtime import StreamingDecoder
    from keras_attn_runtime.batching import RowBatcher

    batcher = RowBatcher(StreamingDecoder(decoder_only_file[1]))
    prompt = {"prompt": np.array([[1, 5]], "int32")}
    with pytest.raises(ValueError, match="max_length=0"):
        next(batcher.search(prompt, first_token=3, max_length=0))
    *_, (ids, _) = batcher.search(prompt, first_token=3, max_length=2)
    assert len(ids) <= 2
