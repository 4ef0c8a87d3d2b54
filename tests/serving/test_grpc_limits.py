"""The limits of `keras-attn serve`'s gRPC port (`keras_attn_cli.
grpc_api.build_server`), on a real gRPC server with no models: a
request message over `--max-body-bytes` is RESOURCE_EXHAUSTED, as HTTP's
413, before any servicer reads it; a refusal is one WARNING line, never
a traceback."""

import asyncio
import logging

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("kserve")
pytest.importorskip("tensorflow_serving")

from keras_attn_cli.serving.limits import LIMITS  # noqa: E402


async def _calls(limit, calls):
    from keras_attn_cli.serving import grpc_api, registry

    server, port = grpc_api.build_server(
        registry.Registry(),
        None,
        "127.0.0.1",
        0,
        {},
        {**LIMITS, "max_body_bytes": limit},
    )
    assert port
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            codes = []
            for method, body in calls:
                try:
                    await channel.unary_unary(method)(body, timeout=30)
                    codes.append("OK")
                except grpc.aio.AioRpcError as err:
                    codes.append((err.code().name, err.details()))
            return codes
    finally:
        await server.stop(None)


def status_request(name, padding=0):
    from tensorflow_serving.apis import get_model_status_pb2

    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = name + "x" * padding
    return request.SerializeToString()


def test_a_message_over_max_body_bytes_is_resource_exhausted(caplog):
    method = "/tensorflow.serving.ModelService/GetModelStatus"
    calls = [
        (method, status_request("m")),
        (method, status_request("m", padding=5000)),
    ]
    with caplog.at_level(logging.WARNING):
        small, large = asyncio.run(_calls(4096, calls))
    # The small one reaches the servicer: no such model.
    assert small[0] == "NOT_FOUND" and "Unknown model 'm'" in small[1]
    assert large[0] == "RESOURCE_EXHAUSTED" and "4096" in large[1]
    refusals = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(refusals) == 1 and "NOT_FOUND" in refusals[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert not any(r.levelname == "ERROR" for r in caplog.records)
