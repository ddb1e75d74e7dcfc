"""The worker runtime contract, once, run against both runtimes (javascript and python).

Each test gives the same worker in both languages and asserts the same outcome; what only one
runtime has (JavaScript's module sandbox, Python's relative imports...) stays in test_js_*.py and
test_py_runtime.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from sumi.runtime import ExecutionContext, InvokeResult, JsRuntime, Limits, LoadInfo, Module, PyRuntime
from sumi.runtime.types import DEFAULT_LIMITS
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, py, py_queue


@dataclass
class Kit:
    kind: str
    rt: Any

    def modules(self, js_source: str, py_source: str) -> tuple[list[Module], str]:
        return (js(js_source), "worker.js") if self.kind == "javascript" else (py(py_source), "worker.py")

    async def start(self, js_body: str, py_body: str, limits: Limits = DEFAULT_LIMITS, host: Any = None):
        """A context whose queue handler runs js_body / py_body."""
        modules, main = self.modules(js_queue(js_body), py_queue(py_body))
        ctx: ExecutionContext = await self.rt.start_context(modules, main, limits, host)
        return ctx

    async def invoke(
        self, js_body: str, py_body: str, host: Host | None = None, limits: Limits = DEFAULT_LIMITS
    ) -> tuple[InvokeResult, Host]:
        host = host or Host()
        ctx = await self.start(js_body, py_body, limits, host)
        result = await ctx.invoke_queue(batch(), ENV)
        await ctx.stop()
        return result, host


@pytest.fixture(scope="module", params=["javascript", "python"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    rt = JsRuntime() if request.param == "javascript" else PyRuntime()
    await rt.start()
    yield Kit(request.param, rt)
    await rt.close()


B = {"batchId": "batch-1"}


async def test_settlement_and_send(kit: Kit) -> None:  # QC-25..28
    result, host = await kit.invoke(
        """
      const body = new TextDecoder().decode(batch.messages[0].body);
      if (body !== 'body-1' || batch.queue !== 'orders') throw new Error('batch');
      if (batch.messages[0].timestamp !== 1700000000001 || batch.messages[0].attempts !== 1) throw new Error('msg');
      await batch.acknowledge('m1'); await batch.retry('m2', 30); await batch.retry('m2');
      await batch.acknowledgeAll(); await batch.retryAll(5); await batch.retryAll();
      await env.OUT.send('hé', {delaySeconds: 3}); await env.OUT.sendBatch([{body: new Uint8Array([0])}]);
      if (env.GREETING !== 'hello') throw new Error('vars');
    """,
        """
assert batch.messages[0].body == b"body-1" and batch.queue == "orders"
assert batch.messages[0].timestamp == 1700000000001 and batch.messages[0].attempts == 1
await batch.acknowledge("m1"); await batch.retry("m2", 30); await batch.retry("m2")
await batch.acknowledge_all(); await batch.retry_all(5); await batch.retryAll()
await env.OUT.send("hé", delay_seconds=3); await env.OUT.send_batch([{"body": b"\\x00"}])
assert env.GREETING == "hello"
""",
    )
    assert result.ok, result
    assert host.calls == [
        ("batch.acknowledge", {**B, "messageId": "m1"}),
        ("batch.retry", {**B, "messageId": "m2", "delaySeconds": 30}),
        ("batch.retry", {**B, "messageId": "m2"}),
        ("batch.acknowledgeAll", B),
        ("batch.retryAll", {**B, "delaySeconds": 5}),
        ("batch.retryAll", B),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "aMOp", "delaySeconds": 3}]}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "AA=="}]}),
    ]


@pytest.mark.parametrize(
    "js_call, py_call, js_error, py_error",
    [
        ("batch.acknowledge(1)", "batch.acknowledge(1)", "TypeError", "TypeError"),
        ("batch.retry('m1', -1)", "batch.retry('m1', -1)", "RangeError", "ValueError"),
        ("batch.retry('m1', 43201)", "batch.retry('m1', 43201)", "RangeError", "ValueError"),
        ("batch.retry('m1', 1.5)", "batch.retry('m1', 1.5)", "RangeError", "TypeError"),
        ("batch.retry('m1', '5')", "batch.retry('m1', '5')", "TypeError", "TypeError"),
        ("batch.retryAll(true)", "batch.retry_all(True)", "TypeError", "TypeError"),
        ("env.OUT.send(5)", "env.OUT.send(5)", "TypeError", "TypeError"),
        ("env.OUT.sendBatch([])", "env.OUT.send_batch([])", "TypeError", "TypeError"),
    ],
)
async def test_bad_arguments_throw_before_any_host_call(
    kit: Kit, js_call: str, py_call: str, js_error: str, py_error: str
) -> None:  # QC-25
    result, host = await kit.invoke(f"await {js_call};", f"await {py_call}")
    assert (result.ok, result.error_name) == (False, js_error if kit.kind == "javascript" else py_error)
    assert host.calls == []


async def test_host_errors_are_named_and_marked(kit: Kit) -> None:  # QC-26, WF-44
    host = Host(fail={"batch.acknowledge": "already_settled", "batch.retry": "unknown_message"})
    result, _ = await kit.invoke(
        """
      try { await batch.acknowledge('m1'); } catch (e) {
        if (e.name !== 'already_settled') throw new Error('name');
        try { e.name = 'other'; } catch {}
        throw e;  // the same object keeps its provenance
      }""",
        """
from sumi.runtime import HostError
try:
    await batch.acknowledge("m1")
except HostError as e:
    assert e.name == "already_settled"
    try:
        e.name = "other"
    except AttributeError:
        pass
    raise""",
        host,
    )
    assert (result.reason, result.error_name, result.host_error) == ("threw", "already_settled", True)
    result, _ = await kit.invoke(
        """
      try { await batch.retry('m9'); } catch (e) {
        const copy = new Error(e.message); Object.defineProperty(copy, 'name', { value: e.name }); throw copy;
      }""",
        """
from sumi.runtime import HostError
try:
    await batch.retry("m9")
except HostError as e:
    raise HostError(e.name, "copied")""",
        host,
    )
    assert (result.error_name, result.host_error) == ("unknown_message", False)


async def test_load_info_and_load_errors(kit: Kit) -> None:  # WF-28
    modules, main = kit.modules(
        js_queue("") + "export class ReportWorkflow { async run(event, step) {} }\nexport class NoRun {}\n",
        py_queue("pass") + "class ReportWorkflow:\n    async def run(self, event, step): pass\nclass NoRun: pass\n",
    )
    ctx = await kit.rt.start_context(modules, main)
    assert await ctx.load_info() == LoadInfo(("queue",), ("ReportWorkflow",))
    await ctx.stop()
    modules, main = kit.modules("export default { queue( };", "def broken(:\n")
    ctx = await kit.rt.start_context(modules, main)
    assert "SyntaxError" in ((await ctx.load_info()).load_error or "")
    assert not (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()


async def test_cpu_limit(kit: Kit) -> None:  # QC-32
    result, _ = await kit.invoke("for (;;) {}", "while True:\n    pass", limits=Limits(cpu_ms=500))
    assert (result.ok, result.reason) == (False, "cpu_limit")


async def test_heap_limit(kit: Kit) -> None:  # QC-32
    result, _ = await kit.invoke(
        "const a = []; for (;;) a.push({i: a.length, s: 'x' + a.length});",
        "x = []\nwhile True:\n    x.append(bytearray(1 << 20))",
        limits=Limits(cpu_ms=20_000, heap_mb=64),
    )
    assert (result.ok, result.reason) == (False, "heap_limit")
    result, _ = await kit.invoke("await batch.acknowledgeAll();", "await batch.acknowledge_all()")
    assert result.ok  # the runtime serves on


async def test_wall_limit(kit: Kit) -> None:
    result, _ = await kit.invoke(
        "await new Promise(() => {});", "import asyncio\nawait asyncio.Event().wait()", limits=Limits(wall_ms=300)
    )
    assert (result.ok, result.reason) == (False, "wall_limit")


async def test_stop_is_physical(kit: Kit) -> None:  # WF-26, WF-46
    host = Host()
    ctx = await kit.start(
        "for (;;) { await batch.acknowledge('m1'); await new Promise((r) => setTimeout(r, 2)); }",
        "import asyncio\nwhile True:\n    await batch.acknowledge('m1')\n    await asyncio.sleep(0.002)",
        host=host,
    )
    invocation = asyncio.create_task(ctx.invoke_queue(batch(), ENV))
    await asyncio.wait_for(host.called.wait(), 5)
    await ctx.stop()
    seen = len(host.calls)
    await asyncio.sleep(0.3)
    assert len(host.calls) == seen  # no host call arrives after the stop was confirmed
    assert (await invocation).reason == "stopped"
    assert (await ctx.invoke_queue(batch(), ENV)).reason == "stopped"


async def test_no_state_survives_between_contexts(kit: Kit) -> None:  # WF-32
    host = Host()
    modules, main = kit.modules(
        "let n = 0;\n" + js_queue("n += 1; await batch.retryAll(n);"),
        "n = 0\n" + py_queue("global n\nn += 1\nawait batch.retry_all(n)"),
    )
    for _ in range(2):
        ctx = await kit.rt.start_context(modules, main, host_call=host)
        assert (await ctx.invoke_queue(batch(), ENV)).ok
        assert (await ctx.invoke_queue(batch(), ENV)).ok  # one warm context serves batch after batch
        await ctx.stop()
    assert [a["delaySeconds"] for _, a in host.calls] == [1, 2, 1, 2]


async def test_logs_go_to_logging(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sumi.runtime")
    result, _ = await kit.invoke("console.log('hello from', batch.id);", "print('hello from', batch.id)")
    assert result.ok
    assert any("hello from batch-1" in r.getMessage() for r in caplog.records)


# ---- issue 10: the same bounds in both runtimes ------------------------------------------------


async def test_huge_logs_and_error_texts_are_truncated(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sumi.runtime")
    result, _ = await kit.invoke(
        "console.log('\\x01'.repeat(11 << 20)); const e = new Error('m'.repeat(11 << 20)); throw e;",
        "print('\\x01' * (11 << 20), end='')\nraise ValueError('m' * (11 << 20))",
        limits=Limits(cpu_ms=10_000, heap_mb=256),
    )
    assert result.reason == "threw" and len(result.error_message or "") < 3000
    lines = [r.getMessage() for r in caplog.records if "\x01" in r.getMessage()]
    assert lines and all(len(line) < 20_000 for line in lines)


async def test_host_calls_in_flight_are_bounded(kit: Kit) -> None:
    in_flight = peak = 0

    async def host(context_id: str, method: str, args: dict[str, Any]) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002)
        in_flight -= 1

    result, _ = await kit.invoke(
        "await Promise.all(Array.from({length: 2000}, () => batch.acknowledge('m1')));",
        "import asyncio\nawait asyncio.gather(*(batch.acknowledge('m1') for _ in range(2000)))",
        host,  # type: ignore[arg-type]
        Limits(cpu_ms=20_000),
    )
    assert result.ok, result  # all 2000 served, never more than the cap at once
    assert 1 < peak <= 256


async def test_work_left_running_ends_with_the_handler(kit: Kit) -> None:  # WF-46
    host = Host()
    ctx = await kit.start(
        """
      const tick = () => { env.OUT.send('tick').catch(() => {}); setTimeout(tick, 5); };
      tick(); await new Promise((r) => setTimeout(r, 30));""",
        """
import asyncio
async def tick():
    while True:
        await env.OUT.send("tick")
        await asyncio.sleep(0.005)
globals()["keep"] = asyncio.ensure_future(tick())
await asyncio.sleep(0.03)""",
        host=host,
    )
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    seen = len(host.calls)
    await asyncio.sleep(0.3)  # the context sits in the warm pool
    assert len(host.calls) == seen
    assert (await ctx.invoke_queue(batch(), ENV)).ok  # and serves the next batch
    await ctx.stop()


async def test_a_batch_kept_from_an_earlier_invocation_is_refused(kit: Kit) -> None:  # QC-25
    host = Host()
    modules, main = kit.modules(
        "let old = null;\n"
        + js_queue("""
      if (old) {
        try { await old.acknowledge('m1'); } catch (e) { await batch.retryAll(e.name === 'unknown_batch' ? 1 : 2); }
      }
      old = batch;"""),
        "old = None\n"
        + py_queue("""
global old
if old is not None:
    try:
        await old.acknowledge("m1")
    except Exception as e:
        await batch.retry_all(1 if getattr(e, "name", "") == "unknown_batch" else 2)
old = batch"""),
    )
    ctx = await kit.rt.start_context(modules, main, host_call=host)
    assert (await ctx.invoke_queue(batch(batch_id="b1"), ENV)).ok
    assert (await ctx.invoke_queue(batch(batch_id="b2"), ENV)).ok
    await ctx.stop()
    assert host.calls == [("batch.retryAll", {"batchId": "b2", "delaySeconds": 1})]  # the Host never saw b1's
