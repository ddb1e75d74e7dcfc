"""A Caller Binding's `status()` through the log beside a local one. Run:
python -m tests.bench.bench_remote_status

One engine owns every partition; the second run's test setting sends every binding call
through the log, as to an instance another replica decides (docs/decisions.md). Prints p50,
p90 and max of 200 sequential `status()` calls from one workflow run, each way.
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio

from sumi.core.config import Settings
from tests.bench._parts import parts
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import engine_bench
from tests.integration.workflow.test_remote_bindings import FLOW, output, remote

N = 200


async def status_ms(settings: Settings) -> list[int]:
    async with engine_bench(settings) as (b, _):
        await b.deploy(FLOW, binding="SELF")
        assert (await b.create("done", {"role": "done", "n": 1})).accepted
        await b.status("done", "complete")
        assert (await b.create("timer", {"role": "timing", "done": "done", "n": N})).accepted
        assert await b.status("timer", "complete", "errored", timeout=120) == "complete"
        ms: list[int] = output(b, "timer")["ms"]
        return sorted(ms)


async def bench(kafka: str, db: str) -> None:
    local = await status_ms(new_settings(kafka, db))
    through_log = await status_ms(remote(kafka, db))
    for name, ms in (("local", local), ("through the log", through_log)):
        print(f"status() {name}: p50 {ms[N // 2]} ms, p90 {ms[N * 9 // 10]} ms, max {ms[-1]} ms", flush=True)


def main() -> None:
    with parts() as (kafka, db):
        asyncio.run(bench(kafka, db))


if __name__ == "__main__":
    main()
