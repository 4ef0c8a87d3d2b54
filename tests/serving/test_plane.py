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


def test_one_error_table_for_rest_and_grpc():
    pytest.importorskip("kserve")
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady

    assert plane.answer_for(RequestError("x")) == (400, "INVALID_ARGUMENT")
    assert plane.answer_for(InvalidInput("x")) == (400, "INVALID_ARGUMENT")
    assert plane.answer_for(plane.NotServed("x")) == (404, "NOT_FOUND")
    assert plane.answer_for(ModelNotFound("x")) == (404, "NOT_FOUND")
    assert plane.answer_for(ModelNotReady("x")) == (503, "UNAVAILABLE")
    assert plane.answer_for(NotImplementedError()) == (501, "UNIMPLEMENTED")
    assert plane.answer_for(RuntimeError("ours")) is None  # a 500


def test_the_adapters_read_the_plane():
    """REST's status and metadata lookup, gRPC's model spec and KServe
    v2's default signature all go through the plane (a failing-first
    pin: REST's own lookup listed the registry's keys)."""
    import asyncio

    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from keras_attn_cli.serving import http_routes, served

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
    assert served.default_key(Backend()) == "serving_default"
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

    pytest.importorskip("kserve")
    from kserve.errors import InvalidInput

    from keras_attn_cli.serving import served

    whole = {"source_truncated": np.array([False, False])}
    served.check_truncated(whole)
    served.check_truncated({"probability": np.array([0.5])})
    cut = {
        "source_truncated": np.array([False, True]),
        "source_length": np.array([64, 64]),
    }
    with pytest.raises(InvalidInput, match="at most 64 source tokens"):
        served.check_truncated(cut)
