"""QueueConsumer 0.3.0 delivery over real HTTP, real JS handlers, real Kafka and Postgres.

The probe worker (`_kit.PROBE_JS`) reports every batch it is handed to an unconsumed
REPORT queue, so what the handler saw is read back through the Host's own peek.
"""

import asyncio
import time

import pytest

from tests.conformance.kit import Api

pytestmark = pytest.mark.integration


async def setup(api: Api, **consumer: object) -> tuple[str, str, str]:
    q, report = await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    c = await api.consumer(q, w, **consumer)  # type: ignore[arg-type]
    return q, report, c


async def test_batch_shape_and_implicit_ack(api: Api) -> None:
    # QC-21, QC-22, QC-23, QC-31, QC-52
    q, report = await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    ids = await api.send(q, "one", "two", "three")
    before = time.time() * 1000
    await api.consumer(q, w, maxBatchSize=10)
    await api.until(q, acknowledged=3, inFlight=0, ready=0)
    seen = await api.reports(report, 3)
    assert sorted(s["id"] for s in seen) == sorted(ids)
    name = (await api.get(q)).json()["name"]
    for s in seen:
        assert s["attempts"] == 1 and s["queue"] == name
        assert 1 <= len(s["batch"]) <= 256 and 1 <= len(s["id"]) <= 256
        assert 1 <= s["size"] <= 10 and s["ts"] <= before  # acceptance time, epoch ms
    assert [s["body"] for s in sorted(seen, key=lambda s: ids.index(s["id"]))] == ["one", "two", "three"]


async def test_max_batch_size_and_order(api: Api) -> None:
    # QC-4, QC-21: 1..maxBatchSize messages per batch, in acceptance order
    q, report = await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    ids = await api.send(q, *[f"ack{i}" for i in range(7)])
    await api.consumer(q, w, maxBatchSize=2, maxConcurrency=1)
    await api.until(q, acknowledged=7)
    seen = await api.reports(report, 7)
    batches: dict[str, list[str]] = {}
    for s in seen:
        batches.setdefault(s["batch"], []).append(s["id"])
    assert all(1 <= len(b) <= 2 for b in batches.values())
    assert [i for b in batches.values() for i in b] == ids  # one at a time: acceptance order


async def test_batch_timeout_fills_a_batch(api: Api) -> None:
    # QC-5: wait up to maxBatchTimeoutSeconds to fill a batch
    q, report, _ = await setup(api, maxBatchSize=10, maxBatchTimeoutSeconds=2)
    started = time.monotonic()
    await api.send(q, "a", "b", "c")
    await api.until(q, acknowledged=3)
    assert time.monotonic() - started >= 1.5
    seen = await api.reports(report, 3)
    assert len({s["batch"] for s in seen}) == 1


async def test_max_concurrency(api: Api) -> None:
    # QC-6: at most maxConcurrency batches execute at once
    q, _, _ = await setup(api, maxBatchSize=1, maxConcurrency=2)
    await api.send(q, *["sleep:400"] * 6)
    peak = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = await api.stats(q)
        peak = max(peak, s["inFlight"])
        if s["acknowledged"] == 6:
            break
        await asyncio.sleep(0.05)
    assert s["acknowledged"] == 6 and 1 <= peak <= 2


async def test_retry_with_delay_and_default_delay(api: Api) -> None:
    # QC-8, QC-27, QC-24: retry(id, s) and retry(id) -> retryDelaySeconds; then redelivered
    # The delays leave seconds between both retries and their redeliveries, so the peek
    # below sees them delayed however slow the machine is.
    q, report, _ = await setup(api, retryDelaySeconds=4, maxRetries=5)
    [a] = await api.send(q, "retry:3")
    [b] = await api.send(q, "retry")
    await api.until(q, retried=2)
    delayed = await api.peek(q, state="delayed")
    assert b in {m["id"] for m in delayed}, delayed  # retry(id): retryDelaySeconds, not at once
    assert {m["id"] for m in delayed} <= {a, b} and all(m["attempts"] == 2 for m in delayed), delayed
    deadline = time.monotonic() + 30
    while True:  # both come back: the same messages, delivered once more
        seen = await api.reports(report, 2)
        again = [x for x in seen if x["attempts"] == 2]
        if {x["id"] for x in again} == {a, b}:
            break
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.2)
    first = {x["id"]: x["ts"] for x in seen if x["attempts"] == 1}
    assert all(first[x["id"]] == x["ts"] for x in again)  # acceptance time never changes


async def test_acknowledge_all_and_retry_all(api: Api) -> None:
    # QC-28
    src = """
    const dec = new TextDecoder();
    export default { async queue(batch, env) {
      const first = batch.messages[0];
      if (first.attempts === 1) { await batch.acknowledge(first.id); await batch.retryAll(0); }
      else { await batch.acknowledgeAll(); }
      await env.REPORT.send(JSON.stringify(batch.messages.map((m) => ({id: m.id, attempts: m.attempts}))));
    } };"""
    q, report = await api.queue(), await api.queue()
    w = await api.worker(src, bindings={"REPORT": report})
    await api.send(q, "x", "y", "z")
    await api.consumer(q, w, maxBatchSize=3, maxConcurrency=1, maxBatchTimeoutSeconds=1)
    s = await api.until(q, acknowledged=3)
    assert s["retried"] == 2


async def test_settlement_rejections_are_interface_errors(api: Api) -> None:
    # QC-25, QC-26, QC-29, QC-30, QC-53
    src = """
    export default { async queue(batch, env) {
      const m = batch.messages[0], out = [];
      out.push(String(await batch.acknowledge(m.id)));
      const tries = [() => batch.acknowledge(m.id), () => batch.retry(m.id),
                     () => batch.acknowledge('msg_not_in_this_batch'), () => batch.retry('nope', 1)];
      for (const f of tries) {
        try { await f(); out.push('resolved'); } catch (e) { out.push(`${e.name}:${e instanceof Error}`); }
      }
      try { batch.retry(m.id, 43201); } catch (e) { out.push(e.name); }
      out.push(String(await batch.acknowledgeAll()), String(await batch.retryAll()));
      await env.REPORT.send(JSON.stringify([{names: out}]));
    } };"""
    q, report = await api.queue(), await api.queue()
    w = await api.worker(src, bindings={"REPORT": report})
    c = await api.consumer(q, w)
    await api.send(q, "m")
    [got] = await api.reports(report, 1)
    assert got["names"] == [
        "undefined",
        "already_settled:true",
        "already_settled:true",
        "unknown_message:true",
        "unknown_message:true",
        "RangeError",
        "undefined",
        "undefined",
    ]
    s = await api.until(q, acknowledged=1)
    assert s["retried"] == 0  # a settled result is never reversed (QC-29)
    res = (await api.get(c)).json()
    assert res["state"] == "active"  # not a Resource Operation error, nor a Problem (QC-30)


async def test_throw_keeps_settled_and_retries_the_rest(api: Api) -> None:
    # QC-32, QC-24, QC-45: the retried message arrives again (a duplicate execution)
    q, report, _ = await setup(api, maxBatchSize=2, maxBatchTimeoutSeconds=1, maxRetries=1)
    a, b = await api.send(q, "ack", "throw")
    s = await api.until(q, acknowledged=1, discarded=1)
    assert s["retried"] == 1
    seen = await api.reports(report, 3)
    assert [x["attempts"] for x in seen if x["id"] == b] == [1, 2]
    assert [x["attempts"] for x in seen if x["id"] == a] == [1]


async def test_max_retries_then_dead_letter_queue(api: Api) -> None:
    # QC-7, QC-33, QC-34: 1 + maxRetries deliveries, then a new message on the DLQ
    q, dlq, report = await api.queue(), await api.queue(), await api.queue()
    w = await api.worker(bindings={"REPORT": report})
    [mid] = await api.send(q, "throw")
    await api.consumer(q, w, maxRetries=2, deadLetterQueue={"resourceUid": dlq})
    s = await api.until(q, deadLettered=1)
    assert s["retried"] == 2 and s["acknowledged"] == 0
    seen = await api.reports(report, 3)
    assert [x["attempts"] for x in seen] == [1, 2, 3]
    [moved] = await api.peek(dlq)
    assert moved["id"] != mid and moved["attempts"] == 1
    assert moved["timestamp"] > seen[0]["ts"] and moved["body"] == "dGhyb3c="  # body kept
    assert set(moved) == {"id", "timestamp", "attempts", "state", "size", "body"}  # no link back


async def test_max_retries_zero_without_dlq_discards(api: Api) -> None:
    # QC-9, QC-33, QC-34
    q, report, _ = await setup(api, maxRetries=0)
    await api.send(q, "throw")
    s = await api.until(q, discarded=1)
    assert s["retried"] == 0 and s["deadLettered"] == 0
    assert len(await api.reports(report, 1)) == 1


async def test_worker_queue_binding_send(api: Api) -> None:
    # QC-52: a worker's send appends to the bound queue, resolved once durable
    q, out = await api.queue(), await api.queue()
    src = """export default { async queue(batch, env) {
      for (const m of batch.messages) await env.OUT.sendBatch([{body: m.body}, {body: 'x', delaySeconds: 60}]);
    } };"""
    w = await api.worker(src, bindings={"OUT": out})
    await api.consumer(q, w)
    await api.send(q, "hello")
    s = await api.until(out, ready=1, delayed=1)
    assert s["acknowledged"] == 0
    [m] = await api.peek(out, state="ready")
    assert m["body"] == "aGVsbG8=" and m["attempts"] == 1


async def test_update_applies_to_running_consumer_without_losing_results(api: Api) -> None:
    # QC-40, QC-6: lower maxConcurrency while batches are in flight
    q, _, c = await setup(api, maxBatchSize=1, maxConcurrency=8)
    ids = await api.send(q, *["sleep:300"] * 24)
    await api.until(q, inFlight=8, timeout=20)
    spec = (await api.get(c)).json()["spec"]
    await api.done(await api.put(c, {**spec, "maxConcurrency": 1}))
    # The read side moves counter by counter: wait until it shows every ack and nothing in flight.
    s = await api.until(q, acknowledged=24, inFlight=0, timeout=60)
    assert s["retried"] == 0 and len(ids) == 24
