"""`kafka.read_at` against a real broker: values read back by (partition, offset), as the queue
engine reads the bodies its budget left in the log (docs/decisions.md, the queue engine's memory)."""

from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from sumi.wire import kafka
from tests.hostkit import scratch_topic

pytestmark = pytest.mark.integration

Written = dict[tuple[int, int], bytes]


async def write(bootstrap: str, topic: str) -> Written:
    """Partition 0 long (a gap well past `gap` between wanted offsets), 1 short, 2 empty, all in
    transactions as the engines write (each commit marker takes an offset), one aborted."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-w", enable_idempotence=True)
    await producer.start()
    written: Written = {}
    try:
        for txn in range(40):
            async with producer.transaction():
                for i in range(30 if txn % 4 else 3):
                    value = f"p0-{txn}-{i}".encode() * (1 + i % 5)
                    meta = await (await producer.send(topic, value, partition=0))
                    written[(0, meta.offset)] = value
                meta = await (await producer.send(topic, f"p1-{txn}".encode(), partition=1))
                written[(1, meta.offset)] = f"p1-{txn}".encode()
        await producer.begin_transaction()
        await (await producer.send(topic, b"aborted", partition=0))
        await producer.abort_transaction()
        async with producer.transaction():
            meta = await (await producer.send(topic, b"last", partition=0))
            written[(0, meta.offset)] = b"last"
    finally:
        await producer.stop()
    return written


@pytest.fixture
async def topic(kafka_bootstrap: str) -> AsyncIterator[tuple[str, Written]]:
    async with scratch_topic(kafka_bootstrap, "read-at", 3) as name:
        yield name, await write(kafka_bootstrap, name)


@pytest.fixture
async def reader(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    yield consumer
    await consumer.stop()


async def test_scattered_offsets_across_partitions_and_gaps(
    topic: tuple[str, Written], reader: AIOKafkaConsumer
) -> None:
    # QC-22: every body read back is the original bytes, wherever in the log it lies
    name, written = topic
    p0 = sorted(o for p, o in written if p == 0)
    assert p0[-1] - p0[0] > 500  # a read there seeks past gaps of more than `gap`
    wanted = [(0, p0[0]), (0, p0[1]), (0, p0[7]), (0, p0[len(p0) // 2]), (0, p0[-2]), (0, p0[-1])]
    wanted += [(1, o) for p, o in sorted(written) if p == 1][::7]
    got = await kafka.read_at(reader, name, reversed(wanted), gap=10)
    assert got == {at: written[at] for at in wanted}


async def test_offsets_that_hold_no_record_are_left_out(topic: tuple[str, Written], reader: AIOKafkaConsumer) -> None:
    # QC-22: a commit marker or an aborted record is no value; the offsets after it still are
    name, written = topic
    p0 = sorted(o for p, o in written if p == 0)
    marker = next(o for o in range(p0[0], p0[-1]) if o not in set(p0))  # a marker or the aborted record
    got = await kafka.read_at(reader, name, [(0, marker), (0, marker + 1), (0, p0[-1])])
    assert got == {(0, marker + 1): written[(0, marker + 1)], (0, p0[-1]): b"last"}


async def test_one_reader_serves_read_after_read(topic: tuple[str, Written], reader: AIOKafkaConsumer) -> None:
    # QC-24: the engine reads every batch's bodies through one consumer, back and forth in the log
    name, written = topic
    ats = sorted(written)
    for at in [ats[-1], ats[0], ats[len(ats) // 3], ats[0], ats[-1]]:
        assert await kafka.read_at(reader, name, [at]) == {at: written[at]}


async def test_an_offset_past_the_end_raises_after_its_empty_polls(
    topic: tuple[str, Written], reader: AIOKafkaConsumer
) -> None:
    # QC-24: a body that cannot be read fails its batch (redelivered), never an empty body
    name, written = topic
    end = max(o for p, o in written if p == 1) + 10
    with pytest.raises(RuntimeError, match="could not be read"):
        await kafka.read_at(reader, name, [(1, end)], polls=2)
    with pytest.raises(RuntimeError, match="could not be read"):
        await kafka.read_at(reader, name, [(2, 0)], polls=2)  # an empty partition
