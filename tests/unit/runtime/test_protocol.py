"""Issue 10: the Python side checks every frame a runtime child writes, and a bad frame stops the
context it names, never the runtime process or its other contexts."""

from __future__ import annotations

import asyncio
import json

import pytest

from sumi.runtime import JsRuntime, Limits, PyRuntime
from sumi.runtime.rules._protocol import Invocation, ProtocolError, Refused, check_host_call, check_log, check_reply
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, js_runtime, py, py_queue

INV = {1: Invocation("batch-1", frozenset({"OUT"}))}


def call(method: str, args: object, call_id: object = 1) -> dict[str, object]:
    return {"op": "host_call", "contextId": "c1", "callId": call_id, "method": method, "args": args}


@pytest.mark.parametrize(
    "frame",
    [
        call("batch.retry", {"batchId": "batch-1", "messageId": "m1", "delaySeconds": -86400000}),
        call("batch.retry", {"batchId": "batch-1", "messageId": "m1", "delaySeconds": 1.5}),
        call("batch.retry", {"batchId": "batch-1", "messageId": "m1", "delaySeconds": True}),
        call("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 43201}),
        call("batch.acknowledge", {"batchId": "batch-1", "messageId": 7}),
        call("batch.acknowledge", {"batchId": "batch-1", "messageId": "m1", "extra": 1}),
        call("batch.acknowledgeAll", ["batch-1"]),
        call("queue.send", {"binding": "OUT", "messages": [{"body": "not base64!"}]}),
        call("queue.send", {"binding": "OUT", "messages": [{"body": "eA==", "delaySeconds": 1e300}]}),
        call("queue.send", {"binding": "OTHER", "messages": [{"body": "eA=="}]}),  # not a binding of the env
        call("queue.send", {"binding": "OUT", "messages": []}),
        call("queue.send", {"binding": "OUT", "messages": [{"body": "eA==", "to": "x"}]}),
        call("process.exit", {}),
        call("batch.acknowledgeAll", {"batchId": "batch-1"}, call_id="1"),
        call("batch.acknowledgeAll", {"batchId": "batch-1"}, call_id=0),
    ],
)
def test_host_calls_outside_the_abi_are_protocol_errors(frame: dict[str, object]) -> None:  # QC-25
    with pytest.raises(ProtocolError) as e:
        check_host_call(frame, INV, 0)
    assert e.value.context_id == "c1"


def test_a_call_on_another_batch_is_refused_without_the_host() -> None:  # QC-25
    with pytest.raises(Refused) as e:  # honest code can keep an earlier invocation's batch
        check_host_call(call("batch.acknowledge", {"batchId": "another-batch", "messageId": "m1"}), INV, 0)
    assert e.value.name == "unknown_batch"


def test_host_calls_need_a_running_invocation_and_room() -> None:  # WF-46
    frame = call("batch.acknowledgeAll", {"batchId": "batch-1"})
    assert check_host_call(frame, INV, 0).args == {"batchId": "batch-1"}
    with pytest.raises(ProtocolError, match="no invocation"):
        check_host_call(frame, {}, 0)
    with pytest.raises(ProtocolError, match="in flight"):
        check_host_call(frame, INV, 256)


def test_good_host_calls_pass_unchanged() -> None:
    frame = call("queue.send", {"binding": "OUT", "messages": [{"body": "eA==", "delaySeconds": 3}, {"body": ""}]})
    assert check_host_call(frame, INV, 0).args == frame["args"]


@pytest.mark.parametrize(
    "frame",
    [
        {"op": "log", "contextId": "c1", "level": 5, "text": "x"},
        {"op": "log", "contextId": "c1", "level": "info", "text": {"a": 1}},
        {"op": "log", "contextId": "c1", "level": "info", "text": "x" * 20_000},
        {"op": "log", "contextId": "c1", "level": "warn", "text": "x", "dropped": -1},
        {"op": "log", "contextId": "c1", "level": "warn", "text": "x", "dropped": "many"},
    ],
)
def test_bad_log_frames(frame: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        check_log(frame)


@pytest.mark.parametrize(
    "request_op, frame",
    [
        ("stop_context", {"op": "stopped", "contextId": "other"}),  # another context's confirmation
        ("invoke_queue", {"op": "stopped", "contextId": "c1"}),  # not an answer to an invoke
        ("invoke_queue", {"op": "invoke_result", "contextId": "c1", "ok": "yes"}),
        ("invoke_queue", {"op": "invoke_result", "contextId": "c1", "ok": False, "reason": "bored"}),
        (
            "invoke_queue",
            {"op": "invoke_result", "ok": False, "reason": "threw", "error": {"name": "E", "hostError": 1}},
        ),
        ("load_info", {"op": "load_info_result", "handlers": "queue", "workflowClasses": []}),
    ],
)
def test_bad_replies(request_op: str, frame: dict[str, object]) -> None:  # QC-42, WF-44, WF-46
    with pytest.raises(ProtocolError):
        check_reply(request_op, "c1", frame)


# ---- the same, end to end: a bad frame stops its context only ------------------------------------

FORGE_PY = """
import gc
child = next(o for o in gc.get_objects() if type(o).__name__ == "Child")
child.send(FRAME)
import asyncio
await asyncio.sleep(5)
"""


@pytest.mark.parametrize(
    "frame",
    [
        '{"op": "log", "contextId": child.context_id, "level": 5, "text": "x"}',
        '{"op": "host_call", "contextId": child.context_id, "callId": 1, "method": "batch.retry",'
        ' "args": {"batchId": "batch-1", "messageId": "m1", "delaySeconds": -86400000}}',
        '{"op": "host_call", "contextId": child.context_id, "callId": 1, "method": "queue.send",'
        ' "args": {"binding": "OUT", "messages": [{"body": "eA==", "delaySeconds": 1e300}]}}',
        '{"op": "invoke_result", "reqId": 999, "contextId": child.context_id, "ok": True}',
    ],
)
async def test_a_python_worker_forging_frames_is_stopped(frame: str) -> None:
    rt = PyRuntime()
    host = Host()
    try:
        ctx = await rt.start_context(py(py_queue(FORGE_PY.replace("FRAME", frame))), "worker.py", host_call=host)
        result = await asyncio.wait_for(ctx.invoke_queue(batch(), ENV), 4)
    finally:
        await rt.close()
    assert (result.ok, result.reason) == (False, "stopped")  # long before its 5 s sleep ended
    assert host.calls == []


rt = js_runtime("function", test_hooks=True)  # a forged frame must not leak into the next test


async def test_forged_frames_in_the_js_runtime_stop_only_the_named_context(rt: JsRuntime) -> None:
    slow = js(js_queue("await new Promise((r) => setTimeout(r, 1500)); await batch.acknowledgeAll();"))
    victim = await rt.start_context(slow, "worker.js", Limits(cpu_ms=5000), Host())
    other_host = Host()
    other = await rt.start_context(slow, "worker.js", Limits(cpu_ms=5000), other_host)
    v = asyncio.create_task(victim.invoke_queue(batch(), ENV))
    o = asyncio.create_task(other.invoke_queue(batch(batch_id="other"), ENV))
    await asyncio.sleep(0.2)
    pid = rt.pid
    frames = [
        {"op": "invoke_result", "reqId": 424242, "ok": True},  # answers nothing: dropped
        {"op": "stopped", "reqId": 1, "contextId": victim.id},  # answers no stop: dropped
        {"op": "log", "contextId": victim.id, "level": {"x": 1}, "text": "x"},  # stops the victim
    ]
    code = "for (const f of FRAMES) send(f); process.stdout.write(Buffer.from([0, 0, 0, 3, 123, 123, 123]));"
    await rt.debug_eval(code.replace("FRAMES", json.dumps(frames)))  # and 3 bytes that are not JSON
    result = await asyncio.wait_for(v, 5)
    assert (result.ok, result.reason) == (False, "stopped") and "protocol" in (result.error_message or "")
    assert (await asyncio.wait_for(o, 5)).ok  # the bystander ran to its end
    assert other_host.calls == [("batch.acknowledgeAll", {"batchId": "other"})]
    assert rt.pid == pid  # the runtime process lived on
    await other.stop()
