"""The OpenAPI document and the served routes are the same set (host-api.md section 7)."""

import re

import httpx
from starlette.routing import BaseRoute, Mount, Route

from sumi.core.config import Settings
from sumi.gateway import create_app

IGNORED_METHODS = {"HEAD"}  # Starlette adds HEAD to every GET route by itself


def served(routes: list[BaseRoute], prefix: str = "") -> dict[str, set[str]]:
    """path → methods, walking Mounts; the static dashboard under /ui is not API."""
    found: dict[str, set[str]] = {}
    for route in routes:
        if isinstance(route, Mount):
            if prefix + route.path == "/ui":
                continue
            for path, methods in served(route.routes, prefix + route.path).items():
                found.setdefault(path, set()).update(methods)
        elif isinstance(route, Route):
            methods = set(route.methods or ()) - IGNORED_METHODS
            found.setdefault(prefix + route.path, set()).update(methods)
    return found


def documented(doc: dict) -> dict[str, set[str]]:
    return {path: {m.upper() for m in item} for path, item in doc["paths"].items()}


async def app_and_doc() -> tuple[dict[str, set[str]], dict]:
    # Built and called without its lifespan (ASGITransport runs none): no Kafka, no Postgres.
    app = create_app(Settings.from_env())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200
    return served(app.routes), response.json()


async def test_every_served_route_is_documented_with_its_methods() -> None:
    routes, doc = await app_and_doc()
    assert routes == documented(doc)


async def test_document_is_openapi_3_1_with_problem_responses() -> None:
    _, doc = await app_and_doc()
    assert doc["openapi"].startswith("3.1")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert "responses" in op, (path, method)
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert "application/problem+json" in response["content"], (path, method)


async def test_every_schema_reference_resolves() -> None:
    _, doc = await app_and_doc()
    text = str(doc)
    for name in re.findall(r"#/components/schemas/(\w+)", text):
        assert name in doc["components"]["schemas"], name


async def test_writes_on_resources_require_idempotency_key() -> None:  # QC-46
    _, doc = await app_and_doc()
    for method in ("post",):
        params = doc["paths"]["/v2/spaces/{space}/resources"][method]["parameters"]
        assert any(p["name"] == "Idempotency-Key" and p["required"] for p in params)
    item = doc["paths"]["/v2/spaces/{space}/resources/{uid}"]
    for method in ("put", "delete"):
        assert any(p["name"] == "Idempotency-Key" and p["required"] for p in item[method]["parameters"])
