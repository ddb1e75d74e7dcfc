"""Every error leaves the gateway as `application/problem+json` (host-api.md section 6).

`Problem` exceptions and Starlette's routing errors are answered by handlers;
anything else is caught by `CatchAll`, the innermost middleware, so not even an
unexpected bug answers a bare 500 or HTML.
"""

import asyncio
import logging
from typing import Any

import psycopg
from aiokafka.errors import KafkaError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sumi.core.problems import Problem

log = logging.getLogger("sumi.gateway")

MEDIA_TYPE = "application/problem+json"

# Errors that mean "a backend could not be reached in time": nothing is known to
# have happened, so the client may retry with the same Idempotency-Key (WF-27).
CONNECTIVITY = (psycopg.OperationalError, KafkaError, TimeoutError, asyncio.TimeoutError, ConnectionError)


def body_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=int(body["status"]), media_type=MEDIA_TYPE, headers=headers)


def problem_response(problem: Problem, instance: str | None = None) -> Response:
    return body_response(problem.to_json(instance))


def stored_problem_response(body: dict[str, Any], instance: str) -> Response:
    """A Problem the control processor decided, answered as it was decided."""
    return body_response({**body, "instance": body.get("instance") or instance})


async def on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem_response(exc, request.url.path)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return problem_response(Problem("not_found", "no such route"), request.url.path)
    body = Problem("invalid_request", str(exc.detail)).to_json(request.url.path)
    body["status"] = exc.status_code  # 405 and friends keep their own status
    return body_response(body, headers=dict(exc.headers or {}))


def unexpected_response(exc: BaseException, path: str) -> Response:
    if isinstance(exc, CONNECTIVITY):
        log.warning("backend unavailable on %s: %r", path, exc)
        problem = Problem("backend_unavailable", "Kafka or the read side did not answer in time")
        return problem_response(problem, path)
    log.error("unexpected error on %s", path, exc_info=exc)
    # The contract has no code for a bug; keep the Problem shape all the same.
    return body_response(
        {
            "type": "urn:sumi:problem:internal_error",
            "title": "Internal error",
            "status": 500,
            "code": "internal_error",
            "detail": "an unexpected error occurred; it has been logged",
            "instance": path,
        }
    )


class CatchAll:
    """Turns an uncaught exception into a Problem response (503 or 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:
            return  # the client went away while its body was read: nobody to answer, nothing wrong here
        except Exception as exc:  # the point of this middleware
            if started:
                raise
            await unexpected_response(exc, scope["path"])(scope, receive, send)
