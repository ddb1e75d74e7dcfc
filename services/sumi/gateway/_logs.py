"""A worker's log (host-api.md section 8): what it printed and its uncaught errors, like `wrangler tail`.

`GET /v2/spaces/{space}/workers/{worker}/logs` answers the last lines (`limit`), filtered by
instance, level (that one and above) and `since`; with `follow=true` it is a Server-Sent
Events stream of the lines as they come (from now, or from `since`), one `log` event each.
A token without a role in the Space gets `404 not_found`, as for every Space path.
"""

import json
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from sumi.core.logline import item
from sumi.core.problems import Problem
from sumi.gateway import _logtail
from sumi.gateway import _reads as reads
from sumi.gateway._auth import authorize
from sumi.gateway._backend import backend
from sumi.gateway._logfilter import LEVELS, LogFilter, parse_since
from sumi.gateway._query import bool_param, choice_param, int_param
from sumi.gateway._routing import route

HEARTBEAT_S = 15.0


async def worker_logs(request: Request) -> Response:
    space, ref = request.path_params["space"], request.path_params["worker"]
    await authorize(request, space)
    row = await reads.worker(backend(request), space, ref)
    if row is None:
        raise Problem("not_found", f"no ModuleWorker {ref!r} in Space {space!r}")
    f = LogFilter(
        space,
        row["uid"],
        instance=request.query_params.get("instance"),
        level=choice_param(request, "level", LEVELS) or "debug",
        since=parse_since(request.query_params.get("since")),
    )
    settings = request.app.state.settings
    if not bool_param(request, "follow", False):
        lines = await _logtail.read(settings, f, int_param(request, "limit", 100, 1, 1000))
        return JSONResponse({"items": [item(rec) for rec in lines]})
    # Positioned before the answer starts: a client that has the headers misses no later line.
    tail = _logtail.LogTail(settings, f)
    await tail.open(follow=True)
    return StreamingResponse(_events(tail), media_type="text/event-stream", headers=_NO_BUFFERING)


_NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _events(tail: _logtail.LogTail) -> AsyncIterator[str]:
    try:
        yield ": following\n\n"
        quiet_since = time.monotonic()
        async for lines in tail.follow():
            for rec in lines:
                yield f"event: log\ndata: {json.dumps(item(rec), ensure_ascii=False)}\n\n"
            if lines:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > HEARTBEAT_S:
                quiet_since = time.monotonic()
                yield ": heartbeat\n\n"  # a gone client shows up as a failed write
    finally:
        await tail.close()


routes = [route("/v2/spaces/{space}/workers/{worker}/logs", GET=worker_logs)]
