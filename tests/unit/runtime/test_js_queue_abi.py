"""What only the JavaScript queue handler ABI has (the shared contract is test_contract.py)."""

from __future__ import annotations

import pytest

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue


async def invoke(rt: JsRuntime, body: str, host: Host | None = None):
    host = host or Host()
    ctx = await rt.start_context(js(js_queue(body)), "worker.js", Limits(cpu_ms=2000), host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    return result, host


async def test_settlement_methods_are_bound_and_resolve_undefined(rt: JsRuntime) -> None:  # QC-25..28
    result, host = await invoke(
        rt,
        """
      for (const m of batch.messages) if (!(m.body instanceof Uint8Array)) throw new Error('body');
      if ((await batch.acknowledge('m1')) !== undefined) throw new Error('resolves undefined');
      await batch.retryAll(43200);
      const { acknowledge } = batch; await acknowledge('m1');  // bound to the batch
      await env.OUT.send(new Uint8Array([0, 255]));
      await env.OUT.sendBatch([{body: new Uint8Array([1]).buffer}, {body: 'x', delaySeconds: 0}]);
    """,
    )
    assert result.ok, result
    b = {"batchId": "batch-1"}
    assert host.calls == [
        ("batch.acknowledge", {**b, "messageId": "m1"}),
        ("batch.retryAll", {**b, "delaySeconds": 43200}),
        ("batch.acknowledge", {**b, "messageId": "m1"}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "AP8="}]}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "AQ=="}, {"body": "eA==", "delaySeconds": 0}]}),
    ]


@pytest.mark.parametrize(
    "call, error",
    [
        ("batch.acknowledge()", "TypeError"),
        ("batch.retryAll(NaN)", "RangeError"),
        ("env.OUT.send('x', {delay: 1})", "TypeError"),
        ("env.OUT.send('x', {delaySeconds: 99999})", "RangeError"),
    ],
)
async def test_bad_arguments_throw_synchronously(rt: JsRuntime, call: str, error: str) -> None:  # QC-25
    result, host = await invoke(
        rt,
        f"""
      try {{ {call}; }} catch (e) {{ throw new Error('sync:' + e.name); }}
    """,
    )
    assert (result.ok, result.error_message) == (False, f"sync:{error}")
    assert host.calls == []


async def test_host_error_name_is_a_read_only_hidden_property(rt: JsRuntime) -> None:  # QC-25, WF-44
    host = Host(fail={"batch.acknowledge": "already_settled"})
    result, _ = await invoke(
        rt,
        """
      let e;
      try { await batch.acknowledge('m1'); } catch (x) { e = x; }
      const d = Object.getOwnPropertyDescriptor(e, 'name');
      if (!(e instanceof Error)) throw new Error('not an Error');
      if (d.writable || d.enumerable || d.configurable) throw new Error('descriptor');
      if (Object.keys(e).includes('name')) throw new Error('enumerable');
    """,
        host,
    )
    assert result.ok, result


async def test_handler_throw_and_rejection_are_reported(rt: JsRuntime) -> None:  # QC-32
    result, _ = await invoke(rt, "throw new RangeError('boom');")
    assert (result.ok, result.reason, result.error_name, result.error_message) == (False, "threw", "RangeError", "boom")
    result, _ = await invoke(rt, "throw 'a string';")
    assert result.reason == "threw" and "a string" in result.error_message


async def test_wait_until_runs_before_the_result(rt: JsRuntime) -> None:
    result, host = await invoke(
        rt,
        """
      ctx.waitUntil(new Promise((r) => setTimeout(r, 20)).then(() => batch.retryAll()));
    """,
    )
    assert result.ok and host.methods() == ["batch.retryAll"]


async def test_load_info(rt: JsRuntime) -> None:  # WF-28
    source = """
      export default { async queue() {}, other() {}, notAFunction: 1 };
      export class ReportWorkflow { async run(event, step) {} }
      export class NoRun {}
      export function plainFunction() {}
      export const arrow = () => {};
      export const notAClass = { run() {} };
      export class StaticRun { static run() {} }
      export function OldStyle() {}
      OldStyle.prototype.run = function () {};
    """
    ctx = await rt.start_context(js(source), "worker.js")
    info = await ctx.load_info()
    await ctx.stop()
    assert info.load_error is None
    assert info.handlers == ("queue", "other")
    assert sorted(info.workflow_classes) == ["OldStyle", "ReportWorkflow"]


@pytest.mark.parametrize(
    "source, needle",
    [
        ("export default { queue( };", "SyntaxError"),
        ("throw new Error('at load');", "at load"),
        ("import { nope } from './lib.js';", "nope"),
    ],
)
async def test_broken_module_is_a_load_error(rt: JsRuntime, source: str, needle: str) -> None:
    ctx = await rt.start_context(js(source, lib="export const yes = 1;"), "worker.js")
    info = await ctx.load_info()
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    assert needle in info.load_error and info.handlers == ()
    assert not result.ok


async def test_console_formats_values_and_levels(rt: JsRuntime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sumi.runtime.js")
    result, _ = await invoke(rt, "console.log('hello from', batch.id, {a: 1}); console.error('bad');")
    assert result.ok
    records = [r for r in caplog.records if r.name == "sumi.runtime.js"]
    assert any("hello from batch-1 { a: 1 }" in r.getMessage() for r in records)
    assert any(r.levelname == "ERROR" and "bad" in r.getMessage() for r in records)
    assert all(getattr(r, "context_id", None) for r in records)
