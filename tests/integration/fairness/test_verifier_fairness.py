"""Spaces cannot starve each other at the verifier (issue 21, class 8; forms.md WorkerVersion
verification): one Space's slow-loading Versions delay only that Space's Versions."""

import asyncio
import time

import httpx
import pytest

from tests.conformance.kit import Api
from tests.hostkit import Host, SpaceFixture, new_space

pytestmark = pytest.mark.integration

QUICK = "export default { async queue(batch) { await batch.acknowledgeAll(); } };\n"
# Top-level await: the load takes 24 s of the verifier's 30 s bound, using no CPU.
SLOW = "await new Promise((r) => setTimeout(r, 24000));\n" + QUICK


async def _verify_time(api: Api, worker: str) -> float:
    started = time.monotonic()
    await api.version(worker, QUICK)
    return time.monotonic() - started


async def test_a_space_verifies_in_its_unloaded_time_beside_a_slow_space(
    host: Host, client: httpx.AsyncClient, space: SpaceFixture
) -> None:
    # WF-3, WF-6: a Version is pending only while its own load runs
    quiet = Api(client, space)
    busy = Api(client, await new_space(host))
    quiet_worker = await quiet.worker(deploy=False)
    busy_worker = await busy.worker(deploy=False)
    alone = await _verify_time(quiet, quiet_worker)

    slow = [await busy.version(busy_worker, SLOW, wait=False) for _ in range(3)]
    await asyncio.sleep(1.5)  # the slow loads are under way
    beside = await _verify_time(quiet, quiet_worker)

    states = [(await busy.get(uid)).json()["state"] for uid in slow]
    assert states.count("creating") == 3, f"the slow Versions were still loading: {states}"
    print(f"\nverify alone {alone:.2f} s, beside 3 slow loads of another Space {beside:.2f} s")
    assert beside <= alone + 2.0, f"alone {alone:.2f} s, beside a busy Space {beside:.2f} s"
