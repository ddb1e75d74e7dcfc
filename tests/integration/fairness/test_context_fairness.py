"""Spaces cannot starve each other in the workflow engine (issue 21, class 7): one Space
holding every live context it may have delays another Space's instance by at most 2 s
against its unloaded time."""

import asyncio
import time
import uuid

import httpx
import pytest

from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, SpaceFixture, new_space
from tests.httpkit import WORKFLOW

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
export class Flow {
  async run(event, step) {
    const p = event.params ?? {};
    if (p.hold) await step.do("hold", () => new Promise((r) => setTimeout(() => r({}), p.hold)));
    return { done: true };
  }
}
"""
SLACK = 2.0


async def _flows(api: Api) -> Flows:
    worker = await api.worker(source=FLOW_JS, handlers=())
    spec = {"worker": {"resourceUid": worker}, "className": "Flow"}
    return Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, spec))


async def _running(flows: Flows, at_least: int = 0, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while True:
        n, cursor = 0, ""
        while cursor is not None:
            page = await flows.api.c.get(
                flows.base,
                params={"status": "running", "limit": 100, **({"cursor": cursor} if cursor else {})},
                headers=flows.api.h,
            )
            n, cursor = n + len(page.json()["items"]), page.json()["nextCursor"]
        if n >= at_least or time.monotonic() > deadline:
            return n
        await asyncio.sleep(0.5)


async def _run_one(flows: Flows) -> float:
    started = time.monotonic()
    iid = await flows.started()
    done = await flows.until(iid, "complete", "errored", timeout=90)
    assert done["status"] == "complete", done
    return time.monotonic() - started


async def test_an_instance_starts_beside_a_space_holding_every_context(
    host: Host, client: httpx.AsyncClient, space: SpaceFixture
) -> None:
    # WF-18, WF-29: another Space's instances waiting inside step effects take no slot this one needs
    quiet = await _flows(Api(client, space))
    busy = await _flows(Api(client, await new_space(host)))
    alone = await _run_one(quiet)
    held: list[str] = []
    for _ in range(8):  # 160 instances, each holding its context 60 s inside a step effect
        held += await asyncio.gather(*(busy.started(params={"hold": 60_000}) for _ in range(20)))
    before = await _running(busy, at_least=128)
    beside = await _run_one(quiet)
    after = await _running(busy)
    print(f"\ninstance alone {alone:.2f} s, beside {before}..{after} running instances of another Space {beside:.2f} s")
    assert after >= 128, "the busy Space's instances were still held in their effects"
    assert beside <= alone + SLACK, f"alone {alone:.2f} s, beside a busy Space {beside:.2f} s"
    for i in range(0, len(held), 20):  # leave the engine as we found it
        await asyncio.gather(*(busy.terminate(iid) for iid in held[i : i + 20]))
