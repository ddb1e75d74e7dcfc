"""A JavaScript worker reaches nothing but its Version and the ABI (architecture rule 7)."""

from __future__ import annotations

import pytest

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue


async def run(rt: JsRuntime, source: str, **extra: str):
    host = Host()
    ctx = await rt.start_context(js(source, **extra), "worker.js", Limits(cpu_ms=2000), host)
    info = await ctx.load_info()
    result = None if info.load_error else await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    return info, result, host


@pytest.mark.parametrize(
    "source",
    [
        "import fs from 'fs';",
        "import { readFileSync } from 'node:fs';",
        "import net from 'node:net';",
        "import cp from 'node:child_process';",
        "import x from '/etc/passwd';",
        "import x from 'file:///etc/passwd';",
        "import x from '../outside.js';",
        "import x from './missing.js';",
    ],
)
async def test_static_import_outside_version_is_load_error(rt: JsRuntime, source: str) -> None:  # WF-32
    info, _, _ = await run(rt, source + js_queue(""))
    assert info.load_error and "cannot import" in info.load_error


@pytest.mark.parametrize(
    "specifier", ["node:fs", "fs", "node:net", "node:child_process", "node:worker_threads", "/etc/passwd", "../x.js"]
)
async def test_dynamic_import_outside_version_rejects(rt: JsRuntime, specifier: str) -> None:
    source = js_queue(f"await import({specifier!r});")
    _, result, _ = await run(rt, source)
    assert not result.ok and result.reason == "threw"
    assert result.error_name == "TypeError" and "cannot import" in result.error_message


async def test_dynamic_import_inside_version_works(rt: JsRuntime) -> None:
    source = js_queue("const m = await import('./lib/util.js'); await batch.retryAll(m.delay);")
    _, result, host = await run(rt, source, lib__util="export const delay = 7;")
    assert result.ok and host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 7})]


async def test_no_host_globals(rt: JsRuntime) -> None:
    probe = js_queue("""
      const names = ['process', 'require', 'module', 'Buffer', 'global', 'fetch', 'WebSocket',
                     'Worker', 'WebAssembly', 'setInterval', 'setImmediate', 'queueMicrotask',
                     'SharedWorker', 'XMLHttpRequest', 'Deno', 'Bun'];
      const present = names.filter((n) => typeof globalThis[n] !== 'undefined');
      if (present.length) throw new Error('present: ' + present.join(','));
      const wanted = ['console', 'TextEncoder', 'TextDecoder', 'URL', 'structuredClone', 'crypto',
                      'setTimeout', 'clearTimeout', 'atob', 'btoa'];
      const missing = wanted.filter((n) => typeof globalThis[n] === 'undefined');
      if (missing.length) throw new Error('missing: ' + missing.join(','));
    """)
    _, result, _ = await run(rt, probe)
    assert result.ok, result


@pytest.mark.parametrize(
    "escape",
    [
        "this.constructor.constructor('return process')()",
        "globalThis.constructor.constructor('return process')()",
        "(() => {}).constructor('return process')()",
        "eval('1')",
        "console.log.constructor('return process')()",
        "setTimeout.constructor('return process')()",
        "TextEncoder.constructor('return process')()",
        "new URL('http://x/').constructor.constructor('return process')()",
    ],
)
async def test_constructor_escapes_reach_no_host_realm(rt: JsRuntime, escape: str) -> None:
    # Every function here belongs to the sandbox realm, whose code generation
    # from strings is off: the attempt throws instead of returning `process`.
    _, result, _ = await run(rt, js_queue(f"const p = {escape}; if (p && p.pid) throw new Error('ESCAPED');"))
    assert not result.ok and result.error_name == "EvalError", result


async def test_errors_from_the_runtime_belong_to_the_sandbox_realm(rt: JsRuntime) -> None:
    source = js_queue("""
      const errors = [];
      try { await import('node:fs'); } catch (e) { errors.push(e); }
      try { await batch.acknowledge(1); } catch (e) { errors.push(e); }
      try { await batch.acknowledge('m1'); } catch (e) { errors.push(e); }
      for (const e of errors) {
        if (!(e instanceof Error)) throw new Error('foreign error object');
        if (e.constructor.constructor !== Function) throw new Error('foreign Function');
      }
      if (errors.length !== 3) throw new Error('expected three errors, got ' + errors.length);
    """)
    host = Host(fail={"batch.acknowledge": "already_settled"})
    ctx = await rt.start_context(js(source), "worker.js", Limits(cpu_ms=2000), host)
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    assert result.ok, result


async def test_globals_behave(rt: JsRuntime) -> None:
    source = js_queue("""
      const eq = (a, b, what) => { if (a !== b) throw new Error(`${what}: ${a} !== ${b}`); };
      eq(new TextDecoder().decode(new TextEncoder().encode('é😀x')), 'é😀x', 'utf8');
      eq(new TextDecoder().decode(batch.messages[0].body), 'body-1', 'body');
      eq(atob(btoa('hi\\u00ff')), 'hi\\u00ff', 'base64');
      const u = new URL('../b?q=1#h', 'https://ex.org/a/c');
      eq(u.href, 'https://ex.org/b?q=1#h', 'url'); u.pathname = '/z'; eq(u.href, 'https://ex.org/z?q=1#h', 'url set');
      const c = structuredClone({a: [1, {b: 2}], d: new Date(5)});
      eq(c.a[1].b, 2, 'clone'); eq(c.d.getTime(), 5, 'date');
      eq(crypto.randomUUID().length, 36, 'uuid');
      const r = crypto.getRandomValues(new Uint8Array(16)); eq(r.length, 16, 'random');
      await new Promise((res) => setTimeout(res, 5));
      const t = setTimeout(() => { throw new Error('cleared timer ran'); }, 1); clearTimeout(t);
      eq(env.GREETING, 'hello', 'vars');
    """)
    _, result, _ = await run(rt, source)
    assert result.ok, result
