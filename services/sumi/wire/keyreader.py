"""The data keys, as a reader of the instance log that does not decide it needs them (the
workflow projection, the queue engine's Caller Bindings): the fold of the key topic, read on
demand, so that sealed documents are shown opened while their key lives and absent once a
purge has destroyed it (sumi.core.sealing).

A record and the key that seals it commit in one transaction, but the two topics' commit
markers land one after the other: a key a record names may not be readable yet when the
record already is. A key that is neither known nor known destroyed, and was made moments ago
(its ID is a ULID, so it tells when), is waited for a little; an older one is gone (its
tombstone compacted away), and what it sealed reads as absent.
"""

import asyncio
import time
from collections import OrderedDict
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from ulid import ULID

from sumi.core import sealing
from sumi.core.config import Settings
from sumi.wire import kafka

FRESH_MS = 30_000  # a key made this recently may still be on its way
WAIT_S = 10.0  # at most this long per batch
DROPPED = 100_000  # destroyed key IDs remembered (so a fresh one is not waited for)


class KeyReader:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ring = sealing.KeyRing()
        self.dropped: OrderedDict[str, None] = OrderedDict()
        self.consumer: AIOKafkaConsumer | None = None
        self.tps: list[TopicPartition] = []
        self.reading = asyncio.Lock()  # callers that ask at the same time share one consumer

    async def open(self, records: list[Any]) -> list[Any]:
        """The records with their documents opened by the keys alive now."""
        wanted = set().union(*(sealing.missing(rec, self.ring) for rec in records))
        if wanted:
            await self._catch_up(wanted)
        return [sealing.open_record(rec, self.ring) for rec in records]

    async def open_texts(self, *texts: str | None) -> list[str | None]:
        """Documents as the log holds them, opened the same way (None stays None)."""
        wanted = {sealing.key_id_of(t) for t in texts if t is not None and sealing.is_sealed(t)}
        if wanted - self.ring.keys.keys():
            await self._catch_up(wanted)
        return [self.ring.open(t) for t in texts]

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None  # a projection run again after an outage opens a fresh one

    async def _catch_up(self, wanted: set[str]) -> None:
        deadline = time.monotonic() + WAIT_S
        # The key's commit marker usually lands a millisecond after the record's: look again
        # soon, then less often (a fixed 50 ms here had been most of a create's answer time).
        delay = 0.001
        while True:
            async with self.reading:
                await self._read_to_end()
            wanted = {k for k in wanted if k not in self.ring.keys and k not in self.dropped}
            if not any(_fresh(k) for k in wanted) or time.monotonic() > deadline:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _read_to_end(self) -> None:
        if self.consumer is None:
            self.consumer = kafka.new_consumer(self.settings)
            await self.consumer.start()
            self.tps = await kafka.partitions(self.consumer, self.settings.topic("workflow.keys"))
            self.consumer.assign(self.tps)
            await self.consumer.seek_to_beginning(*self.tps)
        ends = await self.consumer.end_offsets(self.tps)
        # Fetching only while a batch asks for keys: no long poll sits at the end meanwhile, and
        # an idle projection does not ask the broker for keys at all.
        self.consumer.resume(*self.tps)
        try:
            async for batch in kafka.batches(self.consumer, ends):
                for messages in batch.values():
                    for m in messages:
                        self._fold(m)
        finally:
            self.consumer.pause(*self.tps)

    def _fold(self, m: Any) -> None:
        if m.key is None:
            return
        key_id = m.key.decode()
        record = None if m.value is None else kafka.decode(m.value)
        if isinstance(record, kafka.Rejected):
            return
        self.ring.fold(key_id, record)
        if record is None:
            self.dropped[key_id] = None
            if len(self.dropped) > DROPPED:
                self.dropped.popitem(last=False)


def _fresh(key_id: str) -> bool:
    try:
        made = ULID.from_str(key_id.removeprefix("dk_").upper()).milliseconds
    except ValueError:
        return False
    return time.time() * 1000 - made < FRESH_MS
