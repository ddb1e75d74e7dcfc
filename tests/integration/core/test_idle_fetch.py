"""An idle consumer long-polls (few fetch requests), and what it must read anew is not held
behind that poll, on a real broker (issue 40, idle is idle).

No requirement ID applies: the requirements say what a Host answers, not what it costs while
nothing happens; the targets are issue 40's (`tests/bench/bench_idle.py`)."""

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from sumi.wire import idlefetch
from tests.hostkit import scratch_topic

pytestmark = pytest.mark.integration

LONG_MS = 20_000  # far past every bound below: a fetch held behind the long poll shows


@pytest.fixture
async def topic(kafka_bootstrap: str) -> AsyncIterator[str]:
    async with scratch_topic(kafka_bootstrap, "idle-fetch", 3) as name:
        yield name


def consumer(bootstrap: str) -> idlefetch.Consumer:
    return idlefetch.Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        idle_wait_ms=LONG_MS,
    )


def count_fetches(c: idlefetch.Consumer) -> list[float]:
    """The times of the fetch requests the consumer's client sends (the broker's real answers)."""
    sent: list[float] = []
    send = c._client.send

    def counted(node_id: Any, request: Any, **kw: Any) -> Any:
        if type(request).__name__.startswith("FetchRequest"):
            sent.append(time.monotonic())
        return send(node_id, request, **kw)

    c._client.send = counted
    return sent


async def idle(c: idlefetch.Consumer, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert not await c.getmany(timeout_ms=500)


async def first(c: idlefetch.Consumer, within: float) -> tuple[float, Any]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        for messages in (await c.getmany(timeout_ms=200)).values():
            return time.monotonic() - t0, messages[0]
    raise AssertionError(f"nothing read within {within} s")


async def test_an_idle_consumer_asks_rarely(kafka_bootstrap: str, topic: str) -> None:
    c = consumer(kafka_bootstrap)
    await c.start()
    try:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        sent = count_fetches(c)
        await idle(c, 10.0)
        # 500 ms polls all along would be ~20; idle after 3 s, then one long poll
        assert 2 <= len(sent) <= 10, sent
        # and between its long polls the fetcher sleeps: a 1 s backstop turned it 10 times more
        turns = count_turns(c)
        await idle(c, 10.0)
        assert len(turns) <= 5, turns
    finally:
        await c.stop()


def count_turns(c: idlefetch.Consumer) -> list[float]:
    """The times the consumer's fetcher looks at what to do (each of its wakeups)."""
    turns: list[float] = []
    actions = c._fetcher._get_actions_per_node

    def counted(assignment: Any) -> Any:
        turns.append(time.monotonic())
        return actions(assignment)

    c._fetcher._get_actions_per_node = counted
    return turns


async def test_new_work_is_not_held_behind_the_long_poll(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle sooner than the services' 3 s: each case below waits for the long poll first.
    monkeypatch.setattr(idlefetch, "IDLE_AFTER", 0.5)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    c = consumer(kafka_bootstrap)
    await c.start()
    try:
        tp0, tp1, tp2 = (TopicPartition(topic, p) for p in range(3))
        await (await producer.send(topic, b"in-2", partition=2))
        c.assign([tp0, tp1])

        async def long_poll_out() -> None:
            await idle(c, idlefetch.IDLE_AFTER + 1.0)
            assert c._fetcher._fetch_max_wait_ms == LONG_MS  # the long poll is what is tested

        # a record to a partition the poll asks for ends it at once
        await long_poll_out()
        await (await producer.send(topic, b"in-0", partition=0))
        took, m = await first(c, 5.0)
        assert m.value == b"in-0", took

        # a seek back, a resumed partition, an offsets request, a newly assigned partition: none
        # waits for the poll's end
        await long_poll_out()
        c.seek(tp0, 0)
        took, m = await first(c, 5.0)
        assert m.value == b"in-0" and took < 5.0

        c.pause(tp1)
        await long_poll_out()
        await (await producer.send(topic, b"in-1", partition=1))
        await asyncio.sleep(0.5)
        c.resume(tp1)
        took, m = await first(c, 5.0)
        assert m.value == b"in-1"

        await long_poll_out()
        t0 = time.monotonic()
        assert (await c.end_offsets([tp2]))[tp2] == 1
        assert time.monotonic() - t0 < 5.0

        await long_poll_out()
        c.assign([tp0, tp1, tp2])  # (which reads tp0 and tp1 from their starts again)
        t0, got = time.monotonic(), set()
        while b"in-2" not in got and time.monotonic() - t0 < 5.0:
            got |= {m.value for ms in (await c.getmany(timeout_ms=200)).values() for m in ms}
        assert b"in-2" in got
    finally:
        await c.stop()
        await producer.stop()


async def test_a_short_polling_consumer_with_nothing_to_fetch_sleeps(kafka_bootstrap: str, topic: str) -> None:
    # A consumer asking for 50 ms polls (the workflow engine's replies reader) with every
    # partition paused fetches nothing: its fetcher's backstop must not follow the poll down.
    c = idlefetch.Consumer(bootstrap_servers=kafka_bootstrap, fetch_max_wait_ms=50, idle_wait_ms=50)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        c.assign(tps)
        c.pause(*tps)
        await asyncio.sleep(0.5)
        turns = count_turns(c)
        await asyncio.sleep(3)
        assert len(turns) <= 5, len(turns)  # a 50 ms backstop: ~60
    finally:
        await c.stop()
