"""What every test over the Host's HTTP API needs: Form URLs, headers, Problem checks."""

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx

FORMS = "https://edge.forms.takoform.com/forms/"
QUEUE = FORMS + "AtLeastOnceQueue/0.2.0/"
WORKER = FORMS + "ModuleWorker/0.3.0/"
VERSION = FORMS + "WorkerVersion/0.5.0/"
DEPLOYMENT = FORMS + "WorkerDeployment/0.4.0/"
CONSUMER = FORMS + "QueueConsumer/0.3.0/"
WORKFLOW = FORMS + "DurableWorkflow/0.3.0/"
PROBLEM = "application/problem+json"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def key() -> dict[str, str]:
    """A fresh Idempotency-Key header."""
    return {"Idempotency-Key": uuid.uuid4().hex}


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """host-api.md §6: a problem+json body whose status, code and type agree with the response."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["type"] == f"urn:sumi:problem:{code}", body
    return body


class Users:
    """Many users' HTTP clients, one connection each, lent for a request at a time.

    Not one httpx client with many connections: its pool scans every connection it holds on
    every request, and from about 64 connections on that scan alone fills a core of this
    2-core machine, so a benchmark would time its own client. Waiting for a free user is
    part of what a caller measures, as a user waits for a free hand.
    """

    def __init__(self, base_url: str, n: int, headers: dict[str, str] | None = None, timeout: float = 120) -> None:
        # Below the gateway's 5 s keep-alive: a connection is never reused as the server closes it.
        limits = httpx.Limits(max_connections=1, keepalive_expiry=2.0)
        self.all = [
            httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits, headers=headers) for _ in range(n)
        ]
        self._free: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        for client in self.all:
            self._free.put_nowait(client)

    @contextlib.asynccontextmanager
    async def lend(self) -> AsyncIterator[httpx.AsyncClient]:
        client = await self._free.get()
        try:
            yield client
        finally:
            self._free.put_nowait(client)

    async def __aenter__(self) -> "Users":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(client.aclose() for client in self.all))
