"""What only the python runtime has; the shared contract is test_contract.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sumi.runtime import HostError, Limits, PyRuntime
from sumi.runtime.types import DEFAULT_LIMITS
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, py, py_queue


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


def test_host_error_name_is_read_only() -> None:
    e = HostError("unknown_batch", "gone")
    with pytest.raises(AttributeError):
        e.name = "other"  # type: ignore[misc]
    assert (e.name, e.message) == ("unknown_batch", "gone")


async def test_relative_imports_within_the_version(rt: PyRuntime) -> None:
    host = Host()
    source = "from .lib.util import DELAY\n" + py_queue("await batch.retry_all(DELAY)")
    ctx = await rt.start_context(py(source, lib__util="DELAY = 9\n"), "worker.py", host_call=host)
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()
    assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 9})]


async def test_cpu_limit_inside_c_code(rt: PyRuntime) -> None:  # QC-32
    result, _ = await invoke(rt, "sum(range(10**12))", limits=Limits(cpu_ms=500))
    assert result.reason == "cpu_limit"
