"""A version's warm-up (`keras_attn_cli.serving.warmup`): TensorFlow
Serving's warm-up file replayed where a SavedModel has one, else each
signature clients call run on inputs made from it, and a stream decoded;
a cut file refused."""

import numpy as np
import pytest

from keras_attn_cli.serving import warmup
from keras_attn_runtime.signature import Signature


class Backend:
    """Records each call; `kind`, `path` and `signatures` as an opened
    artifact has them."""

    def __init__(self, path="", kind="litert"):
        self.path, self.kind, self.calls = path, kind, []
        self.signatures = {
            "serving_default": Signature(
                {"text": ("string", [None])},
                {"probability": ("float32", [None])},
            ),
            "decode_step": Signature(
                {"tokens": ("int32", [None, 4])},
                {"logits": ("float32", [None, 8])},
            ),
        }

    def run(self, key, inputs):
        self.calls.append((key, {k: np.asarray(v) for k, v in inputs.items()}))
        return {}


def write_warmup_file(folder, texts):
    """`folder/assets.extra/tf_serving_warmup_requests`, as TensorFlow
    Serving's docs write it: one `PredictionLog` a request."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    (folder / "assets.extra").mkdir(parents=True)
    path = folder / warmup.WARMUP_FILE
    with tf.io.TFRecordWriter(str(path)) as writer:
        for batch in texts:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "reviews"
            request.model_spec.signature_name = "serving_default"
            request.inputs["text"].CopyFrom(tf.make_tensor_proto(batch))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())
    return path


def test_a_savedmodels_warmup_file_is_replayed(tmp_path):
    pytest.importorskip("tensorflow_serving")
    write_warmup_file(tmp_path, [["a fine film"], ["dull", "long and dull"]])
    backend = Backend(str(tmp_path), kind="saved_model")
    assert warmup.warm_up(backend) == (2, None)
    assert [key for key, _ in backend.calls] == ["serving_default"] * 2
    assert backend.calls[1][1]["text"].tolist() == [b"dull", b"long and dull"]


def test_a_cut_warmup_file_is_refused(tmp_path):
    pytest.importorskip("tensorflow_serving")
    path = write_warmup_file(tmp_path, [["a fine film"]])
    path.write_bytes(path.read_bytes()[:-6])
    with pytest.raises(ValueError, match="cut short"):
        warmup.warm_up(Backend(str(tmp_path), kind="saved_model"))


def test_without_a_file_the_signatures_clients_call_run_on_their_own_inputs():
    backend = Backend()
    assert warmup.warm_up(backend) == (2, None)
    # The default signature, on one text and on a merged batch; a step of
    # a stream's loop is left to the stream.
    assert [(k, v["text"].shape) for k, v in backend.calls] == [
        ("serving_default", (1,)),
        ("serving_default", (4,)),
    ]


def test_a_model_that_streams_decodes_one_text():
    class Streaming(Backend):
        concurrent_streams, stream_capacity, sampling = True, None, False
        streamed = []

        def stream(self, text, stop=None):
            self.streamed.append(text)
            yield from ("un", " texte")

        def check_prompt(self, text):
            return None

    backend = Streaming()
    assert warmup.warm_up(backend) == (3, None)
    assert backend.streamed == [warmup.TEXT]


class Failing(Backend):
    def run(self, key, inputs):
        raise RuntimeError("the model asked for 16 EiB")


def test_a_made_up_input_the_model_refuses_is_told_not_fatal():
    """A model may refuse inputs made from its signature (or fail on any
    input): it is served all the same, and the failure is told."""
    calls, failure = warmup.warm_up(Failing())
    assert calls == 0 and "asked for 16 EiB" in failure


def test_a_failing_request_of_the_warmup_file_fails_the_load(tmp_path):
    pytest.importorskip("tensorflow_serving")
    write_warmup_file(tmp_path, [["a fine film"]])
    with pytest.raises(RuntimeError, match="16 EiB"):
        warmup.warm_up(Failing(str(tmp_path), kind="saved_model"))
