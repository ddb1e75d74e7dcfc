"""An engine's snapshots: the fold of each partition of its log, on a compacted topic.

`<prefix>.<engine>.snapshots` has the log's partition count; the snapshot of log partition p
lies in partition p. A snapshot is its chunks (the engine's own record type, keys
`p<p>/<snapshotId>/<i>`), then a `SnapshotHeader` (key `p<p>`) naming them and the log offset
it covers, then tombstones for the chunks of the snapshot before it. Compaction keeps the
latest header and the chunks nobody tombstoned, so the partition stays about one snapshot big.

Why it needs no transaction: a snapshot is the fold of a log prefix, which never changes, so
it is right whoever writes it and whenever; the engine takes it only at a moment its state is
that fold (sumi.engines.checkpoints). A writer that dies half-way leaves chunks and no header:
the header before them still names a whole snapshot, and the next start tombstones the
strays it finds after that header. Whatever cannot be read (a missing chunk, an unknown
schema) means no snapshot: the engine folds the partition from its start, as without one.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core.config import Settings
from sumi.core.records import Record, SnapshotHeader
from sumi.wire import codec, kafka
from sumi.wire.codec import Undecodable

log = logging.getLogger(__name__)
_IN_FLIGHT = 8  # chunks sent before their acks are awaited (each up to 512 KiB)


QUIET_SHARE = 64  # a quiet partition is snapshotted once its log grew by 1/64 of what it holds


def snapshot_due(grown: int, held: int, quiet_for: float, settings: Settings) -> bool:
    """Whether a partition whose log grew by `grown` records since its last snapshot (which
    held `held` items), and which has folded nothing for `quiet_for` seconds, is due one.

    Busy: once `snapshot_records`, and half as many as the last snapshot held, were folded, so
    the cost of writing snapshots stays proportional to the log's growth however big the state:
    a start then folds at most half the state's worth of log. Quiet (nothing folded for
    `snapshot_quiet_seconds`): once it grew by a 64th of that, so an engine restarted after its
    load ended folds next to nothing, and a trickle does not rewrite a big state each time."""
    if grown >= max(settings.snapshot_records, held // 2):
        return True
    return quiet_for >= settings.snapshot_quiet_seconds and grown >= max(1, held // QUIET_SHARE)


def header_key(partition: int) -> bytes:
    return f"p{partition}".encode()


async def _first_offset(sent: list["asyncio.Future[Any]"], first: int) -> int:
    """Await the sends in flight (emptying `sent`); the offset of the snapshot's first chunk."""
    for fut in sent:
        meta = await fut
        if first < 0:
            first = meta.offset
    sent.clear()
    return first


def chunk_key(partition: int, snapshot_id: str, index: int) -> bytes:
    return f"p{partition}/{snapshot_id}/{index}".encode()


class Snapshot:
    def __init__(self, header: SnapshotHeader, chunks: list[Record]) -> None:
        self.header = header
        self.chunks = chunks


class Snapshots:
    def __init__(self, settings: Settings, engine: str) -> None:
        self.engine = engine
        self.topic = settings.topic(f"{engine}.snapshots")
        self.settings = settings
        self.producer: AIOKafkaProducer | None = None
        self.reader: AIOKafkaConsumer | None = None
        self._read_lock = asyncio.Lock()
        # Per partition: the chunk keys the next header supersedes (tombstoned after it).
        self.superseded: dict[int, list[bytes]] = {}
        self.writing: dict[int, asyncio.Task[None]] = {}  # partition -> its snapshot being written
        self.held: dict[int, int] = {}  # partition -> items its latest snapshot held

    def due(self, partition: int, grown: int, quiet_for: float = 0.0) -> bool:
        """Whether a partition whose log grew by `grown` records since its latest snapshot, and
        which folded nothing for `quiet_for` seconds, is due one (`snapshot_due`); never while
        one of it is being written."""
        if partition in self.writing:
            return False
        return snapshot_due(grown, self.held.get(partition, 0), quiet_for, self.settings)

    def restored(self, partition: int, entries: int) -> None:
        self.held[partition] = entries

    async def start(self) -> None:
        self.producer = kafka.new_producer(self.settings, linger_ms=5)
        self.reader = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        await self.producer.start()
        await self.reader.start()

    async def stop(self) -> None:
        await self.stop_writing()
        for client in (self.reader, self.producer):
            if client is not None:
                await client.stop()

    # ---- reading -------------------------------------------------------------------------------

    async def latest(self, partition: int) -> Snapshot | None:
        """The latest whole snapshot of the partition, or None (then fold from the start)."""
        assert self.reader is not None
        async with self._read_lock:
            tp = TopicPartition(self.topic, partition)
            self.reader.assign([tp])
            begin = (await self.reader.beginning_offsets([tp]))[tp]
            end = (await self.reader.end_offsets([tp]))[tp]
            found = await self._last_header(tp, begin, end)
            if found is None:
                return None
            header, at = found
            records = await self._read(tp, max(begin, header.firstChunkOffset), end)
        prefix = f"p{partition}/".encode()
        mine = f"p{partition}/{header.snapshotId}/".encode()
        chunks: dict[int, Record] = {}
        strays: list[bytes] = []
        for m in records:
            if m.key is None or not m.key.startswith(prefix) or m.value is None:
                continue
            if m.key.startswith(mine) and m.offset < at:
                try:
                    chunks[int(m.key[len(mine) :])] = codec.decode(m.value)
                except (Undecodable, ValueError) as exc:
                    log.warning("%s snapshot %s: chunk %s unreadable: %s", self.engine, header.snapshotId, m.key, exc)
                    return None
            elif m.offset > at:
                strays.append(m.key)  # a snapshot begun after this header and never finished
        if sorted(chunks) != list(range(header.chunks)):
            log.warning(
                "%s snapshot %s of partition %d has %d of %d chunks: folding from the start",
                self.engine,
                header.snapshotId,
                partition,
                len(chunks),
                header.chunks,
            )
            return None
        self.superseded[partition] = [chunk_key(partition, header.snapshotId, i) for i in range(header.chunks)] + strays
        return Snapshot(header, [chunks[i] for i in range(header.chunks)])

    async def _last_header(self, tp: TopicPartition, begin: int, end: int) -> tuple[SnapshotHeader, int] | None:
        # The header is the last record of a snapshot but for the tombstones after it: read
        # backwards in growing windows until one holds a header.
        hi, window = end, 64
        while hi > begin:
            lo = max(begin, hi - window)
            best: tuple[SnapshotHeader, int] | None = None
            for m in await self._read(tp, lo, hi):
                if m.key == header_key(tp.partition) and m.value is not None:
                    try:
                        rec = codec.decode(m.value)
                    except Undecodable as exc:
                        log.warning("%s snapshot header at %d unreadable: %s", self.engine, m.offset, exc)
                        continue
                    if isinstance(rec, SnapshotHeader):
                        best = (rec, m.offset)
            if best is not None:
                return best
            hi, window = lo, window * 4
        return None

    async def _read(self, tp: TopicPartition, lo: int, hi: int) -> list[Any]:
        assert self.reader is not None
        out: list[Any] = []
        if lo >= hi:
            return out
        self.reader.seek(tp, lo)
        while await self.reader.position(tp) < hi:
            batch = await self.reader.getmany(tp, timeout_ms=1000, max_records=5000)
            out += [m for m in batch.get(tp, []) if m.offset < hi]
        return out

    # ---- writing -------------------------------------------------------------------------------

    async def write(
        self, partition: int, covers: int, snapshot_id: str, chunks: Iterable[Record], entries: int
    ) -> SnapshotHeader:
        """Chunks, then the header naming them, then tombstones for the snapshot they supersede.
        The chunks are encoded as they are sent, a few in flight at a time: a big snapshot is
        never in RAM whole."""
        assert self.producer is not None
        first, count = -1, 0
        sent: list[asyncio.Future[Any]] = []
        for i, c in enumerate(chunks):
            sent.append(
                await self.producer.send(
                    self.topic, codec.encode(c), key=chunk_key(partition, snapshot_id, i), partition=partition
                )
            )
            count = i + 1
            if len(sent) >= _IN_FLIGHT:
                first = await _first_offset(sent, first)
        first = await _first_offset(sent, first)
        header = SnapshotHeader(
            self.engine, partition, snapshot_id, covers, count, first, entries, int(time.time() * 1000)
        )
        await (
            await self.producer.send(self.topic, codec.encode(header), key=header_key(partition), partition=partition)
        )
        old = self.superseded.get(partition, [])
        for key in old:
            await self.producer.send(self.topic, None, key=key, partition=partition)
        await self.producer.flush()
        self.superseded[partition] = [chunk_key(partition, snapshot_id, i) for i in range(count)]
        return header

    def write_soon(self, partition: int, covers: int, snapshot_id: str, chunks: Iterable[Record], entries: int) -> None:
        """`write` in a task of its own (`writing` holds it until it ends); a failure is logged:
        the next snapshot is due once enough is folded again."""

        async def write() -> None:
            try:
                header = await self.write(partition, covers, snapshot_id, chunks, entries)
                log.info("%s: partition %d snapshot at %d (%d chunks)", self.engine, partition, covers, header.chunks)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: writing the snapshot of partition %d failed", self.engine, partition)

        self.held[partition] = entries
        task = asyncio.create_task(write())
        self.writing[partition] = task
        task.add_done_callback(lambda _: self.writing.pop(partition, None))

    async def stop_writing(self) -> None:
        tasks = list(self.writing.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
