"""The one access rule of `keras-attn serve`, on its own, and each
protocol's naming of its calls."""

import pytest

from keras_attn_cli.serving import access

OPEN = dict(access.ACCESS)
LOCKED = {**access.ACCESS, "token": "s3cret"}


def test_management_and_docs_are_off_until_turned_on():
    refused = access.refusal(access.MANAGEMENT, b"", OPEN)
    assert refused.off == "--enable-model-management"
    assert access.refusal(access.DOCS, b"", OPEN).off == "--enable-docs"
    on = {**OPEN, "model_management": True, "docs": True}
    assert access.refusal(access.MANAGEMENT, b"", on) is None
    assert access.refusal(access.DOCS, b"", on) is None
    assert access.refusal(access.OTHER, b"", OPEN) is None


@pytest.mark.parametrize(
    "given", [b"", b"Bearer wrong", "Bearer s3cre", b"s3cret"]
)
def test_a_token_is_needed_everywhere_but_health(given):
    assert access.refusal(access.OTHER, given, LOCKED).unauthorized
    assert access.refusal(access.HEALTH, given, LOCKED) is None
    assert access.refusal(access.OTHER, b"Bearer s3cret", LOCKED) is None
    assert access.refusal(access.OTHER, "Bearer s3cret", LOCKED) is None


def test_an_off_route_says_off_before_asking_for_a_token():
    assert access.refusal(access.MANAGEMENT, b"", LOCKED).off


def test_each_protocol_names_its_calls_kinds():
    from keras_attn_cli.serving import http_routes

    assert http_routes.route_kind("/v2/health/ready") == access.HEALTH
    assert http_routes.route_kind("/v2/repository/index") == access.MANAGEMENT
    assert http_routes.route_kind("/docs") == access.DOCS
    assert http_routes.route_kind("/v1/models/x:predict") == access.OTHER
    grpc_api = pytest.importorskip("keras_attn_cli.serving.grpc_api")
    method = "/inference.GRPCInferenceService/RepositoryModelLoad"
    assert grpc_api.method_kind(method) == access.MANAGEMENT
    ready = "/inference.GRPCInferenceService/ServerReady"
    assert grpc_api.method_kind(ready) == access.HEALTH
