"""Admission: what the gateway lets in, how long a request may take, and `Retry-After` on every
answer that asks a client to come back (issue 20 item 4, issue 41).

Three bounds, each answered at once with `503 backend_unavailable` before a body is read:
- Past MAX_IN_FLIGHT requests of the API, any new one: the gateway's memory and the backends'
  queues stay bounded whatever the number of clients.
- A write that adds work (a workflow instance's create, event or terminate; a queue send) past
  what the Host answers in time (`_limits.WriteLimit`, one per kind of write, learnt from the
  answers' times), and a create while the Host's instances queue for a context (`_backlog`):
  past capacity the Host refuses in milliseconds and finishes what it took in time, instead of
  taking everything and answering late or never. A refused write has appended nothing; the
  client retries with the same Idempotency-Key (host-api.md section 6).
- Every write is answered within `decision_timeout` plus ANSWER_MARGIN_S of reaching the
  gateway, whatever it waits on (a lookup, the pool, the broker, a decision): past it, a request
  not yet answered is answered `503`.
Every 429 and 503, whoever answers it, carries `Retry-After`, so a client never has to guess.
The service endpoints are never turned away: a probe must see the gateway as it is.
"""

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sumi.core.problems import Problem
from sumi.gateway._backlog import Backlog
from sumi.gateway._limits import WriteLimit
from sumi.gateway._problems import problem_response

# Each request in flight holds at most a body (20 MiB, read as it comes) and a wait for a decision;
# 512 of them are well within one gateway process, and far past what one gateway answers in time.
MAX_IN_FLIGHT = 512
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/ui")
ANSWER_MARGIN_S = 0.5  # past the decision's own budget: the lookups before it, the answer after
# The writes that add work to the engines, by the path's segments after /v2/spaces/{space}/.
_WORKFLOW_WRITE = ("workflows", "instances")
_QUEUE_SEND = ("queues", "messages")


def write_kind(scope: Scope) -> tuple[str, str] | None:
    """(kind, Space) of a write the limits apply to, else None."""
    if scope["method"] != "POST":
        return None
    parts = scope.get("raw_path", scope["path"].encode()).split(b"/")
    # ['', 'v2', 'spaces', space, kind, uid, leaf, ...]
    if len(parts) < 7 or parts[1] != b"v2" or parts[2] != b"spaces":
        return None
    kind, leaf = parts[4].decode("latin-1"), parts[6].decode("latin-1")
    if (kind, leaf) == _WORKFLOW_WRITE or ((kind, leaf) == _QUEUE_SEND and len(parts) == 7):
        return kind, parts[3].decode("latin-1")
    return None


def _is_create(scope: Scope) -> bool:
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw.rstrip(b"/").endswith(b"/instances")


class Admission:
    def __init__(
        self,
        app: ASGIApp,
        limit: int = MAX_IN_FLIGHT,
        target: float = 1.0,
        answer_within: float = 10.5,
        backlog: Backlog | None = None,
    ) -> None:
        self.app = app
        self.backlog = backlog
        self.limit = limit
        self.in_flight = 0
        self.answer_within = answer_within
        self.writes = {kind: WriteLimit(target) for kind, _ in (_WORKFLOW_WRITE, _QUEUE_SEND)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            busy = Problem("backend_unavailable", f"the gateway holds {self.limit} requests; retry shortly")
            await problem_response(busy, scope["path"])(scope, receive, _with_retry_after(send))
            return
        started = time.monotonic()
        write = write_kind(scope)
        limit = self.writes[write[0]] if write else None
        if limit is not None and write is not None:
            refused = None
            if self.backlog is not None and _is_create(scope) and self.backlog.full():
                refused = limit.refuse_busiest(write[1], f"{self.backlog.queued} instances wait for a context", started)
            if refused is None:
                refused = limit.admit(write[1], started)
            if refused is not None:
                busy = Problem("backend_unavailable", refused.detail)
                await problem_response(busy, scope["path"])(
                    scope, receive, _with_retry_after(send, refused.retry_after)
                )
                return
        self.in_flight += 1
        try:
            if scope["method"] in ("GET", "HEAD"):  # a long poll or a log's stream may hold on
                await self.app(scope, receive, _with_retry_after(send))
            else:
                await self._answered_in_time(scope, receive, _with_retry_after(send))
        finally:
            self.in_flight -= 1
            if limit is not None and write is not None:
                now = time.monotonic()
                limit.done(write[1], now - started, now)

    async def _answered_in_time(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            async with asyncio.timeout(self.answer_within):
                await self.app(scope, receive, sending)
        except TimeoutError:
            if started:  # the answer is under way (a long body): the client sees it cut
                raise
            late = Problem("backend_unavailable", "no answer in time; retry with the same Idempotency-Key")
            await problem_response(late, scope["path"])(scope, receive, send)


def _with_retry_after(send: Send, seconds: int = 1) -> Send:
    # 1 s unless the answer knows better: a decision takes well under that when the backends are well.
    value = str(seconds).encode()

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] in (429, 503):
            headers = list(message.get("headers", []))
            if not any(name.lower() == b"retry-after" for name, _ in headers):
                message = {**message, "headers": [*headers, (b"retry-after", value)]}
        await send(message)

    return sending
