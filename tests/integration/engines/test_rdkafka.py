"""One transaction per replica on librdkafka (sumi.engines.rdkafka), on the real broker: it
carries every partition's records and offsets at once, what comes while one commits goes in the
next, and a replica the group went on without commits nothing (KIP-447), whatever its
transactional ID."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from sumi.engines.rdkafka import (
    Fenced,
    Member,
    Partition,
    Record,
    Transactions,
    consumer_conf,
    producer_conf,
)
from tests.hostkit import committed_in, scratch_topic

pytestmark = pytest.mark.integration

PARTS = 4


class Replica:
    """A member and its transactions, and what the group gave it."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, **conf: Any) -> None:
        self.held: set[Partition] = set()
        self.revoking = asyncio.Event()  # set while a revocation is being handled
        self.drain = asyncio.Event()  # what a revocation waits for (set: returns at once)
        self.drain.set()
        loop = asyncio.get_running_loop()
        self.member = Member(consumer_conf(bootstrap, group, **conf), [topic], self.assigned, self.revoked, loop)
        self.txns = Transactions(producer_conf(bootstrap, f"{group}-{name}", 1 << 20), self.member)

    async def assigned(self, parts: list[Partition]) -> None:
        self.held |= set(parts)
        self.member.resume(parts)

    async def revoked(self, parts: list[Partition]) -> None:
        self.revoking.set()
        await self.drain.wait()
        self.held -= set(parts)
        self.revoking.clear()

    async def until_holding(self, n: int, timeout: float = 60) -> None:
        async with asyncio.timeout(timeout):
            while len(self.held) != n:
                await asyncio.sleep(0.05)


@asynccontextmanager
async def replica(bootstrap: str, topic: str, group: str, name: str, **conf: Any) -> AsyncIterator[Replica]:
    rep = Replica(bootstrap, topic, group, name, **conf)
    rep.member.start()
    await rep.txns.start()
    try:
        yield rep
    finally:
        rep.drain.set()
        await rep.txns.stop()
        await rep.member.stop()


async def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in got.items()}


async def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """What a read_committed reader finds in the topic up to its end now, sorted."""
    return sorted(m.value for m in await committed_in(bootstrap, topic, PARTS))


async def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for p in range(PARTS):
            for i in range(per_partition):
                await producer.send_and_wait(topic, f"{p}-{i}".encode(), partition=p)
    finally:
        await producer.stop()


async def test_one_transaction_carries_every_partitions_records_and_offsets(kafka_bootstrap: str) -> None:
    # WF-46: the replica's decisions and the offsets of every input partition it holds commit
    # together or not at all, in one transaction.
    async with (
        scratch_topic(kafka_bootstrap, "rd-in", PARTS) as inp,
        scratch_topic(kafka_bootstrap, "rd-out", PARTS) as out,
    ):
        await fill(kafka_bootstrap, inp, 2)
        group = f"rd-{uuid.uuid4().hex[:8]}"
        async with replica(kafka_bootstrap, inp, group, "a") as rep:
            await rep.until_holding(PARTS)
            seen: list[Any] = []
            async with asyncio.timeout(30):
                while len(seen) < 2 * PARTS:
                    seen += await rep.member.messages.get()
            records = [Record(out, m.partition(), None, b"decided " + m.value()) for m in seen]
            offsets = {(inp, m.partition()): m.offset() + 1 for m in seen}
            await rep.txns.commit(records, offsets)
            assert rep.txns.committed == 1
        assert await committed_values(kafka_bootstrap, out) == sorted(b"decided " + m.value() for m in seen)
        assert await group_offsets(kafka_bootstrap, group) == dict.fromkeys(range(PARTS), 2)


async def test_what_is_handed_in_while_one_commits_goes_in_the_next(kafka_bootstrap: str) -> None:
    # WF-46: many decisions ready at once cost a transaction or two, not one each; all commit.
    async with (
        scratch_topic(kafka_bootstrap, "rd-in", PARTS) as inp,
        scratch_topic(kafka_bootstrap, "rd-out", PARTS) as out,
    ):
        group = f"rd-{uuid.uuid4().hex[:8]}"
        async with replica(kafka_bootstrap, inp, group, "a") as rep:
            await rep.until_holding(PARTS)
            await asyncio.gather(
                *(rep.txns.commit([Record(out, i % PARTS, None, str(i).encode())], {}) for i in range(40))
            )
            assert rep.txns.committed <= 2, rep.txns.committed
        assert sorted(int(v) for v in await committed_values(kafka_bootstrap, out)) == list(range(40))


async def test_a_replica_the_group_went_on_without_commits_nothing(kafka_bootstrap: str) -> None:
    # WF-46, QC-42: a replica whose revocation never ends (a zombie: stalled, not dead) is put
    # out of the group; the survivor takes its partitions, and the zombie's next transaction,
    # under its own transactional ID, is refused and aborted: none of its records is read.
    async with (
        scratch_topic(kafka_bootstrap, "rd-in", PARTS) as inp,
        scratch_topic(kafka_bootstrap, "rd-out", PARTS) as out,
    ):
        group = f"rd-{uuid.uuid4().hex[:8]}"
        quick = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 7000}
        async with replica(kafka_bootstrap, inp, group, "a", **quick) as zombie:
            await zombie.until_holding(PARTS)
            await zombie.txns.commit([Record(out, 0, None, b"before")], {(inp, 0): 0})
            zombie.drain.clear()  # its next revocation hangs
            async with replica(kafka_bootstrap, inp, group, "b", **quick) as survivor:
                async with asyncio.timeout(60):
                    await zombie.revoking.wait()
                await survivor.until_holding(PARTS, timeout=60)
                with pytest.raises(Fenced):
                    await zombie.txns.commit([Record(out, 1, None, b"zombie")], {(inp, 1): 5})
                await survivor.txns.commit([Record(out, 1, None, b"survivor")], {(inp, 1): 1})
        got = await committed_values(kafka_bootstrap, out)
        assert got == [b"before", b"survivor"], got
        assert (await group_offsets(kafka_bootstrap, group)).get(1) == 1
