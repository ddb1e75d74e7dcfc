"""Problem codes of host-api.md §6 that need a particular moment or size to provoke."""

import uuid
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

FORMS = "https://edge.forms.takoform.com/forms/"
WORKER = FORMS + "ModuleWorker/0.3.0/"
VERSION = FORMS + "WorkerVersion/0.5.0/"

# Module evaluation spins for a while, so the Version stays "verifying" long enough
# for a concurrent change to meet its unfinished create Operation.
SLOW_JS = """
const until = Date.now() + 2500; while (Date.now() < until) {}
export default { async queue(batch) {} };
"""


async def _post(c: httpx.AsyncClient, space: str, token: str, body: Any) -> httpx.Response:
    return await c.post(
        f"/v2/spaces/{space}/resources",
        json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex},
    )


async def test_resource_busy_while_an_operation_is_unfinished(host: Any, space: Any) -> None:
    # WF-17 / host-api §6: a short-lived concurrent change answers 409 resource_busy.
    name, editor, _ = space
    h = {"Authorization": f"Bearer {editor}"}
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        w = await _post(
            c, name, editor, {"name": "w", "form": WORKER, "spec": {"runtime": "javascript", "handlers": ["queue"]}}
        )
        await c.get(f"/v2/operations/{w.json()['id']}", params={"wait": 30}, headers=h)
        v = await _post(
            c,
            name,
            editor,
            {
                "name": "v",
                "form": VERSION,
                "spec": {
                    "worker": {"resourceUid": w.json()["resourceUid"]},
                    "mainModule": "worker.js",
                    "modules": [{"name": "worker.js", "content": SLOW_JS}],
                },
            },
        )
        assert v.status_code == 202, v.text
        busy = await c.delete(f"/v2/spaces/{name}/resources/v", headers={**h, "Idempotency-Key": uuid.uuid4().hex})
        assert busy.status_code == 409 and busy.json()["code"] == "resource_busy", busy.text
        done = await c.get(f"/v2/operations/{v.json()['id']}", params={"wait": 30}, headers=h)
        assert done.json()["state"] == "succeeded", done.text
        gone = await c.delete(f"/v2/spaces/{name}/resources/v", headers={**h, "Idempotency-Key": uuid.uuid4().hex})
        assert gone.status_code == 202, gone.text


async def test_payload_too_large(host: Any, space: Any) -> None:
    name, editor, _ = space
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        huge = {
            "name": "big",
            "form": WORKER,
            "spec": {"runtime": "javascript", "handlers": [], "pad": "x" * (21 * 1024 * 1024)},
        }
        resp = await _post(c, name, editor, huge)
        assert resp.status_code == 413 and resp.json()["code"] == "payload_too_large", resp.text[:300]
        assert resp.headers["content-type"].startswith("application/problem+json")
