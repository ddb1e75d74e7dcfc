"""Admission: a bound on the requests the gateway works on at once, and `Retry-After` on every
answer that asks a client to come back (issue 20 item 4).

Past MAX_IN_FLIGHT requests of the API, a new one is answered `503 backend_unavailable` at once,
before its body is read: the gateway's memory and the backends' queues stay bounded whatever
the number of clients, and the client is told when to try again (with the same
Idempotency-Key, host-api.md section 6). Every 429 and 503, whoever answers it (a decision that
did not come in time, a full event queue), carries `Retry-After`, so a client never has to guess.
The service endpoints are never turned away: a probe must see the gateway as it is.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sumi.core.problems import Problem
from sumi.gateway._problems import problem_response

# Each request in flight holds at most a body (20 MiB, read as it comes) and a wait for a decision;
# 512 of them are well within one gateway process, and far past what one gateway answers in time.
MAX_IN_FLIGHT = 512
RETRY_AFTER = "1"  # seconds: a decision takes well under that when the backends are well
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/ui")


class Admission:
    def __init__(self, app: ASGIApp, limit: int = MAX_IN_FLIGHT) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            busy = Problem("backend_unavailable", f"the gateway holds {self.limit} requests; retry shortly")
            await problem_response(busy, scope["path"])(scope, receive, _with_retry_after(send))
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, _with_retry_after(send))
        finally:
            self.in_flight -= 1


def _with_retry_after(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] in (429, 503):
            headers = list(message.get("headers", []))
            if not any(name.lower() == b"retry-after" for name, _ in headers):
                message = {**message, "headers": [*headers, (b"retry-after", RETRY_AFTER.encode())]}
        await send(message)

    return sending
