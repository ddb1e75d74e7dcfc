"""Delete stop boundary, restarts and Operations (QC-42..49), against a real Host.

The engine is SIGKILLed, every replica of it; it restarts and rebuilds from the log.
"""

import asyncio
import time
from typing import Any

import pytest

from tests.conformance.kit import Api
from tests.hostkit import kill_every

pytestmark = pytest.mark.integration


async def wait_in_flight(api: Api, q: str, n: int = 1) -> None:
    await api.until(q, inFlight=n, timeout=30)


async def test_delete_fixes_a_stop_boundary_and_never_acks(api: Api) -> None:
    # QC-41, QC-42, QC-43, QC-47: a delete stops the running handler; its message stays owed
    q, report = await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    c = await api.consumer(q, w)
    [mid] = await api.send(q, "spin")  # CPU-bound forever: only a physical stop ends it
    await api.reports(report, 1)  # the handler runs
    r = await api.delete(c)
    assert r.status_code == 202
    first = await api.op(r.json()["id"], wait=0)
    assert first["state"] in ("pending", "running", "succeeded")  # a wait is not a failure
    op = await api.done(r)
    assert op["effect"] == "complete"
    s = await api.until(q, inFlight=0, ready=1)
    assert s["acknowledged"] == 0  # unsettled messages are not acknowledged by detaching
    [m] = await api.peek(q)
    assert m["id"] == mid and m["attempts"] == 2  # owed again, and that redelivery counts
    # a new Consumer picks the obligation up (QC-43, QC-45: the handler runs again)
    w2 = await api.worker(bindings={"REPORT": report})
    c2 = await api.consumer(q, w2, maxRetries=3)
    seen = await api.reports(report, 2)
    assert [x["attempts"] for x in seen if x["id"] == mid][:2] == [1, 2]
    await api.done(await api.delete(c2))  # and stop the spinning handler again


async def test_engine_restart_redelivers_unsettled_and_keeps_settled(api: Api, host: Any) -> None:
    # QC-43, QC-44, QC-45: after a SIGKILL nothing is inferred; unsettled is redelivered
    q, report = await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    await api.consumer(q, w, maxBatchSize=1, maxConcurrency=2, maxRetries=5)
    [done] = await api.send(q, "ack")
    await api.until(q, acknowledged=1)
    [slow] = await api.send(q, "sleep:60000")
    await api.reports(report, 2)  # its handler runs
    kill_every(host, "queue")
    s = await api.stats(q)
    assert s["acknowledged"] == 1  # no ACK inferred from the crash
    seen = await api.reports(report, 3, timeout=60)  # restarted engine: delivered again
    assert [x["attempts"] for x in seen if x["id"] == slow][:2] == [1, 2]
    assert [x["attempts"] for x in seen if x["id"] == done] == [1]  # settled stays settled
    s = await api.until(q, retried=1, acknowledged=1)
    assert s["inFlight"] + s["ready"] + s["delayed"] == 1


async def test_delete_survives_an_engine_restart(api: Api, host: Any) -> None:
    # QC-48, QC-49, QC-17: the unfinished delete is resumed; meanwhile no second Consumer
    q = await api.queue()
    w = await api.worker()
    c = await api.consumer(q, w)
    await api.send(q, "sleep:60000")
    await wait_in_flight(api, q)
    kill_every(host, "queue")
    r = await api.delete(c)
    assert r.status_code == 202
    second = await api.post(
        "second", "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/", api.consumer_spec(q, w)
    )
    assert second.status_code == 409  # the deleting Consumer still holds the queue
    op = await api.op(r.json()["id"], wait=60)
    assert op["state"] == "succeeded", op
    assert (await api.get(c)).status_code == 404
    s = await api.stats(q)
    assert s["acknowledged"] == 0 and s["inFlight"] == 0 and s["ready"] == 1
    # QC-49: the same queue can be attached again by an explicit new create
    c2 = await api.consumer(q, w)
    await api.done(await api.put(c2, api.consumer_spec(q, w, maxRetries=0)))
    started = time.monotonic()
    while time.monotonic() - started < 5 and (await api.stats(q))["inFlight"] == 0:
        await asyncio.sleep(0.1)
