"""Service endpoints (host-api.md section 7): liveness, readiness, metrics."""

import asyncio
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.core.problems import Problem
from sumi.gateway import _reads as reads
from sumi.gateway._auth import authenticate
from sumi.gateway._backend import backend
from sumi.gateway._problems import problem_response
from sumi.gateway._routing import route
from sumi.wire import kafka

READY_TIMEOUT = 2.0
log = logging.getLogger(__name__)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    db = backend(request)
    try:
        # Postgres up and migrated, and every projection at the end of its topic within 5 s.
        row = await asyncio.wait_for(reads.projections_status(db), READY_TIMEOUT)
        if row["n"] == 0 or row["stale"]:
            raise RuntimeError("projections are not caught up")
        await asyncio.wait_for(kafka.reachable(db.producer), READY_TIMEOUT)
    except Exception as exc:  # readiness answers, whatever broke; it never raises
        return problem_response(Problem("backend_unavailable", f"not ready: {exc!r}"), request.url.path)
    return JSONResponse({"status": "ready"})


async def metrics(request: Request) -> Response:
    # Not among the contract's open endpoints (section 1): a scraper sends a bearer token.
    await authenticate(request)
    metrics = request.app.state.metrics
    try:
        rows = await asyncio.wait_for(reads.quarantine_counts(backend(request)), READY_TIMEOUT)
        metrics.operations.rows = await asyncio.wait_for(reads.operation_durations(backend(request)), READY_TIMEOUT)
    except Exception as exc:  # Postgres down: the scrape still answers, with the counts it last read
        log.warning("/metrics: counts not read: %r", exc)
    else:
        metrics.set_quarantined(rows)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


routes = [
    route("/healthz", GET=healthz),
    route("/readyz", GET=readyz),
    route("/metrics", GET=metrics),
]
