"""The python runtime: the same ABI in one child process per context (trusted code)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from runtime_testkit import ENV, Host, batch, py, py_queue

from sumi.runtime import HostError, Limits, PyRuntime
from sumi.runtime.types import DEFAULT_LIMITS


@pytest.fixture(scope="module")
async def rt() -> AsyncIterator[PyRuntime]:
    runtime = PyRuntime()
    await runtime.start()
    yield runtime
    await runtime.close()


async def invoke(rt: PyRuntime, body: str, host: Host | None = None, limits: Limits = DEFAULT_LIMITS):
    host = host or Host()
    ctx = await rt.start_context(py(py_queue(body)), "worker.py", limits, host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    return result, host


async def test_settlement_and_send(rt: PyRuntime) -> None:  # QC-25..28
    result, host = await invoke(
        rt,
        """
assert batch.messages[0].body == b"body-1" and batch.queue == "orders"
await batch.acknowledge("m1")
await batch.retry("m2", 30)
await batch.acknowledge_all()
await batch.retryAll(5)
await env.OUT.send("hé", delay_seconds=3)
await env.OUT.send_batch([{"body": b"\\x00"}])
assert env.GREETING == "hello"
""",
    )
    assert result.ok, result
    b = {"batchId": "batch-1"}
    assert host.calls == [
        ("batch.acknowledge", {**b, "messageId": "m1"}),
        ("batch.retry", {**b, "messageId": "m2", "delaySeconds": 30}),
        ("batch.acknowledgeAll", b),
        ("batch.retryAll", {**b, "delaySeconds": 5}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "aMOp", "delaySeconds": 3}]}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "AA=="}]}),
    ]


@pytest.mark.parametrize(
    "call, error",
    [
        ("batch.acknowledge(1)", "TypeError"),
        ("batch.retry('m1', -1)", "ValueError"),
        ("batch.retry('m1', 43201)", "ValueError"),
        ("batch.retry('m1', True)", "TypeError"),
        ("env.OUT.send(5)", "TypeError"),
    ],
)
async def test_bad_arguments_raise_before_any_host_call(rt: PyRuntime, call: str, error: str) -> None:
    result, host = await invoke(rt, f"await {call}")
    assert (result.ok, result.error_name) == (False, error)
    assert host.calls == []


async def test_host_errors(rt: PyRuntime) -> None:  # QC-26, WF-44
    host = Host(fail={"batch.acknowledge": "already_settled"})
    result, _ = await invoke(
        rt,
        """
from sumi.runtime import HostError
try:
    await batch.acknowledge("m1")
except HostError as e:
    assert e.name == "already_settled"
    try:
        e.name = "x"
    except AttributeError:
        pass
    else:
        raise AssertionError("name is writable")
    raise
""",
        host,
    )
    assert (result.reason, result.error_name, result.host_error) == ("threw", "already_settled", True)
    result, _ = await invoke(
        rt,
        """
from sumi.runtime import HostError
try:
    await batch.acknowledge("m1")
except HostError as e:
    raise HostError(e.name, "copied")
""",
        host,
    )
    assert (result.error_name, result.host_error) == ("already_settled", False)


def test_host_error_name_is_read_only() -> None:
    e = HostError("unknown_batch", "gone")
    with pytest.raises(AttributeError):
        e.name = "other"  # type: ignore[misc]
    assert (e.name, e.message) == ("unknown_batch", "gone")


async def test_load_info_and_load_errors(rt: PyRuntime) -> None:  # WF-28
    source = (
        py_queue("pass") + "class ReportWorkflow:\n    async def run(self, event, step): pass\n"
        "class NoRun: pass\n_Hidden = ReportWorkflow\n"
    )
    ctx = await rt.start_context(py(source), "worker.py")
    assert await ctx.load_info() == type(await ctx.load_info())(("queue",), ("ReportWorkflow",))
    await ctx.stop()
    ctx = await rt.start_context(py("def broken(:\n"), "worker.py")
    assert "SyntaxError" in (await ctx.load_info()).load_error
    assert not (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()


async def test_relative_imports_within_the_version(rt: PyRuntime) -> None:
    host = Host()
    source = "from .lib.util import DELAY\n" + py_queue("await batch.retry_all(DELAY)")
    ctx = await rt.start_context(py(source, lib__util="DELAY = 9\n"), "worker.py", host_call=host)
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()
    assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 9})]


async def test_cpu_limit(rt: PyRuntime) -> None:  # QC-32
    result, _ = await invoke(rt, "while True:\n    pass", limits=Limits(cpu_ms=500))
    assert (result.ok, result.reason) == (False, "cpu_limit")
    result, _ = await invoke(rt, "sum(range(10**12))", limits=Limits(cpu_ms=500))  # inside C code
    assert result.reason == "cpu_limit"


async def test_heap_limit(rt: PyRuntime) -> None:  # QC-32
    result, _ = await invoke(rt, "x = []\nwhile True:\n    x.append(bytearray(1 << 20))", limits=Limits(heap_mb=64))
    assert (result.ok, result.reason) == (False, "heap_limit")
    result, _ = await invoke(rt, "await batch.acknowledge_all()")
    assert result.ok


async def test_stop_is_physical(rt: PyRuntime) -> None:  # WF-26, WF-46
    host = Host()
    source = py_queue("""
import asyncio
while True:
    await batch.acknowledge("m1")
    await asyncio.sleep(0.002)
""")
    ctx = await rt.start_context(py(source), "worker.py", host_call=host)
    invocation = asyncio.create_task(ctx.invoke_queue(batch(), ENV))
    await asyncio.wait_for(host.called.wait(), 5)
    await ctx.stop()
    seen = len(host.calls)
    await asyncio.sleep(0.2)
    assert len(host.calls) == seen
    assert (await invocation).reason == "stopped"


async def test_no_state_survives_between_contexts(rt: PyRuntime) -> None:  # WF-32
    host = Host()
    source = "n = 0\n" + py_queue("global n\nn += 1\nawait batch.retry_all(n)")
    for _ in range(2):
        ctx = await rt.start_context(py(source), "worker.py", host_call=host)
        await ctx.invoke_queue(batch(), ENV)
        await ctx.invoke_queue(batch(), ENV)
        await ctx.stop()
    assert [a["delaySeconds"] for _, a in host.calls] == [1, 2, 1, 2]


async def test_print_goes_to_logging(rt: PyRuntime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sumi.runtime.python")
    result, _ = await invoke(rt, "print('hello', batch.id)")
    assert result.ok
    assert any("hello batch-1" in r.getMessage() for r in caplog.records)
