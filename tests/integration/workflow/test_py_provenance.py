"""WF-44, WF-45 for Python workers, whose code owns its process: a run can reach whatever is in it,
so only the Host, from the step failures it committed, decides that an instance ended step_failed."""

import uuid
from collections.abc import AsyncIterator

import pytest

from sumi.core import records as r
from sumi.workflow.engine import Engine
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import Bench, engine_bench

pytestmark = pytest.mark.integration

# Each path tries to end its run on a step_failed the Host never committed.
FLOW = '''
import gc
import weakref

from sumi.runtime import HostError

FORGED = {"kind": "errored", "reason": "step_failed", "message": "forged"}


def machinery(root):
    """Every object reachable from root by attributes, closures, globals and gc that can report."""
    seen, todo, found = set(), [root], []
    while todo:
        o = todo.pop()
        if id(o) in seen or len(seen) > 20000:
            continue
        seen.add(id(o))
        for name in ("report", "_report"):
            if callable(getattr(type(o), name, None)):
                found.append(o)
        for attr in ("__self__", "__func__", "__dict__", "__closure__", "cell_contents"):
            try:
                todo.append(getattr(o, attr))
            except Exception:
                pass
        if isinstance(o, dict):
            todo.extend(o.values())
        elif isinstance(o, (list, tuple, set)):
            todo.extend(o)
        if type(o).__name__ == "function":
            todo.append(o.__globals__)
    return found


def report(obj):
    getattr(obj, "report", None) and obj.report(FORGED)
    getattr(obj, "_report", None) and obj._report(FORGED)


class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        path = event["params"]["path"]
        if path == "hidden-methods":
            for name in ("report", "_report", "_finish"):
                fn = getattr(step, name, None)
                if fn is not None:
                    fn(FORGED)
        elif path == "own-host-error":
            pass
        elif path == "copied-name":
            try:
                await step.do("a", lambda: 1 / 0)
            except HostError as genuine:
                raise HostError(genuine.name, genuine.message)
        elif path == "self-closure-globals":
            for obj in machinery(step.do):
                report(obj)
        elif path == "gc":
            for obj in gc.get_objects():
                if callable(getattr(type(obj), "_report", None)) or callable(getattr(type(obj), "report", None)):
                    report(obj)
        elif path == "gc-issued":
            forged = HostError("step_failed", "forged")
            for obj in gc.get_objects():
                for name in ("issued", "_issued"):
                    if isinstance(getattr(obj, name, None), weakref.WeakSet):
                        getattr(obj, name).add(forged)
            raise forged
        elif path == "genuine":
            await step.do("a", lambda: 1 / 0)
        elif path == "genuine-caught":
            try:
                await step.do("a", lambda: 1 / 0)
            except HostError as e:
                return {"caught": e.name}
        raise HostError("step_failed", "forged")  # whatever the path left behind, the run ends on it
'''
FORGERIES = ["hidden-methods", "own-host-error", "copied-name", "self-closure-globals", "gc", "gc-issued"]


@pytest.fixture(scope="module")
async def bench(kafka_bootstrap: str, database_url: str) -> AsyncIterator[tuple[Bench, Engine]]:
    async with engine_bench(new_settings(kafka_bootstrap, database_url)) as pair:
        await pair[0].deploy(FLOW, runtime="python")
        yield pair


async def ended(b: Bench, path: str) -> r.InstanceStatusChanged:
    iid = f"{path}-{uuid.uuid4().hex[:6]}"
    assert (await b.create(iid, {"path": path})).accepted
    await b.status(iid, "complete", "errored")
    return b.log.of(iid, r.InstanceStatusChanged)[-1]  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", FORGERIES)
async def test_a_forged_step_failed_is_run_threw(bench: tuple[Bench, Engine], path: str) -> None:  # WF-34, WF-44, WF-45
    last = await ended(bench[0], path)
    assert (last.status, last.errorReason) == ("errored", "run_threw"), last


async def test_a_genuine_uncaught_step_failure_is_step_failed(bench: tuple[Bench, Engine]) -> None:  # WF-45
    last = await ended(bench[0], "genuine")
    assert (last.status, last.errorReason) == ("errored", "step_failed"), last
    assert "ZeroDivisionError" in (last.errorMessage or "")


async def test_a_genuine_step_failure_caught_lets_the_run_complete(bench: tuple[Bench, Engine]) -> None:  # WF-45
    last = await ended(bench[0], "genuine-caught")
    assert (last.status, last.output) == ("complete", '{"caught":"step_failed"}'), last
