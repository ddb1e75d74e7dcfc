"""What every test over the Host's HTTP API needs: Form URLs, headers, Problem checks."""

import base64
import uuid
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
