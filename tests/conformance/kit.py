"""Helpers of the conformance suites: everything over real HTTP.

Worker code is installed the way a user does it: a ModuleWorker, a WorkerVersion
(verified by the Host in the real runtime) and a WorkerDeployment at 100 %.
"""

import asyncio
import base64
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from tests.httpkit import CONSUMER, DEPLOYMENT, QUEUE, VERSION, WORKER, auth, b64

# A worker whose behaviour each message body chooses; it reports what it saw to the REPORT
# queue (when bound), so tests read deliveries back through the Host itself.
PROBE_JS = r"""
const dec = new TextDecoder();
export default {
  async queue(batch, env, ctx) {
    const seen = [];
    for (const m of batch.messages) {
      const cmd = dec.decode(m.body);
      seen.push({id: m.id, ts: m.timestamp, attempts: m.attempts, body: cmd, batch: batch.id,
                 queue: batch.queue, size: batch.messages.length});
    }
    if (env.REPORT) await env.REPORT.send(JSON.stringify(seen));
    for (const m of batch.messages) {
      const cmd = dec.decode(m.body);
      if (cmd.startsWith('ack')) await batch.acknowledge(m.id);
      else if (cmd.startsWith('retry:')) await batch.retry(m.id, Number(cmd.slice(6)));
      else if (cmd === 'retry') await batch.retry(m.id);
      else if (cmd === 'throw') throw new Error('handler threw');
      else if (cmd.startsWith('sleep:')) await new Promise((r) => setTimeout(r, Number(cmd.slice(6))));
      else if (cmd === 'spin') { for (;;) {} }
    }
  },
};
"""


class Api:
    """One Space, one editor token; every call is the public HTTP API."""

    def __init__(self, client: httpx.AsyncClient, space: Any) -> None:
        self.c = client
        self.space = space.name
        self.token = space.editor_token
        self.viewer = space.viewer_token
        self.h = auth(space.editor_token)

    # ---- resources ---------------------------------------------------------------------------

    async def post(self, name: str, form: str, spec: Any, key: str | None = None, **extra: Any) -> httpx.Response:
        return await self.c.post(
            f"/v2/spaces/{self.space}/resources",
            headers={**self.h, "Idempotency-Key": key or uuid.uuid4().hex},
            json={"name": name, "form": form, "spec": spec, **extra},
        )

    async def put(self, uid: str, spec: Any, key: str | None = None) -> httpx.Response:
        return await self.c.put(
            f"/v2/spaces/{self.space}/resources/{uid}",
            headers={**self.h, "Idempotency-Key": key or uuid.uuid4().hex},
            json={"spec": spec},
        )

    async def delete(self, uid: str, key: str | None = None) -> httpx.Response:
        return await self.c.delete(
            f"/v2/spaces/{self.space}/resources/{uid}", headers={**self.h, "Idempotency-Key": key or uuid.uuid4().hex}
        )

    async def get(self, uid: str) -> httpx.Response:
        return await self.c.get(f"/v2/spaces/{self.space}/resources/{uid}", headers=self.h)

    async def op(self, op_id: str, wait: int = 30) -> dict[str, Any]:
        r = await self.c.get(f"/v2/operations/{op_id}?wait={wait}", headers=self.h)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def done(self, response: httpx.Response, state: str = "succeeded") -> dict[str, Any]:
        assert response.status_code == 202, response.text
        op = await self.op(response.json()["id"])
        assert op["state"] == state, op
        return op

    async def create(self, name: str, form: str, spec: Any) -> str:
        op = await self.done(await self.post(name, form, spec))
        return op["resourceUid"]  # type: ignore[no-any-return]

    # ---- building blocks ---------------------------------------------------------------------

    async def queue(self, name: str | None = None, retention: int = 3600) -> str:
        return await self.create(name or f"q-{uuid.uuid4().hex[:8]}", QUEUE, {"retentionSeconds": retention})

    async def worker(
        self,
        source: str = PROBE_JS,
        handlers: tuple[str, ...] = ("queue",),
        bindings: dict[str, str] | None = None,
        vars: dict[str, str] | None = None,
        runtime: str = "javascript",
        deploy: bool = True,
    ) -> str:
        tag = uuid.uuid4().hex[:8]
        worker = await self.create(f"w-{tag}", WORKER, {"runtime": runtime, "handlers": list(handlers)})
        if not deploy:
            return worker
        version = await self.version(worker, source, bindings, vars, runtime)
        await self.create(
            f"d-{tag}",
            DEPLOYMENT,
            {"worker": {"resourceUid": worker}, "versions": [{"version": {"resourceUid": version}, "percentage": 100}]},
        )
        return worker

    async def version(
        self,
        worker: str,
        source: str,
        bindings: dict[str, str] | None = None,
        vars: dict[str, str] | None = None,
        runtime: str = "javascript",
        workflow_bindings: dict[str, str] | None = None,
        wait: bool = True,
    ) -> str:
        """A WorkerVersion; with `wait`, verified (its create succeeded), else still verifying."""
        main = "worker.js" if runtime == "javascript" else "worker.py"
        spec: dict[str, Any] = {
            "worker": {"resourceUid": worker},
            "mainModule": main,
            "modules": [{"name": main, "content": source}],
        }
        if bindings:
            spec["queueBindings"] = [{"name": n, "queue": {"resourceUid": q}} for n, q in bindings.items()]
        if vars:
            spec["vars"] = vars
        if workflow_bindings:
            spec["workflowBindings"] = [
                {"name": n, "resource": {"resourceUid": w}} for n, w in workflow_bindings.items()
            ]
        name = f"v-{uuid.uuid4().hex[:8]}"
        if wait:
            return await self.create(name, VERSION, spec)
        r = await self.post(name, VERSION, spec)
        assert r.status_code == 202, r.text
        return r.json()["resourceUid"]  # type: ignore[no-any-return]

    def consumer_spec(self, queue: str, worker: str, **over: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "queue": {"resourceUid": queue},
            "worker": {"resourceUid": worker},
            "maxBatchSize": 10,
            "maxBatchTimeoutSeconds": 0,
            "maxConcurrency": 4,
            "maxRetries": 3,
            "retryDelaySeconds": 0,
        }
        spec.update(over)
        return {k: v for k, v in spec.items() if v is not None}

    async def consumer(self, queue: str, worker: str, name: str | None = None, **over: Any) -> str:
        return await self.create(
            name or f"c-{uuid.uuid4().hex[:8]}", CONSUMER, self.consumer_spec(queue, worker, **over)
        )

    # ---- queue data plane --------------------------------------------------------------------

    async def send(self, queue: str, *bodies: bytes | str, delay: int | None = None) -> list[str]:
        messages = [{"body": b64(b), **({"delaySeconds": delay} if delay is not None else {})} for b in bodies]
        r = await self.c.post(
            f"/v2/spaces/{self.space}/queues/{queue}/messages", headers=self.h, json={"messages": messages}
        )
        assert r.status_code == 202, r.text
        return r.json()["messageIds"]  # type: ignore[no-any-return]

    async def stats(self, queue: str) -> dict[str, Any]:
        r = await self.c.get(f"/v2/spaces/{self.space}/queues/{queue}/stats", headers=self.h)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def peek(self, queue: str, **params: Any) -> list[dict[str, Any]]:
        r = await self.c.get(
            f"/v2/spaces/{self.space}/queues/{queue}/messages",
            headers=self.h,
            params={"includeBody": "true", "limit": 1000, **params},
        )
        assert r.status_code == 200, r.text
        return r.json()["items"]  # type: ignore[no-any-return]

    async def until(self, queue: str, timeout: float = 30, **want: int) -> dict[str, Any]:
        """Poll stats until every named counter has (at least) the wanted value."""
        deadline = time.monotonic() + timeout
        while True:
            s = await self.stats(queue)
            if all(s[k] == v for k, v in want.items()):
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"stats never reached {want}: {s}")
            await asyncio.sleep(0.1)

    async def reports(self, report_queue: str, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        """What the probe worker saw, from its REPORT queue (each item one delivered message)."""
        import json

        deadline = time.monotonic() + timeout
        while True:
            items = await self.peek(report_queue)
            seen = [m for item in items for m in json.loads(base64.b64decode(item["body"]))]
            if len(seen) >= count:
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(seen)} of {count} deliveries reported: {seen}")
            await asyncio.sleep(0.1)


class Flows:
    """One Ready DurableWorkflow and its instance paths."""

    def __init__(self, api: Api, uid: str) -> None:
        self.api, self.uid = api, uid
        self.base = f"/v2/spaces/{api.space}/workflows/{uid}/instances"

    def path(self, iid: str, tail: str = "") -> str:
        return f"{self.base}/{quote(iid, safe='')}{tail}"

    async def create(self, body: Any = None, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = {**self.api.h, **({"Idempotency-Key": key} if key else {})}
        return await self.api.c.post(self.base, headers=headers, json={} if body is None else body, **kw)

    async def started(self, **body: Any) -> str:
        r = await self.create(body)
        assert r.status_code == 201, r.text
        return r.json()["id"]  # type: ignore[no-any-return]

    async def get(self, iid: str) -> httpx.Response:
        return await self.api.c.get(self.path(iid), headers=self.api.h)

    async def event(self, iid: str, body: Any, key: str | None = None) -> httpx.Response:
        headers = {**self.api.h, **({"Idempotency-Key": key} if key else {})}
        return await self.api.c.post(self.path(iid, "/events"), headers=headers, json=body)

    async def terminate(self, iid: str) -> httpx.Response:
        return await self.api.c.post(self.path(iid, "/terminate"), headers=self.api.h)

    async def history(self, iid: str) -> httpx.Response:
        return await self.api.c.get(self.path(iid, "/history"), headers=self.api.h)

    async def until(self, iid: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            r = await self.get(iid)
            assert r.status_code == 200, r.text
            if r.json()["status"] in statuses:
                return r.json()  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, r.json()
            await asyncio.sleep(0.1)
