"""The outbox's pair of transactional producers against a real broker (`sumi.wire.outbox`):
commits taking turns keep the order of the decisions, and a new owner fences both."""

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced

from sumi.core import records as r
from sumi.wire import codec
from sumi.wire import outbox as outbox_module
from sumi.wire.outbox import Outbox
from sumi.wire.topics import partition_for
from tests.hostkit import scratch_topic

pytestmark = pytest.mark.integration


@pytest.fixture
async def topic(kafka_bootstrap: str) -> AsyncIterator[str]:
    async with scratch_topic(kafka_bootstrap, "outbox", 2) as name:
        yield name


async def pair(bootstrap: str, tid: str) -> list[AIOKafkaProducer]:
    producers = [
        AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"{tid}{t}", enable_idempotence=True, linger_ms=0
        )
        for t in ("", "-t1")
    ]
    for p in producers:
        await p.start()
    return producers


async def read_all(bootstrap: str, topic: str) -> list[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        got: list[str] = []  # one key: one partition, in log order
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for ms in (await consumer.getmany(timeout_ms=500)).values():
                got += [codec.decode(m.value).instanceId for m in ms]
        return got
    finally:
        await consumer.stop()


def status(i: int) -> tuple[str, str, r.InstanceStatusChanged]:
    return ("", "k", r.InstanceStatusChanged("w", f"i{i:04d}", "queued", i))


def counted(producer: AIOKafkaProducer, begun: list[int], turn: int) -> None:
    begin = producer.begin_transaction

    async def counting() -> None:
        begun.append(turn)
        await begin()

    producer.begin_transaction = counting  # type: ignore[method-assign]


# WF-46: the engine's commits take turns on two producers and still land in decision order,
# each exactly once; starting the pair again (a new holder) fences both of the old holder's.
async def test_turns_keep_the_order_and_a_new_owner_fences_both(kafka_bootstrap: str, topic: str) -> None:
    tid = f"outbox-{uuid.uuid4().hex[:6]}"
    old = await pair(kafka_bootstrap, tid)
    begun: list[int] = []
    for turn, p in enumerate(old):
        counted(p, begun, turn)
    outbox = Outbox(old, partitions=2)
    runner = asyncio.create_task(outbox.run())
    try:
        puts = []
        for i in range(120):
            puts.append(outbox.put([(topic, "k", status(i)[2])]))
            if i % 3 == 0:
                await asyncio.sleep(0.002)  # some alone in a transaction, some grouped
        await asyncio.gather(*puts)
        assert len(begun) > 2 and begun == [t % 2 for t in range(len(begun))]  # strictly in turns
        assert await read_all(kafka_bootstrap, topic) == [f"i{i:04d}" for i in range(120)]

        runner.cancel()  # a stop aborts the transaction begun ahead: both producers are idle
        with pytest.raises(asyncio.CancelledError):
            await runner
        new = await pair(kafka_bootstrap, tid)  # InitProducerId for both: the fence
        try:
            for p in old:
                with pytest.raises(ProducerFenced):
                    async with p.transaction():
                        await p.send(topic, codec.encode(status(999)[2]), key=b"k")
            again = Outbox(old, partitions=2)
            runner = asyncio.create_task(again.run())
            with pytest.raises(RuntimeError):
                await again.put([(topic, "k", status(998)[2])])
            async with new[0].transaction():
                await new[0].send(topic, codec.encode(status(997)[2]), key=b"k")
        finally:
            for p in new:
                await p.stop()
        assert (await read_all(kafka_bootstrap, topic))[120:] == ["i0997"]
    finally:
        runner.cancel()
        for p in old:
            await p.stop()


async def end_offset(bootstrap: str, tp: TopicPartition) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


# WF-46: the next transaction is begun ahead, its partition added before its records come. That
# holds back nothing committed (a read_committed reader reads to the end meanwhile), keeps the
# order, and an outbox left idle aborts it (its marker is the one offset the partition gains).
async def test_a_transaction_begun_ahead_holds_nothing_back_and_ends_when_idle(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "AHEAD_IDLE_S", 0.5)
    producers = await pair(kafka_bootstrap, f"ahead-{uuid.uuid4().hex[:6]}")
    ahead: list[int] = []
    for turn, p in enumerate(producers):
        counted(p, ahead, turn)
    outbox = Outbox(producers, partitions=2)
    runner = asyncio.create_task(outbox.run())
    tp = TopicPartition(topic, partition_for("k", 2))
    try:
        for i in range(3):
            await outbox.put([(topic, "k", status(i)[2])])
        assert ahead == [0, 1, 0, 1]  # the fourth transaction is begun before its records come
        assert await read_all(kafka_bootstrap, topic) == ["i0000", "i0001", "i0002"]
        end = await end_offset(kafka_bootstrap, tp)
        await asyncio.sleep(1.5)
        assert await end_offset(kafka_bootstrap, tp) == end + 1  # its abort marker
        await outbox.put([(topic, "k", status(3)[2])])
        assert await read_all(kafka_bootstrap, topic) == ["i0000", "i0001", "i0002", "i0003"]
        assert not runner.done()
    finally:
        runner.cancel()
        for p in producers:
            await p.stop()
