"""Worker runtime figures against a one-process floor. Run: python tests/bench/bench_runtime.py

For each runtime: context start latency, host-call round trip, host calls per
second. The floor is a plain `node -e` / `python -c` doing the same work in
one process: module evaluation for start, an awaited async call for a round
trip. The ratio says what isolation and the stdio protocol cost.

Then the workflow side of the runtime alone (a Host that answers at once): one
live step.do round trip, an always-replay execution (10 completed steps replayed
plus one live step, context start and stop included), and whole executions per
second at concurrency 20 (each workflow execution needs a fresh context, WF-32).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from sumi.runtime import (
    EnvSpec,
    JsRuntime,
    Module,
    PyRuntime,
    QueueBatch,
    QueueMessage,
    StepRecord,
    WorkflowInvocation,
)

STARTS = {"js": 40, "py": 15}
ROUND_TRIPS = 400
THROUGHPUT_CALLS = 4000

JS_WORKER = """
export default { async queue(batch, env) {
  const n = Number(env.N), serial = env.SERIAL === '1';
  if (serial) { for (let i = 0; i < n; i++) await batch.acknowledge('m1'); return; }
  const all = []; for (let i = 0; i < n; i++) all.push(batch.acknowledge('m1')); await Promise.all(all);
} };
"""
PY_WORKER = """
import asyncio
async def queue(batch, env, ctx):
    n, serial = int(env.N), env.SERIAL == "1"
    if serial:
        for _ in range(n):
            await batch.acknowledge("m1")
    else:
        await asyncio.gather(*(batch.acknowledge("m1") for _ in range(n)))
"""
WF_STEPS = 200
WF_REPLAYS = 20
WF_CONCURRENT = 20
JS_WORKFLOW = """
export class W {
  async run(event, step) {
    for (let i = 0; i < event.params.n; i++) await step.do('s' + i, async () => ({ i }));
  }
}
"""
PY_WORKFLOW = """
class W:
    def __init__(self, env):
        pass

    async def run(self, event, step):
        for i in range(event["params"]["n"]):
            await step.do(f"s{i}", lambda: {"i": i})
"""
JS_FLOOR = """
const host = async () => undefined;
const now = () => Number(process.hrtime.bigint()) / 1e6;
const starts = [];
for (let i = 0; i < %(starts)d; i++) {
  const t = now(); await import('data:text/javascript,export default {queue(){}};' + i); starts.push(now() - t);
}
const rtts = [];
for (let i = 0; i < %(rtts)d; i++) { const t = now(); await host(); rtts.push(now() - t); }
let t = now(); await Promise.all(Array.from({length: %(calls)d}, () => host()));
console.log(JSON.stringify({starts, rtts, throughputSeconds: (now() - t) / 1000}));
"""
PY_FLOOR = """
import asyncio, importlib.util, json, sys, tempfile, time, pathlib
async def host(): return None
async def main():
    d = pathlib.Path(tempfile.mkdtemp()); starts = []
    for i in range(%(starts)d):
        p = d / f"w{i}.py"; p.write_text("async def queue(b, e, c): pass\\n")
        t = time.perf_counter(); spec = importlib.util.spec_from_file_location(f"w{i}", p)
        spec.loader.exec_module(importlib.util.module_from_spec(spec)); starts.append((time.perf_counter() - t) * 1000)
    rtts = []
    for _ in range(%(rtts)d):
        t = time.perf_counter(); await host(); rtts.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter(); await asyncio.gather(*(host() for _ in range(%(calls)d)))
    print(json.dumps({"starts": starts, "rtts": rtts, "throughputSeconds": time.perf_counter() - t}))
asyncio.run(main())
"""


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def measure(runtime: Any, modules: list[Module], main: str, starts: int) -> dict[str, Any]:
    await runtime.start()
    start_ms = []
    for _ in range(starts):
        t = time.perf_counter()
        ctx = await runtime.start_context(modules, main)
        start_ms.append((time.perf_counter() - t) * 1000)
        await ctx.stop()

    stamps: list[float] = []

    async def host_call(context_id: str, method: str, args: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())

    ctx = await runtime.start_context(modules, main, host_call=host_call)
    batch = QueueBatch("b", "q", [QueueMessage("m1", 0, b"", 1)])
    t = time.perf_counter()
    await ctx.invoke_queue(batch, EnvSpec({"N": str(ROUND_TRIPS), "SERIAL": "1"}))
    # Serial calls: the gap between consecutive arrivals is one full round trip.
    rtts = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)] or [(time.perf_counter() - t) * 1000]
    t = time.perf_counter()
    await ctx.invoke_queue(batch, EnvSpec({"N": str(THROUGHPUT_CALLS), "SERIAL": "0"}))
    throughput = THROUGHPUT_CALLS / (time.perf_counter() - t)
    await ctx.stop()
    await runtime.close()
    return {"starts": start_ms, "rtts": rtts, "throughput": throughput}


async def measure_workflow(runtime: Any, modules: list[Module], main: str) -> dict[str, Any]:
    await runtime.start()

    async def host_call(context_id: str, method: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"action": "resolve"}

    async def execution(inv: WorkflowInvocation) -> None:
        ctx = await runtime.start_context(modules, main, host_call=host_call)
        outcome = await ctx.invoke_workflow(inv, EnvSpec(), host_call)
        await ctx.stop()
        assert outcome.kind == "complete", outcome

    ctx = await runtime.start_context(modules, main, host_call=host_call)
    t = time.perf_counter()
    await ctx.invoke_workflow(WorkflowInvocation("W", "i", {"n": WF_STEPS}), EnvSpec(), host_call)
    step_ms = (time.perf_counter() - t) * 1000 / WF_STEPS
    await ctx.stop()
    history = {f"s{i}": StepRecord(f"s{i}", "do", True, {"i": i}) for i in range(10)}
    replay_ms = []
    for _ in range(WF_REPLAYS):
        t = time.perf_counter()
        await execution(WorkflowInvocation("W", "i", {"n": 11}, history))
        replay_ms.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    await asyncio.gather(*(execution(WorkflowInvocation("W", "i", {"n": 1})) for _ in range(WF_CONCURRENT)))
    contexts_per_s = WF_CONCURRENT / (time.perf_counter() - t)
    await runtime.close()
    return {"step_ms": step_ms, "replay_ms": replay_ms, "contexts_per_s": contexts_per_s}


def report_workflow(name: str, got: dict[str, Any]) -> None:
    print(f"\n{name}: workflow executions (a Host that answers at once)")
    print(f"  {'live step.do round trip (ms)':<44}{got['step_ms']:>10.3f}")
    print(f"  {'replay 10 + 1 live, start..stop p50 (ms)':<44}{pct(got['replay_ms'], 50):>10.1f}")
    print(f"  {'replay 10 + 1 live, start..stop p99 (ms)':<44}{pct(got['replay_ms'], 99):>10.1f}")
    print(f"  {f'executions / s at concurrency {WF_CONCURRENT}':<44}{got['contexts_per_s']:>10.1f}")


def floor(argv: list[str], script: str, starts: int) -> dict[str, Any]:
    code = script % {"starts": starts, "rtts": ROUND_TRIPS, "calls": THROUGHPUT_CALLS}
    out = json.loads(subprocess.run([*argv, code], capture_output=True, text=True, check=True, timeout=60).stdout)
    return {"starts": out["starts"], "rtts": out["rtts"], "throughput": THROUGHPUT_CALLS / out["throughputSeconds"]}


def report(name: str, got: dict[str, Any], base: dict[str, Any]) -> None:
    print(f"\n{name}")
    print(f"  {'metric':<28}{'runtime':>14}{'floor':>14}{'ratio':>10}")
    rows = [
        ("context start p50 (ms)", pct(got["starts"], 50), pct(base["starts"], 50)),
        ("context start p99 (ms)", pct(got["starts"], 99), pct(base["starts"], 99)),
        ("host-call rtt p50 (ms)", pct(got["rtts"], 50), pct(base["rtts"], 50)),
        ("host-call rtt p99 (ms)", pct(got["rtts"], 99), pct(base["rtts"], 99)),
        ("host calls / s", got["throughput"], base["throughput"]),
    ]
    for label, value, ref in rows:
        ratio = value / ref if "/ s" not in label else ref / value
        print(f"  {label:<28}{value:>14.4f}{ref:>14.4f}{ratio:>9.1f}x")


async def main() -> None:
    js = await measure(JsRuntime(), [Module("w.js", JS_WORKER)], "w.js", STARTS["js"])
    report(
        "javascript (worker thread per context, Node.js)",
        js,
        floor(["node", "--input-type=module", "-e"], JS_FLOOR, STARTS["js"]),
    )
    py = await measure(PyRuntime(), [Module("w.py", PY_WORKER)], "w.py", STARTS["py"])
    report("python (child process per context)", py, floor([sys.executable, "-c"], PY_FLOOR, STARTS["py"]))
    print("\nratio: runtime/floor for latencies, floor/runtime for throughput (higher = slower)")
    report_workflow("javascript", await measure_workflow(JsRuntime(), [Module("w.js", JS_WORKFLOW)], "w.js"))
    report_workflow("python", await measure_workflow(PyRuntime(), [Module("w.py", PY_WORKFLOW)], "w.py"))


if __name__ == "__main__":
    asyncio.run(main())
