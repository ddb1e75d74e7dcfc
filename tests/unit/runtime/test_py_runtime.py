"""What only the python runtime has; the shared contract is test_contract.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sumi.runtime import EnvSpec, HostError, Limits, PyRuntime, WorkflowInvocation
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


# WF-28: only a class whose instances have a callable run qualifies, judged without running its code.
PY_SHAPES = """
import builtins

def Generator():
    yield
Generator.run = lambda: None

async def AsyncFn():
    pass
AsyncFn.run = lambda: None

Lambda = lambda: None
Lambda.run = lambda: None

class Getter:
    @property
    def run(self):  # the check must not run this
        builtins.getter_ran = True
        return lambda *a: None

class _MetaRun(type):
    def run(cls):
        pass

class OnlyTheMetaclass(metaclass=_MetaRun):
    pass

class _ClaimsToBeAClass:
    __class__ = type  # isinstance(obj, type) would believe this
    def run(self):
        pass

Impostor = _ClaimsToBeAClass()

class NotCallable:
    run = 1

class Own:
    def __init__(self, env):
        pass

    async def run(self, event, step):
        return {"getter_ran": getattr(builtins, "getter_ran", False)}

class Inherits(Own):
    pass

class Static:
    @staticmethod
    async def run(event, step):
        pass
"""


async def test_only_classes_with_a_callable_run_are_workflow_classes(rt: PyRuntime) -> None:  # WF-28
    ctx = await rt.start_context(py(PY_SHAPES), "worker.py")
    info = await ctx.load_info()
    outcome = await ctx.invoke_workflow(WorkflowInvocation("Own", "i-1", None), EnvSpec(), Host())
    await ctx.stop()
    assert info.load_error is None
    assert sorted(info.workflow_classes) == ["Inherits", "Own", "Static"]
    assert (outcome.kind, outcome.output) == ("complete", {"getter_ran": False})


@pytest.mark.parametrize("name", ["Generator", "Getter", "OnlyTheMetaclass", "Impostor"])
async def test_running_what_is_not_a_workflow_class_is_run_threw(rt: PyRuntime, name: str) -> None:  # WF-28, WF-29
    ctx = await rt.start_context(py(PY_SHAPES), "worker.py")
    outcome = await ctx.invoke_workflow(WorkflowInvocation(name, "i-1", None), EnvSpec(), Host())
    await ctx.stop()
    assert (outcome.kind, outcome.reason) == ("errored", "run_threw")
    assert f"no workflow class {name!r}" in (outcome.message or "")


async def test_step_has_the_forms_operations_and_nothing_else(rt: PyRuntime) -> None:  # WF-34
    source = """
class Own:
    def __init__(self, env):
        pass

    async def run(self, event, step):
        return {
            "public": sorted(n for n in dir(step) if not n.startswith("__")),
            "dict": hasattr(step, "__dict__"),
            "behind": sorted(n for n in dir(step.do.__self__) if not n.startswith("__")),
        }
"""
    ctx = await rt.start_context(py(source), "worker.py")
    outcome = await ctx.invoke_workflow(WorkflowInvocation("Own", "i-1", None), EnvSpec(), Host())
    await ctx.stop()
    names = ["do", "sleep", "waitForEvent", "wait_for_event"]
    assert outcome.output == {"public": names, "dict": False, "behind": names}
