"""The Starlette app: routes, error handling, metrics, and the lifespan that owns the backend."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from sumi.core.config import Settings
from sumi.core.problems import Problem
from sumi.gateway import _health, _logs, _operations, _queues, _resources, _spaces, _tokens, _workflows
from sumi.gateway._admission import ANSWER_MARGIN_S, Admission
from sumi.gateway._backend import Backend
from sumi.gateway._metrics import Metrics, MetricsMiddleware
from sumi.gateway._problems import CatchAll, on_http_exception, on_problem
from sumi.gateway._routing import route
from sumi.gateway.openapi import document

UI_DIR = Path(__file__).parent / "ui"


async def openapi_json(request: Request) -> Response:
    return JSONResponse(document())


def routes() -> list[BaseRoute]:
    return [
        *_health.routes,
        route("/openapi.json", GET=openapi_json),
        *_spaces.routes,
        *_tokens.routes,
        *_resources.routes,
        *_operations.routes,
        *_queues.routes,
        *_workflows.routes,
        *_logs.routes,
        Mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui"),
    ]


def create_app(settings: Settings) -> Starlette:
    """The gateway as an ASGI app; its lifespan opens and closes Postgres and Kafka."""
    backend = Backend(settings)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await backend.start()
        gathering = asyncio.create_task(metrics.gathered.follow(settings))
        try:
            yield
        finally:
            gathering.cancel()
            await asyncio.gather(gathering, return_exceptions=True)
            await backend.stop()

    app = Starlette(
        routes=routes(),
        middleware=[
            Middleware(MetricsMiddleware, metrics=metrics),
            Middleware(
                Admission,
                target=settings.write_latency_target,
                backlog=backend.backlog,
                answer_within=settings.decision_timeout + ANSWER_MARGIN_S,
            ),
            Middleware(CatchAll),
            Middleware(_workflows.InstancePaths),
        ],
        exception_handlers={Problem: on_problem, HTTPException: on_http_exception},
        lifespan=lifespan,
    )
    app.state.backend = backend
    app.state.metrics = metrics
    app.state.settings = settings
    return app
