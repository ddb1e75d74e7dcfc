"""Issue 21, classes 1 and 2: a JavaScript context holds no more memory than its limit, whatever
path allocates it (forms.md: "128 MiB memory ... per context"; QC-32).

Each worker below tries to hold twice its limit in ArrayBuffer backing stores, which live
outside the V8 heap, catching every refusal, then reports how much it holds. The limit holds if
the context is stopped for it (heap_limit) or holds no more than the limit.
"""

from __future__ import annotations

import pytest

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue

LIMIT_MB = 32
TRY_MB = 2 * LIMIT_MB


def hoarder(allocate_mib: str) -> str:
    """A worker that calls ``allocate_mib()`` (one MiB or more each time) until it holds TRY_MB."""
    return js_queue(f"""
      const held = [];
      let bytes = 0;
      const allocate = () => {{ {allocate_mib} }};
      while (bytes < {TRY_MB} * 1048576) {{
        let got;
        try {{ got = allocate(); }} catch (e) {{ break; }}
        held.push(got);
        bytes += got.byteLength;
      }}
      globalThis.keep = held;
      await batch.retryAll(Math.round(bytes / 1048576));
    """)


ATTACKS = {
    # class 1: the count read one value, the engine another
    "valueOf answers 0, then 16 MiB": "let k = 0; globalThis.size ??= { valueOf() { return k++ % 2 ? 16 << 20 : 0; } };"
    " return new ArrayBuffer(globalThis.size);",
    "maxByteLength answers 0, then 16 MiB": "let k = 0; const opts = { get maxByteLength() { return k++ % 2 ? 16 << 20 : 0; } };"
    " const b = new ArrayBuffer(0, opts); b.resize({ valueOf: () => 16 << 20 }); return b;",
    "array-like length answers 0, then 2 Mi": "let k = 0; return new Float64Array({ get length() { return k++ % 2 ? 2 << 20 : 0; } });",
    "an ArrayBuffer look-alike": "const fake = Object.create(ArrayBuffer.prototype);"
    " Object.defineProperty(fake, 'length', { value: 2 << 20 }); return new Float64Array(fake);",
    "resize past what was counted": "const b = new ArrayBuffer(1, { maxByteLength: 16 << 20 });"
    " let k = 0; b.resize({ valueOf() { return k++ ? 16 << 20 : 1; } }); return b;",
    "resizable buffers, each grown to 16 MiB": "const b = new ArrayBuffer(0, { maxByteLength: 16 << 20 });"
    " b.resize(16 << 20); return b;",
    # class 2: a global's own allocation, with a constructor captured before the accounting
    "TextEncoder.encode": "globalThis.s ??= 'x'.repeat(1 << 20); return new TextEncoder().encode(globalThis.s);",
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_a_context_holds_no_more_array_buffer_memory_than_its_limit(rt: JsRuntime, attack: str) -> None:
    # forms.md: 128 MiB memory per context; QC-32
    host = Host()
    limits = Limits(cpu_ms=20_000, heap_mb=LIMIT_MB)
    ctx = await rt.start_context(js(hoarder(ATTACKS[attack])), "worker.js", limits, host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    held = [args["delaySeconds"] for method, args in host.calls if method == "batch.retryAll"]
    assert result.reason == "heap_limit" or (result.ok and held and held[0] <= LIMIT_MB), (result, held)


async def test_honest_buffers_under_the_limit_are_let_be(rt: JsRuntime) -> None:  # QC-32
    host = Host()
    source = js_queue("""
      const a = new Uint8Array(new ArrayBuffer(4 << 20)), b = new TextEncoder().encode('é'.repeat(1 << 16));
      const c = Float64Array.from([1, 2, 3]), d = new Uint8Array([1, 2]), e = structuredClone(a);
      const r = new ArrayBuffer(8, { maxByteLength: 1 << 20 }); r.resize(1 << 19);
      const ok = a.length === 4 << 20 && b.length === 1 << 17 && c[2] === 3 && d[1] === 2 && e.length === a.length
        && r.byteLength === 1 << 19 && crypto.getRandomValues(new Uint32Array(4)).length === 4;
      await batch.retryAll(ok ? 1 : 0);
    """)
    ctx = await rt.start_context(js(source), "worker.js", Limits(cpu_ms=5000, heap_mb=LIMIT_MB), host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    assert result.ok and host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 1})], result
