"""The trust boundary for workflow frames (sumi.runtime.rules._protocol): what a runtime child may send."""

from __future__ import annotations

from typing import Any

import pytest

from sumi.runtime.rules._protocol import Invocation, ProtocolError, Refused, check_host_call, check_reply

RUN = Invocation.of({"op": "invoke_workflow", "env": {"queueBindings": ["OUT"], "workflowBindings": ["WF"]}})
QUEUE = Invocation.of({"op": "invoke_queue", "batch": {"id": "b1"}, "env": {"workflowBindings": ["WF"]}})
CONFIG = {"maxAttempts": 3, "initialDelaySeconds": 0, "backoff": "exponential", "maxDelaySeconds": 60}


def call(method: str, args: Any, inv: Invocation = RUN) -> dict[str, Any]:
    frame = {"op": "host_call", "contextId": "c1", "callId": 1, "method": method, "args": args}
    return check_host_call(frame, {1: inv}, 0).args


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("step.do", {"name": "a", "config": CONFIG, "ok": True}),
        ("step.do", {"name": "a", "config": CONFIG, "ok": True, "result": {"x": [1]}}),
        ("step.do", {"name": "a", "config": CONFIG, "ok": False, "error": {"name": "TypeError", "message": "m"}}),
        ("step.sleep", {"name": "s", "seconds": 0}),
        ("step.waitForEvent", {"name": "w", "type": "t", "timeoutSeconds": 31536000}),
        ("workflow.create", {"binding": "WF"}),
        ("workflow.create", {"binding": "WF", "id": "x" * 256, "params": {}}),
        ("workflow.get", {"binding": "WF", "id": "i"}),
        ("workflow.status", {"binding": "WF", "id": "i"}),
        ("workflow.sendEvent", {"binding": "WF", "id": "i", "type": "t", "payload": {"p": 1}}),
        ("workflow.terminate", {"binding": "WF", "id": "i"}),
    ],
)
def test_allowed_workflow_calls_pass_unchanged(method: str, args: dict[str, Any]) -> None:  # WF-18, WF-34
    assert call(method, args) == args


@pytest.mark.parametrize(
    ("method", "args", "inv"),
    [
        ("step.sleep", {"name": "s", "seconds": 1}, QUEUE),  # steps only in a workflow run
        ("step.sleep", {"name": "", "seconds": 1}, RUN),
        ("step.sleep", {"name": "\ud800", "seconds": 1}, RUN),
        ("step.sleep", {"name": "s", "seconds": 31536001}, RUN),
        ("step.waitForEvent", {"name": "w", "type": "t", "timeoutSeconds": 0}, RUN),
        ("step.do", {"name": "a", "config": CONFIG, "ok": True, "result": [1]}, RUN),  # not a document
        ("step.do", {"name": "a", "config": CONFIG, "ok": True, "error": {"name": "E", "message": ""}}, RUN),
        ("step.do", {"name": "a", "config": CONFIG, "ok": False}, RUN),
        ("step.do", {"name": "a", "config": {**CONFIG, "maxAttempts": 101}, "ok": True}, RUN),
        ("step.do", {"name": "a", "config": {**CONFIG, "extra": 1}, "ok": True}, RUN),
        ("workflow.create", {"binding": "OTHER"}, RUN),  # not a binding of this env
        ("workflow.create", {"binding": "WF", "params": {"f": float("nan")}}, RUN),
        ("workflow.sendEvent", {"binding": "WF", "id": "i", "type": "x" * 257}, RUN),
        ("workflow.get", {"binding": "WF"}, RUN),
    ],
)
def test_refused_calls_stop_the_context(method: str, args: dict[str, Any], inv: Invocation) -> None:
    with pytest.raises(ProtocolError) as info:
        call(method, args, inv)
    assert info.value.context_id == "c1"


def test_a_batch_call_in_a_workflow_run_is_unknown_batch() -> None:
    # No batch is handled in a run: honest code can still hold a batch object from elsewhere,
    # so the runtime answers it like a stale batch, without the Host (QC-25), not as a forgery.
    with pytest.raises(Refused) as info:
        call("batch.acknowledge", {"batchId": "b1", "messageId": "m"}, RUN)
    assert info.value.name == "unknown_batch"


def test_queue_handlers_may_call_workflow_bindings() -> None:  # WF-18
    assert call("workflow.create", {"binding": "WF"}, QUEUE) == {"binding": "WF"}


@pytest.mark.parametrize(
    "frame",
    [
        {"kind": "complete"},
        {"kind": "complete", "output": {"a": 1}},
        {"kind": "suspended"},
        {"kind": "errored", "reason": "step_definition_mismatch", "message": "m"},
        {"ok": False, "reason": "cpu_limit", "error": {"name": "Error", "message": "m", "hostError": False}},
    ],
)
def test_workflow_outcomes(frame: dict[str, Any]) -> None:  # WF-30, WF-35, WF-45
    reply = check_reply("invoke_workflow", "c1", {"op": "invoke_result", "contextId": "c1", **frame})
    assert {k: v for k, v in reply.items() if k != "op"} == frame


@pytest.mark.parametrize(
    "frame",
    [
        {"kind": "complete", "output": [1]},
        {"kind": "errored", "reason": "step_limit_exceeded", "message": "a Host reason, never the runtime's"},
        {"kind": "paused"},
    ],
)
def test_bad_workflow_outcomes(frame: dict[str, Any]) -> None:  # WF-22, WF-30
    with pytest.raises(ProtocolError):
        check_reply("invoke_workflow", "c1", {"op": "invoke_result", "contextId": "c1", **frame})
