"""The OpenAPI document `keras-attn serve` answers with `--enable-docs`
(`keras_attn_cli.serving.openapi_document`), on an app of stand-in routes shaped
as KServe's and ours: only routes that answer, a body for each route
that reads one, and the pages that read it."""

import pytest

from keras_attn_cli.serving import openapi_document

fastapi = pytest.importorskip("fastapi")
pytest.importorskip("httpx")


def app_with_kserves_routes():
    from fastapi import Request

    app = fastapi.FastAPI(title="t", docs_url=None, redoc_url=None)

    async def raw(request: Request):  # reads its body itself
        return {}

    async def named(model_name: str):
        return {}

    for path in (
        "/v1/models/{model_name}:predict",
        "/v1/models/{model_name}:explain",
        "/v2/repository/models/{model_name}/load",
        "/openai/v1/completions",
        "/openai/v1/chat/completions",
    ):
        app.add_api_route(path, raw, methods=["POST"])
    app.add_api_route("/v1/models/{model_name}", named, methods=["GET"])
    return app


@pytest.mark.parametrize("management", [False, True])
def test_the_document_lists_only_routes_that_answer(management):
    app = app_with_kserves_routes()
    openapi_document.install(app, model_management=management)
    paths = app.openapi()["paths"]
    assert "/v1/models/{model_name}:explain" not in paths
    repository = "/v2/repository/models/{model_name}/load"
    assert (repository in paths) == management
    assert "/v1/models/{model_name}" in paths  # FastAPI's own, kept


def test_each_route_that_reads_a_body_documents_it_and_its_errors():
    app = app_with_kserves_routes()
    openapi_document.install(app)
    paths = app.openapi()["paths"]
    for (path, method), (body, _, error, _) in openapi_document.BODIES.items():
        operation = paths[path][method]
        schema = operation["requestBody"]["content"]["application/json"]
        assert schema["schema"] is body
        for status in ("200", "400", "404", "413"):
            assert status in operation["responses"], (path, status)
        shown = operation["responses"]["400"]["content"]["application/json"]
        assert shown["schema"] is error
    chat = paths["/openai/v1/chat/completions"]["post"]
    assert "429" in chat["responses"]
    assert chat["requestBody"]["content"]["application/json"]["schema"][
        "required"
    ] == ["model", "messages"]


def test_the_pages_are_served_and_read_the_corrected_document():
    from fastapi.testclient import TestClient

    app = app_with_kserves_routes()
    openapi_document.install(app)
    client = TestClient(app)
    for page in ("/docs", "/redoc"):
        got = client.get(page)
        assert got.status_code == 200 and "/openapi.json" in got.text
    document = client.get("/openapi.json").json()
    assert "/v1/models/{model_name}:explain" not in document["paths"]
    assert "/docs" not in document["paths"]


def test_a_paths_model_name_is_one_of_the_served_names():
    app = app_with_kserves_routes()
    openapi_document.install(app, model_names=lambda: ["b", "a"])
    operation = app.openapi()["paths"]["/v1/models/{model_name}"]["get"]
    (parameter,) = operation["parameters"]
    assert parameter["schema"] == {"type": "string", "enum": ["a", "b"]}
