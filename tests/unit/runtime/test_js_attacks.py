"""Issue 10, tried as an editor of a Space would: each attack on the JavaScript runtime is held.

The first four are the red team's reproducers (shared/security/redteam_repro_examples.py),
turned around: each passed while its hole was open and asserts here that the attack fails.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sumi.runtime import InvokeResult, JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, js_runtime


def handler(body: str) -> str:
    """A queue handler in which `sentinel()` records (as a host call) that worker code reached the host realm."""
    return js_queue("globalThis.sentinel = () => batch.retryAll(7);\n" + body)


rt = js_runtime("function")  # each attack meets a runtime no earlier attack touched


FIVE_SECONDS = Limits(cpu_ms=5000)


async def run(rt: JsRuntime, modules, host: Host | None = None, limits: Limits = FIVE_SECONDS):
    host = host or Host()
    ctx = await rt.start_context(modules, "worker.js", limits, host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    return result, host


async def bystander(rt: JsRuntime, seconds: float = 1.5) -> tuple[asyncio.Task[InvokeResult], Host]:
    """A context of another Space, mid-invocation while the attack runs."""
    host = Host()
    source = js_queue(f"await new Promise((r) => setTimeout(r, {int(seconds * 1000)})); await batch.acknowledgeAll();")
    ctx = await rt.start_context(js(source), "worker.js", Limits(cpu_ms=5000), host)
    task = asyncio.create_task(ctx.invoke_queue(batch(batch_id="other"), ENV))
    await asyncio.sleep(0.1)
    return task, host


async def unaffected(task: asyncio.Task[InvokeResult], host: Host) -> None:
    result = await asyncio.wait_for(task, 10)
    assert result.ok, result
    assert host.calls == [("batch.acknowledgeAll", {"batchId": "other"})]


# ---- 1. module loader races and retries ------------------------------------------------------


async def test_concurrent_dynamic_import_gets_one_evaluated_module(rt: JsRuntime) -> None:  # WF-32
    src = handler("""
      const first = import('./lib.js');
      let second;
      try { second = await import('./lib.js'); } catch (e) {
        if (e.constructor.constructor !== Function) await sentinel();  // a host-realm error
        throw e;
      }
      const a = await first;
      if (a !== second || a.x !== 1) throw new Error('not one evaluated module');
    """)
    result, host = await run(rt, js(src, lib="export const x = 1;"))
    assert result.ok, result
    assert host.calls == []


async def test_concurrent_import_of_a_module_with_top_level_await(rt: JsRuntime) -> None:
    src = handler("""
      const all = await Promise.allSettled([import('./slow.js'), import('./slow.js'), import('./slow.js')]);
      for (const r of all) {
        if (r.status !== 'fulfilled') {
          if (r.reason.constructor.constructor !== Function) await sentinel();
          throw r.reason;
        }
        if (r.value.done !== true) throw new Error('namespace of a module not yet evaluated');
      }
    """)
    slow = "await new Promise((r) => setTimeout(r, 50)); export const done = true;"
    result, host = await run(rt, js(src, slow=slow))
    assert result.ok, result
    assert host.calls == []


@pytest.mark.parametrize(
    "bad",
    [
        "import fs from 'node:fs';",  # fails to link
        "export const y = 1; throw new Error('at evaluation');",  # fails to evaluate
        "import { nope } from './lib.js';",  # links to a missing export
    ],
)
async def test_reimport_of_a_module_that_failed_gives_sandbox_errors(rt: JsRuntime, bad: str) -> None:
    src = handler("""
      const errors = [];
      for (let i = 0; i < 3; i++) { try { await import('./bad.js'); } catch (e) { errors.push(e); } }
      if (errors.length !== 3) throw new Error('an import of a failed module succeeded');
      for (const e of errors) if (!(e instanceof TypeError) || e.constructor.constructor !== Function) await sentinel();
    """)
    result, host = await run(rt, js(src, bad=bad, lib="export const x = 1;"))
    assert result.ok, result
    assert host.calls == []


# ---- 2. nothing worker code throws is formatted by host-realm code ---------------------------

EVIL = """
  const inspect = Symbol.for('nodejs.util.inspect.custom');
  const evil = () => {
    const o = {
      get message() { return probe(this); }, get name() { return probe(this); }, get stack() { return probe(this); },
    };
    o[inspect] = function (depth, options, insp) { for (const a of [options, insp]) probe(a); return 'x'; };
    o.toString = function () { return probe(this); };
    return o;
  };
  // Reached from host-realm code, an argument or a receiver is a host object:
  // its constructor chain is the host's Function.
  const probe = (x) => {
    try {
      if ((x && typeof x === 'object' && x.constructor && x.constructor.constructor !== Function)
          || (typeof x === 'function' && x.constructor !== Function)) {
        globalThis.sentinel?.();
        return 'escaped';
      }
    } catch {}
    return 'evil';
  };
"""


async def test_throws_that_reach_the_worker_thread_top_level_hand_out_nothing(rt: JsRuntime) -> None:
    task, other = await bystander(rt)
    src = EVIL + handler("""
      setTimeout(() => { throw evil(); }, 1);                       // a timer
      Promise.reject(evil());                                       // nobody handles it
      new Promise((_, reject) => setTimeout(() => reject(evil()), 2));
      const registry = new FinalizationRegistry(() => { throw evil(); });  // a finalizer
      for (let i = 0; i < 2000; i++) registry.register({ big: new Array(1000).fill(i) }, i);
      for (let i = 0; i < 200; i++) new Array(100000).fill(i);      // pressure for a GC
      ctx.waitUntil(Promise.reject(evil()));                        // the runtime's own catch block logs it
      await new Promise((r) => setTimeout(r, 200));
      throw evil();                                                 // and the result describes it
    """)
    result, host = await run(rt, js(src))
    assert host.calls == []
    assert not result.ok and result.reason == "threw" and result.error_message == "evil"
    await unaffected(task, other)


async def test_a_failing_module_load_is_described_without_host_realm_code(rt: JsRuntime) -> None:
    src = EVIL + "throw evil();"
    ctx = await rt.start_context(js(src), "worker.js", Limits(cpu_ms=5000))
    info = await ctx.load_info()
    await ctx.stop()
    assert info.load_error == "evil: evil"


# ---- 3. frames cannot be forged ----------------------------------------------------------------


async def test_to_json_cannot_forge_another_contexts_result(rt: JsRuntime) -> None:  # QC-42, WF-46
    victim = await rt.start_context(
        js(js_queue("await new Promise((r) => setTimeout(r, 1000)); throw new Error('x');")), "worker.js"
    )
    attacker = await rt.start_context(
        js(
            js_queue("""
      const forge = function () { return [this[0], { reqId: 3, ok: true, op: 'invoke_result', contextId: 'x' }]; };
      Object.prototype.toJSON = forge; Array.prototype.toJSON = forge;
      console.log('forging');
      await batch.acknowledgeAll().catch(() => {});""")
        ),
        "worker.js",
    )
    v = asyncio.create_task(victim.invoke_queue(batch(), ENV))
    await asyncio.sleep(0.2)
    a = await asyncio.wait_for(attacker.invoke_queue(batch(), ENV, Host()), 5)
    assert a.ok, a
    assert not v.done()  # not answered by the attacker
    result = await asyncio.wait_for(v, 5)
    assert (result.ok, result.error_message) == (False, "x")  # the victim's own result, after its second
    await victim.stop()
    await attacker.stop()


async def test_result_fields_cannot_override_the_reply(rt: JsRuntime) -> None:  # WF-44
    # The handler's error object names fields of the reply frame; they stay inside `error`.
    src = js_queue("""
      const e = new Error('mine'); e.reqId = 1; e.op = 'stopped'; e.contextId = 'other'; e.hostError = true;
      throw e;""")
    result, _ = await run(rt, js(src))
    assert (result.ok, result.reason, result.error_message, result.host_error) == (False, "threw", "mine", False)


async def test_patched_prototypes_cannot_change_checked_arguments(rt: JsRuntime) -> None:  # QC-25
    src = js_queue("""
      Object.defineProperty(Object.prototype, 'delaySeconds', { set(v) {
        Object.defineProperty(this, 'delaySeconds', { value: -86400000, enumerable: true }); }, configurable: true });
      Object.defineProperty(Object.prototype, 'messageId', { set(v) {
        Object.defineProperty(this, 'messageId', { value: 'm2', enumerable: true }); }, configurable: true });
      Array.prototype.map = function () { return [{ body: 'not base64!', delaySeconds: 1e300 }]; };
      Number.isInteger = () => true;
      await batch.retry('m1', 5);
      await env.OUT.sendBatch([{ body: 'x', delaySeconds: 3 }]);
      await env.OUT.send('y', { delaySeconds: 4 });
    """)
    result, host = await run(rt, js(src))
    assert result.ok, result
    assert host.calls == [
        ("batch.retry", {"batchId": "batch-1", "messageId": "m1", "delaySeconds": 5}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "eA==", "delaySeconds": 3}]}),
        ("queue.send", {"binding": "OUT", "messages": [{"body": "eQ==", "delaySeconds": 4}]}),
    ]


# ---- bounds ----------------------------------------------------------------------------------


async def test_huge_log_lines_and_error_texts_are_truncated(rt: JsRuntime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sumi.runtime.js")
    task, other = await bystander(rt)
    src = js_queue("""
      console.log('\\x01'.repeat(11 * 1024 * 1024));
      const e = new Error('m'.repeat(11 * 1024 * 1024)); e.name = 'N'.repeat(11 * 1024 * 1024);
      throw e;""")
    result, _ = await run(rt, js(src), limits=Limits(cpu_ms=10_000, heap_mb=256))
    assert result.reason == "threw"
    assert len(result.error_name) < 300 and len(result.error_message) < 3000
    lines = [r.getMessage() for r in caplog.records if "\x01" in r.getMessage()]
    assert lines and all(len(line) < 20_000 for line in lines)
    await unaffected(task, other)


async def test_logging_in_a_loop_does_not_grow_the_runtime(rt: JsRuntime) -> None:
    src = js_queue("const mib = 'x'.repeat(1 << 20); for (let i = 0; i < 300; i++) console.log(mib);")
    result, _ = await run(rt, js(src))
    assert result.ok
    rss_kib = int(
        next(x for x in Path(f"/proc/{rt.pid}/status").read_text().splitlines() if x.startswith("VmRSS")).split()[1]
    )
    assert rss_kib < 300 * 1024  # 441 MiB before the cap


@pytest.mark.parametrize(
    "alloc",
    [
        "for (let i = 0; i < 4; i++) keep.push(new ArrayBuffer(256 << 20));",
        "keep.push(new SharedArrayBuffer(1 << 30));",
        "for (let i = 0; i < 64; i++) keep.push(new Uint8Array(8 << 20));",
        "const b = new Uint8Array(16 << 20); for (let i = 0; i < 8; i++) keep.push(b.slice());",
        "const b = new Uint8Array(16 << 20); b.constructor = undefined;"
        "for (let i = 0; i < 8; i++) keep.push(b.map((x) => x));",
        "const b = new ArrayBuffer(1, { maxByteLength: 1 << 30 }); b.resize(1 << 30); keep.push(b);",
        "class Big extends Float64Array {}; for (let i = 0; i < 8; i++) keep.push(new Big(4 << 20));",
    ],
)
async def test_array_buffer_memory_counts_against_the_limit(rt: JsRuntime, alloc: str) -> None:  # QC-32
    src = js_queue(f"""
      const keep = [];
      try {{ {alloc} }} catch (e) {{
        if (!(e instanceof RangeError)) throw e;
        await batch.acknowledgeAll();  // refused in the worker, as a RangeError of its own realm
      }}""")
    result, host = await run(rt, js(src), limits=Limits(cpu_ms=10_000, heap_mb=32))
    assert result.ok, result
    assert host.methods() == ["batch.acknowledgeAll"]


async def test_buffers_within_the_limit_work(rt: JsRuntime) -> None:
    src = js_queue("""
      const a = new Uint8Array(4 << 20).fill(7); const b = a.slice(1, 3); const c = new DataView(a.buffer);
      const d = structuredClone(new Uint16Array([1, 2])); const e = Uint8Array.from([1, 2, 3]);
      if (b[0] !== 7 || c.getUint8(0) !== 7 || d[1] !== 2 || e.length !== 3) throw new Error('broken');
      if (!(a instanceof Uint8Array) || a.constructor !== Uint8Array) throw new Error('identity');
      if (!(a.buffer instanceof ArrayBuffer)) throw new Error('buffer identity');
    """)
    result, _ = await run(rt, js(src), limits=Limits(heap_mb=32))
    assert result.ok, result


async def test_host_calls_in_flight_are_capped(rt: JsRuntime) -> None:
    task, other = await bystander(rt, 3)
    src = js_queue("""
      let refused = 0;
      for (let i = 0; i < 50000; i++) {
        try { batch.acknowledge('m1').catch(() => {}); } catch (e) { if (e instanceof RangeError) refused++; }
      }
      if (refused !== 50000 - 10000 - 256) throw new Error('refused ' + refused);
    """)

    in_flight = peak = 0

    async def host(context_id: str, method: str, args: dict) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1

    result, _ = await run(rt, js(src), host, Limits(cpu_ms=20_000))  # type: ignore[arg-type]
    assert result.ok, result
    assert peak <= 256
    await unaffected(task, other)


async def test_timers_and_calls_end_with_the_handler(rt: JsRuntime) -> None:  # WF-46
    src = js_queue("""
      const tick = () => { env.OUT.send('tick').catch(() => {}); setTimeout(tick, 5); };
      tick();
      await new Promise((r) => setTimeout(r, 30));
    """)
    host = Host()
    ctx = await rt.start_context(js(src), "worker.js", Limits(cpu_ms=5000), host)
    result = await ctx.invoke_queue(batch(), ENV)
    assert result.ok
    seen = len(host.calls)
    await asyncio.sleep(0.3)  # the context sits in the warm pool
    assert len(host.calls) == seen
    assert (await ctx.invoke_queue(batch(), ENV)).ok  # and serves the next batch
    await ctx.stop()


async def test_a_handler_that_never_settles_has_a_default_wall_limit() -> None:
    assert Limits().wall_ms == 900_000
