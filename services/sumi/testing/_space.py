"""A Space of a test's own and what a worker's test does in it, synchronously, over HTTP."""

import base64
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from sumi.cli import Globals, apply_files
from sumi.cli import Host as Client
from sumi.cli import deploy as _deploy
from sumi.testing._host import Host

T = TypeVar("T")
TERMINAL = ("complete", "errored", "terminated")


class Space:
    def __init__(self, host: Host, name: str) -> None:
        self.host = host
        self.name = name
        self.client = Client(host.url, host.admin_token, name)

    def close(self) -> None:
        self.client.close()

    # ---- Resources ---------------------------------------------------------------------------

    def apply(self, *manifests: str | Path) -> list[dict[str, Any]]:
        """`sumi apply -f` each manifest into this Space; the outcomes."""
        return apply_files(Globals(self.host.url, self.host.admin_token, self.name), [Path(m) for m in manifests])

    def deploy(self, directory: str | Path, worker: str) -> str:
        """`sumi deploy DIRECTORY --worker WORKER`; the new Version's UID."""
        return _deploy.run(Path(directory), worker, self.client)

    def resource(self, name: str) -> dict[str, Any]:
        return self.client.resource(name)

    # ---- queues ------------------------------------------------------------------------------

    def send(self, queue: str, *bodies: str | bytes) -> list[str]:
        messages = [{"body": base64.b64encode(b.encode() if isinstance(b, str) else b).decode()} for b in bodies]
        path = f"{self.client.base()}/queues/{quote(queue, safe='')}/messages"
        return list(self.client.write("POST", path, {"messages": messages}, "sending", 202)["messageIds"])

    def stats(self, queue: str) -> dict[str, Any]:
        path = f"{self.client.base()}/queues/{quote(queue, safe='')}/stats"
        return dict(self.client.ask("GET", path, "reading stats", 200))

    def peek(self, queue: str, **params: Any) -> list[dict[str, Any]]:
        path = f"{self.client.base()}/queues/{quote(queue, safe='')}/messages"
        return list(self.client.ask("GET", path, "peeking", 200, params=params)["items"])

    def wait_stats(self, queue: str, timeout: float = 60.0, **counts: int) -> dict[str, Any]:
        """The queue's stats once every named count is exactly its value (e.g. acknowledged=1, inFlight=0)."""
        return wait_for(lambda: self.stats(queue), lambda s: all(s[k] == v for k, v in counts.items()), timeout)

    # ---- workflow instances ------------------------------------------------------------------

    def _instances(self, workflow: str) -> str:
        return f"{self.client.base()}/workflows/{quote(workflow, safe='')}/instances"

    def start(self, workflow: str, params: Any = None, id: str | None = None) -> str:
        body = {**({"id": id} if id else {}), **({"params": params} if params is not None else {})}
        return str(self.client.write("POST", self._instances(workflow), body, "starting", 201)["id"])

    def instance(self, workflow: str, id: str) -> dict[str, Any]:
        return dict(self.client.ask("GET", f"{self._instances(workflow)}/{quote(id, safe='')}", "reading", 200))

    def event(self, workflow: str, id: str, type: str, payload: Any = None) -> int:
        body = {"type": type, **({"payload": payload} if payload is not None else {})}
        path = f"{self._instances(workflow)}/{quote(id, safe='')}/events"
        return int(self.client.write("POST", path, body, "sending the event", 202)["sequence"])

    def history(self, workflow: str, id: str) -> list[dict[str, Any]]:
        path = f"{self._instances(workflow)}/{quote(id, safe='')}/history"
        return list(self.client.ask("GET", path, "reading history", 200)["items"])

    def wait_instance(
        self, workflow: str, id: str, status: str | tuple[str, ...] = TERMINAL, timeout: float = 60.0
    ) -> Any:
        """The instance once its status is STATUS (by default: any terminal one)."""
        wanted = (status,) if isinstance(status, str) else status
        return wait_for(lambda: self.instance(workflow, id), lambda i: i["status"] in wanted, timeout)


def wait_for(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 60.0) -> T:
    """READ again until DONE holds; the last value read, or AssertionError naming it after TIMEOUT."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still {value!r} after {timeout:.0f}s")
        time.sleep(0.2)


def new_space(host: Host) -> Space:
    """A fresh Space, made by the admin."""
    name = "sp-" + uuid.uuid4().hex[:10]
    with Client(host.url, host.admin_token) as admin:
        admin.ask("POST", "/v2/spaces", "creating the Space", 201, body={"name": name})
    return Space(host, name)
