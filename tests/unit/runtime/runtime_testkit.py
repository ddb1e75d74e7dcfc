"""Shared helpers of the runtime tests: the JavaScript runtime fixture, a recording Host, batches, module sets."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from sumi.runtime import EnvSpec, HostError, JsRuntime, Module, QueueBatch, QueueMessage
from sumi.runtime._jshost import JS_DIR


def js_runtime(scope: Literal["module", "function"] = "module", *, test_hooks: bool = False) -> Any:
    """The `rt` fixture: one started JsRuntime, shared by a module's tests unless scope says per test.

    conftest.py makes the shared one; a module that needs another sets `rt = js_runtime(...)`:
    per test where a test may leave the runtime worse than it found it (its memory, a forged
    frame), test hooks where a test looks inside the runtime process.
    """

    @pytest.fixture(scope=scope, name="rt")
    async def rt() -> AsyncIterator[JsRuntime]:
        runtime = JsRuntime(test_hooks=test_hooks)
        await runtime.start()
        yield runtime
        await runtime.close()

    return rt


@dataclass
class Host:
    """Records host calls; `fail` maps a method to the HostError code it rejects with."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)
    called: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, context_id: str, method: str, args: dict[str, Any]) -> Any:
        self.calls.append((method, args))
        self.called.set()
        if method in self.fail:
            raise HostError(self.fail[method], f"{method} refused")
        return None

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]


def batch(n: int = 2, batch_id: str = "batch-1") -> QueueBatch:
    return QueueBatch(
        batch_id,
        "orders",
        [QueueMessage(f"m{i}", 1_700_000_000_000 + i, f"body-{i}".encode(), 1) for i in range(1, n + 1)],
    )


ENV = EnvSpec({"GREETING": "hello"}, ["OUT"])


def js(source: str, **extra: str) -> list[Module]:
    return [Module("worker.js", source), *(Module(k.replace("__", "/") + ".js", v) for k, v in extra.items())]


def py(source: str, **extra: str) -> list[Module]:
    return [Module("worker.py", source), *(Module(k.replace("__", "/") + ".py", v) for k, v in extra.items())]


def js_queue(body: str) -> str:
    """A JS worker whose queue handler runs `body` (batch, env, ctx in scope)."""
    return "export default { async queue(batch, env, ctx) {\n" + body + "\n} };\n"


def py_queue(body: str) -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return "async def queue(batch, env, ctx):\n" + lines + "\n"


_DOC_RUNNER = """
import { makeDocumentChecker } from %s;
import { types } from 'node:util';
const checkDocument = makeDocumentChecker({ isProxy: types.isProxy });
// Cases may patch the realm's intrinsics: what the runner needs is captured first.
const stringify = JSON.stringify;
const define = Object.defineProperty;
const cases = JSON.parse(process.argv[1]);
const out = [];
for (const src of cases) {
  globalThis.sideEffects = 0;
  const value = new Function(src)();
  const r = checkDocument(value);
  define(out, out.length, { enumerable: true, value: { ok: r.ok, code: r.code ?? null, size: r.size ?? null,
    canonical: r.ok && r.canonical.length < 4096 ? r.canonical : null, sideEffects: globalThis.sideEffects } });
}
process.stdout.write(stringify(out));
"""


def check_documents(*cases: str) -> list[dict[str, Any]]:
    """Run checkDocument in plain node on values built by each JS function body."""
    script = _DOC_RUNNER % json.dumps((JS_DIR / "document.mjs").as_uri())
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script, json.dumps(list(cases))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)
