"""The serving plane on its own (`keras_attn_cli.serving.plane`), with no
server: one lookup, one signature rule, one error table, one message for
a call without the token; and the adapters reading them."""

import pytest

from keras_attn_cli.serving import plane, registry
from keras_attn_cli.serving.limits import RequestError


class Model:
    def __init__(self, name, version):
        self.public_name, self.version = name, version


MODELS = {"m": Model("m", 2), "m@1": Model("m", 1), "solo": Model("solo", 1)}


def test_one_lookup_names_the_public_models_and_versions():
    assert plane.find(MODELS, "m") is MODELS["m"]
    assert plane.find(MODELS, "m", version=1) is MODELS["m@1"]
    assert plane.find(MODELS, "m", version="2") is MODELS["m"]
    with pytest.raises(plane.NotServed) as info:
        plane.find(MODELS, "nope")
    # Public names, never the registry's keys (`m@1`).
    assert "served: ['m', 'solo']" in str(info.value)
    with pytest.raises(plane.NotServed, match="no version '3'"):
        plane.find(MODELS, "m", version=3)
    with pytest.raises(plane.NotServed, match="no version label 'x'"):
        plane.find(MODELS, "m", label="x")


def test_one_signature_rule_for_every_protocol():
    both = {"translate": 1, "serving_default": 2}
    assert plane.signature_key(both) == "serving_default"
    assert plane.signature_key({"translate": 1, "b": 2}) == "translate"
    assert plane.signature_key(both, "translate") == "translate"
    for asked in ("nope", 3, ""):
        with pytest.raises(RequestError) as info:
            plane.signature_key(both, asked)
        assert str(info.value) == (
            f"Unknown signature_name {asked!r}; this model has "
            "['serving_default', 'translate']"
        )


def test_one_error_table_for_rest_grpc_and_openai():
    pytest.importorskip("kserve")
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady

    from keras_attn_cli.serving.admission import TooBusy
    from keras_attn_runtime.opener import PromptTooLong

    def answer(err):
        row = plane.answer_for(err)
        return row.status, row.grpc, row.openai

    bad = (400, "INVALID_ARGUMENT", None)
    assert answer(RequestError("x")) == bad
    assert answer(InvalidInput("x")) == bad
    assert answer(plane.NoSampling("x")) == bad
    assert answer(PromptTooLong(8, 9, "tokens")) == (
        400,
        "INVALID_ARGUMENT",
        "context_length_exceeded",
    )
    missing = (404, "NOT_FOUND", "model_not_found")
    assert answer(plane.NotServed("x")) == missing
    assert answer(ModelNotFound("x")) == missing
    assert answer(TooBusy("x")) == (
        429,
        "RESOURCE_EXHAUSTED",
        "too_many_requests",
    )
    assert answer(ModelNotReady("x")) == (503, "UNAVAILABLE", None)
    assert answer(NotImplementedError()) == (501, "UNIMPLEMENTED", None)
    assert answer(plane.ModelFailed("x")) == (500, "INTERNAL", None)
    assert plane.answer_for(RuntimeError("ours")) is None  # a 500 of ours
    assert plane.message_of(InvalidInput("why")) == "why"


def test_the_adapters_read_the_plane():
    """REST's status and metadata lookup, gRPC's model spec and KServe
    v2's default signature all go through the plane (a failing-first
    pin: REST's own lookup listed the registry's keys)."""
    import asyncio

    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from keras_attn_cli.serving import http_routes, kserve_model

    class Backend:
        signatures = {"translate": None, "serving_default": None}

    app = FastAPI()
    models = registry.Registry(MODELS)
    http_routes.add_tf_serving_routes(app, models, 1 << 20)
    got = TestClient(app).get("/v1/models/nope")
    assert got.status_code == 404
    assert got.json()["error"] == (
        "Unknown model 'nope'; served: ['m', 'solo']"
    )
    assert kserve_model.default_key(Backend()) == "serving_default"
    pytest.importorskip("grpc")
    from keras_attn_cli.serving import grpc_api

    class Spec:
        name, version_label = "m", ""

        def HasField(self, field):
            return False

    model = asyncio.run(grpc_api.find(models, Spec(), None, "/m"))
    assert model is MODELS["m"]


def test_a_text_the_translator_read_in_part_is_refused_naming_the_window():
    """A SavedModel translator's `source_truncated` row: the request is a
    400 naming the window (it was answered from the first 64 tokens),
    and a request whose rows were read whole is answered."""
    import numpy as np

    whole = {"source_truncated": np.array([False, False])}
    plane.check_truncated(whole)
    plane.check_truncated({"probability": np.array([0.5])})
    cut = {
        "source_truncated": np.array([False, True]),
        "source_length": np.array([64, 64]),
    }
    from keras_attn_runtime.opener import PromptTooLong

    with pytest.raises(PromptTooLong, match="at most 64 source tokens"):
        plane.check_truncated(cut)
    texts = {"text": np.array([b"a b", b"c d e"], object)}
    with pytest.raises(PromptTooLong, match="in 'c d e'; split it"):
        plane.check_truncated(cut, texts)


class Window:
    """A window of 3 words, counting each check."""

    def __init__(self):
        self.checks = 0

    def __call__(self, text):
        from keras_attn_runtime.opener import PromptTooLong

        self.checks += 1
        if len(text.split()) > 3:
            raise PromptTooLong(3, len(text.split()), "words")


class Echo:
    """An artifact whose `translate` upper-cases its texts (or fails), and
    which streams them a word a piece when `streaming`."""

    def __init__(self, fail=False, streaming=False):
        from keras_attn_runtime.signature import Signature

        io = Signature(
            {"text": ("string", [None])}, {"translation": ("string", [None])}
        )
        self.signatures = {"translate": io}
        self.fail, self.calls = fail, []
        self.check_prompt = Window()
        if streaming:
            self.stream = self._stream
            self.concurrent_streams, self.stream_capacity = False, 2
            self.sampling = False

    def run(self, key, inputs):
        import numpy as np

        from keras_attn_runtime.opener import ModelError

        self.calls.append(key)
        if self.fail:
            raise ModelError("no kernel for op X")
        texts = [t.decode().upper() for t in inputs["text"]]
        return {"translation": np.array(texts, object)}

    def _stream(self, text, stop=None):
        for word in text.split():
            yield word.upper() + " "


def served(backend):
    """What the plane asks of a served model, without KServe."""
    import concurrent.futures

    from keras_attn_cli.serving.admission import Admission
    from keras_attn_runtime import capabilities

    class Served:
        public_name, limits, batchers = "echo", {}, {}

    model = Served()
    model.backend, model.can = backend, capabilities.of(backend)
    model.executor = concurrent.futures.ThreadPoolExecutor(1)
    model.admission = Admission("echo", 2, 2)
    return model


def texts(*values):
    import numpy as np

    return {"text": np.array([v.encode() for v in values], object)}


def test_predict_checks_the_window_before_the_model_runs():
    import asyncio

    from keras_attn_runtime.opener import PromptTooLong

    model = served(Echo())
    out = asyncio.run(plane.predict(model, "translate", texts("a b", "c")))
    assert list(out["translation"]) == ["A B", "C"]
    with pytest.raises(PromptTooLong):
        asyncio.run(plane.predict(model, "translate", texts("a", "b c d e")))
    assert model.backend.calls == ["translate"]  # the long text: no call
    failing = served(Echo(fail=True))
    with pytest.raises(plane.ModelFailed, match="failed to run: no kernel"):
        asyncio.run(plane.predict(failing, "translate", texts("a")))


def test_generate_checks_the_window_once_and_answers_whole_or_streamed():
    import asyncio

    from keras_attn_runtime.opener import PromptTooLong

    whole = served(Echo())
    answers = asyncio.run(plane.generate(whole, "a b", n=2))
    assert answers.whole == ["A B", "A B"]
    assert whole.backend.calls == ["translate"]  # one call for n answers
    assert whole.backend.check_prompt.checks == 1  # one check, not two
    with pytest.raises(PromptTooLong):
        asyncio.run(plane.generate(whole, "a b c d"))
    with pytest.raises(plane.NoSampling, match="temperature=0.5"):
        asyncio.run(plane.generate(whole, "a", sampling={"temperature": 0.5}))

    streaming = served(Echo(streaming=True))
    assert streaming.can.streams and streaming.can.decoding == "turns"

    async def joined():
        answers = await plane.generate(streaming, "a b c")
        assert streaming.admission.decoding == 1  # a place taken
        texts = await answers.joined()
        assert streaming.admission.decoding == 0  # and freed
        return texts

    assert asyncio.run(joined()) == ["A B C "]
    assert streaming.backend.calls == []  # streamed, not run


def test_capabilities_are_read_once_from_what_the_artifact_declares():
    from keras_attn_runtime import capabilities

    plain = capabilities.of(Echo())
    assert not plain.streams and plain.window is not None
    assert plain.counts is None and plain.capacity is None

    class Loops(Echo):
        def __init__(self):
            super().__init__(streaming=True)
            self.concurrent_streams, self.sampling = True, True
            self.prompt_length = self.count_tokens = len

    loops = capabilities.of(Loops())
    assert (loops.decoding, loops.samples, loops.capacity) == ("loops", True, 2)
    assert loops.counts == (len, len)

    class Handover(Loops):
        def stream_into(self, text, put, stop=None):
            put(None)

    assert capabilities.of(Handover()).decoding == "handover"
