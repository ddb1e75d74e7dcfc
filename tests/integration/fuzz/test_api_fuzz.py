"""Stateful fuzzing of the Host API from its own OpenAPI document (issue 20 item 2).

schemathesis walks the document's links from each create answer to the operations that use its
IDs, so every operation is reached with real IDs too, not only with generated ones that 404.
Checked on every answer: no 5xx, the status and content type and body as the document declares
them, and every 4xx a Problem of host-api.md §6. The budget is fixed (SUMI_FUZZ_EXAMPLES raises it).
"""

import os
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sumi.core.problems import STATUS
from sumi.gateway.openapi import document
from tests.hostkit import Host

EXAMPLES = int(os.environ.get("SUMI_FUZZ_EXAMPLES", "12"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
seen: dict[tuple[str, str], set[int]] = {}


def a_problem_of_the_contract(ctx: Any, response: Any, case: Any) -> bool | None:
    """host-api.md §6: a 4xx is problem+json whose code is one of the table and whose status agrees."""
    seen.setdefault((case.method.upper(), case.path), set()).add(response.status_code)
    if not 400 <= response.status_code < 500:
        return None
    kind = response.headers.get("content-type", [""])
    assert (kind[0] if isinstance(kind, list) else kind).startswith("application/problem+json"), response.text
    body = response.json()
    assert STATUS.get(body.get("code")) == response.status_code == body.get("status"), body
    assert body["type"] == f"urn:sumi:problem:{body['code']}", body
    return True


@pytest.fixture(scope="module")
def machine(host: Host) -> type:
    schema = schemathesis.openapi.from_dict(document())
    base = schema.as_state_machine()
    headers = {"Authorization": f"Bearer {host.admin_token}"}

    class Machine(base):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": host.url, "headers": headers, "timeout": 60}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=[*CHECKS, a_problem_of_the_contract], headers=headers)

    return Machine


def test_the_api_walked_from_its_own_links_gives_no_5xx_and_only_declared_answers(machine: type) -> None:
    # QC-52, WF-18, WF-27, DOC-1: whatever a client sends, the answer is one the contract names.
    settings = hypothesis.settings(
        max_examples=EXAMPLES,
        stateful_step_count=8,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    machine.run(settings=settings)
    reached = sorted(f"{m} {p}" for m, p in seen)
    print(f"operations reached: {len(reached)}; answers: {sum(len(v) for v in seen.values())} kinds")
    for (m, p), statuses in sorted(seen.items()):
        print(f"  {m} {p}: {sorted(statuses)}")
    assert len(seen) >= 12, reached
