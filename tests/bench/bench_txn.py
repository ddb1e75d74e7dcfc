"""What a Kafka transaction costs per replica step: aiokafka or librdkafka. Run: python -m tests.bench.bench_txn

An engine replica decides records for each of the input partitions it holds, then commits the
records and the group's next offsets in Kafka transactions (sumi.wire.fencing). The shapes,
each on its own consumer group over an 8-partition input topic, records to an 8-partition output
topic, N records per partition per step (N = 1, 10, 100):

  aiokafka per-partition  today's shape: one transactional producer per partition, a step is 8
                          transactions (N records + that partition's offset each), side by side
                          (asyncio.gather, as sumi.engines.shell commits them), or one after another
  aiokafka one producer   one transaction per step: 8 N records and all 8 offsets; fenced by
                          nothing but its transactional ID (aiokafka speaks TxnOffsetCommit v0)
  librdkafka one producer one transaction per step, send_offsets_to_transaction with the
                          consumer's group metadata (KIP-447: generation fencing), plain (the
                          calls block the thread) and through confluent_kafka.aio

Per shape: steps and transactions per second, wall ms per transaction (p50/p99), the broker
JVM's CPU ms per transaction and per record (from /proc/<pid>/stat, its idle rate taken off),
this client's CPU ms per record (every thread of the process: librdkafka's own threads too).
Last, the fencing check of the librdkafka shape: a new group generation, and a new producer of
the same transactional ID, each make the old producer's commit fail.

Uses SUMI_KAFKA_BOOTSTRAP when set (the broker's JVM must run on this machine to be measured),
else starts its own broker. BENCH_TXN_SECONDS: measured seconds per shape and size (default 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck
import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka.aio import AIOProducer

from tests.hostkit import scratch_topic

PARTITIONS = 8
SIZES = (1, 10, 100)
SECONDS = float(os.environ.get("BENCH_TXN_SECONDS", "5"))
WARMUP = 5  # steps: coordinator look-ups and the first AddPartitionsToTxn kept out of the figures
VALUE = b"x" * 200
TICK = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def broker() -> Iterator[str]:
    from sumi.infra import KafkaBroker

    if bootstrap := os.environ.get("SUMI_KAFKA_BOOTSTRAP"):
        yield bootstrap
        return
    with KafkaBroker() as kafka:
        yield kafka.bootstrap


def broker_pid(bootstrap: str) -> int | None:
    """The JVM listening on the bootstrap port (the broker a watchdog started, or one of this machine's)."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] != "java" or "kafka.Kafka" not in (p.info["cmdline"] or []):
            continue
        with contextlib.suppress(psutil.Error):
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in p.net_connections("tcp")):
                return p.pid
    return None


def cpu_of(pid: int | None) -> float:
    """User + system CPU seconds of a process, every thread (fields 14 and 15 of /proc/<pid>/stat)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Figures:
    shape: str
    n: int  # records per partition per step
    txns_per_step: int
    step_s: list[float] = field(default_factory=list)
    txn_s: list[float] = field(default_factory=list)
    wall: float = 0.0
    broker_cpu: float = 0.0
    client_cpu: float = 0.0

    def row(self) -> dict[str, Any]:
        steps, txns = len(self.step_s), len(self.txn_s)
        records = steps * PARTITIONS * self.n
        q = statistics.quantiles(self.txn_s, n=100) if txns > 1 else [self.txn_s[0]] * 99
        return {
            "shape": self.shape,
            "records/partition/step": self.n,
            "records/txn": PARTITIONS * self.n // self.txns_per_step,
            "steps/s": round(steps / self.wall, 1),
            "txns/s": round(txns / self.wall, 1),
            "records/s": round(records / self.wall),
            "txn ms p50": round(1000 * q[49], 2),
            "txn ms p99": round(1000 * q[98], 2),
            "step ms p50": round(1000 * statistics.median(self.step_s), 2),
            "broker cpu ms/step": round(1000 * self.broker_cpu / steps, 2),
            "broker cpu ms/txn": round(1000 * self.broker_cpu / txns, 3),
            "broker cpu ms/record": round(1000 * self.broker_cpu / records, 4),
            "client cpu ms/record": round(1000 * self.client_cpu / records, 4),
        }


class Meter:
    """CPU of the broker and of this process over a run; the broker's idle rate taken off."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.idle_rate = 0.0

    def settle(self, seconds: float = 3.0) -> None:
        b0, t0 = cpu_of(self.pid), time.perf_counter()
        time.sleep(seconds)
        self.idle_rate = (cpu_of(self.pid) - b0) / (time.perf_counter() - t0)

    @contextlib.contextmanager
    def measure(self, fig: Figures) -> Iterator[None]:
        b0, c0, t0 = cpu_of(self.pid), time.process_time(), time.perf_counter()
        yield
        fig.wall = time.perf_counter() - t0
        fig.client_cpu = time.process_time() - c0
        fig.broker_cpu = max(0.0, cpu_of(self.pid) - b0 - self.idle_rate * fig.wall)


async def run_async(meter: Meter, fig: Figures, step: Callable[[int, Figures], Awaitable[None]]) -> Figures:
    for i in range(WARMUP):
        await step(i, Figures(fig.shape, fig.n, fig.txns_per_step))
    i = WARMUP
    with meter.measure(fig):
        deadline = time.perf_counter() + SECONDS
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await step(i, fig)
            fig.step_s.append(time.perf_counter() - t0)
            i += 1
    return fig


def run_sync(meter: Meter, fig: Figures, step: Callable[[int, Figures], None]) -> Figures:
    for i in range(WARMUP):
        step(i, Figures(fig.shape, fig.n, fig.txns_per_step))
    i = WARMUP
    with meter.measure(fig):
        deadline = time.perf_counter() + SECONDS
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            step(i, fig)
            fig.step_s.append(time.perf_counter() - t0)
            i += 1
    return fig


# ---- aiokafka ------------------------------------------------------------------------------


def aio_producer(bootstrap: str, tid: str) -> AIOKafkaProducer:
    # as sumi.wire.kafka.new_producer makes an engine's (linger_ms=0 as the engines pass)
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=tid, enable_idempotence=True, acks="all", linger_ms=0
    )


@contextlib.asynccontextmanager
async def aio_member(bootstrap: str, topic: str, group: str) -> AsyncIterator[None]:
    """A consumer of the group holding the input partitions, as an engine replica has one."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=200)

    async def keep() -> None:
        while True:
            await consumer.getmany(timeout_ms=1000)

    task = asyncio.create_task(keep())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()


@dataclass
class AioShape:
    """One of the aiokafka shapes: its producers (one per partition, or one) and how a step commits."""

    name: str
    producers: list[AIOKafkaProducer]
    inp: str
    out: str
    group: str

    async def txn(self, producer: AIOKafkaProducer, parts: range, step: int, fig: Figures) -> None:
        t0 = time.perf_counter()
        async with producer.transaction():
            for p in parts:
                for _ in range(fig.n):
                    await producer.send(self.out, VALUE, key=b"k", partition=p)
            offsets = {TopicPartition(self.inp, p): step + 1 for p in parts}
            await producer.send_offsets_to_transaction(offsets, self.group)
        fig.txn_s.append(time.perf_counter() - t0)

    async def step(self, i: int, fig: Figures) -> None:
        if len(self.producers) == 1:
            await self.txn(self.producers[0], range(PARTITIONS), i, fig)
        elif "gather" in self.name:
            await asyncio.gather(*(self.txn(pr, range(p, p + 1), i, fig) for p, pr in enumerate(self.producers)))
        else:
            for p, pr in enumerate(self.producers):
                await self.txn(pr, range(p, p + 1), i, fig)


async def aiokafka_shapes(bootstrap: str, meter: Meter, inp: str, out: str) -> list[Figures]:
    figs: list[Figures] = []
    run = uuid.uuid4().hex[:6]
    for name in ("aiokafka per-partition, gather", "aiokafka per-partition, serial", "aiokafka one producer"):
        group = f"bench-{run}-{name.replace(' ', '').replace(',', '-')}"
        tids = [f"{group}-p{p}" for p in range(PARTITIONS)] if "per-partition" in name else [f"{group}-r0"]
        shape = AioShape(name, [aio_producer(bootstrap, t) for t in tids], inp, out, group)
        async with aio_member(bootstrap, inp, group):
            for producer in shape.producers:
                await producer.start()
            try:
                for n in SIZES:
                    fig = await run_async(meter, Figures(name, n, len(tids)), shape.step)
                    print(json.dumps(fig.row()), flush=True)
                    figs.append(fig)
            finally:
                for producer in shape.producers:
                    await producer.stop()
    return figs


# ---- librdkafka ----------------------------------------------------------------------------


def rd_conf(bootstrap: str, tid: str, backoff: bool = True) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "acks": "all", "linger.ms": 0}
    # Until the coordinator has written the last transaction's markers, the next one's
    # AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS and retried after retry.backoff.ms:
    # librdkafka's default (100) puts ~100 ms on every back-to-back transaction.
    return {**conf, "retry.backoff.ms": 5} if backoff else conf


class RdMember:
    """A librdkafka consumer of the group, joined, polled by a thread of its own (as an engine's
    consume loop would poll it): its group metadata is what KIP-447 fences by."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        # Read on the polling thread: asked from another one while a poll runs, librdkafka's
        # consumer_group_metadata() waits for ever.
        while not self.stopping.is_set():
            self.consumer.poll(0.2)
            self.meta = self.consumer.consumer_group_metadata()

    def joined(self, timeout: float = 60) -> RdMember:
        deadline = time.monotonic() + timeout
        while not self.consumer.assignment():
            assert time.monotonic() < deadline, "the librdkafka consumer never got its partitions"
            self.consumer.poll(0.2)
        self.meta = self.consumer.consumer_group_metadata()
        self.thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        self.consumer.close()


def rd_offsets(inp: str, step: int) -> list[ck.TopicPartition]:
    return [ck.TopicPartition(inp, p, step + 1) for p in range(PARTITIONS)]


def rd_shapes(bootstrap: str, meter: Meter, inp: str, out: str) -> list[Figures]:
    figs: list[Figures] = []
    run = uuid.uuid4().hex[:6]
    for shape in (
        "librdkafka one producer, plain, default backoff",
        "librdkafka one producer, plain",
        "librdkafka one producer, aio",
    ):
        group = f"bench-{run}-{shape.replace(' ', '').replace(',', '-')}"
        member = RdMember(bootstrap, inp, group).joined()
        try:
            if "plain" in shape:
                figs += rd_plain(bootstrap, meter, member, inp, out, group, shape)
            else:
                figs += asyncio.run(rd_aio(bootstrap, meter, member, inp, out, group, shape))
        finally:
            member.close()
    return figs


def rd_plain(
    bootstrap: str, meter: Meter, member: RdMember, inp: str, out: str, group: str, shape: str
) -> list[Figures]:
    producer = ck.Producer(rd_conf(bootstrap, f"{group}-r0", backoff="default" not in shape))
    producer.init_transactions(30)
    figs = []
    for n in SIZES:

        def step(i: int, fig: Figures) -> None:
            t0 = time.perf_counter()
            producer.begin_transaction()
            for p in range(PARTITIONS):
                for _ in range(fig.n):
                    producer.produce(out, VALUE, key=b"k", partition=p)
            producer.send_offsets_to_transaction(rd_offsets(inp, i), member.meta)
            producer.commit_transaction()
            fig.txn_s.append(time.perf_counter() - t0)

        fig = run_sync(meter, Figures(shape, n, 1), step)
        print(json.dumps(fig.row()), flush=True)
        figs.append(fig)
    producer.flush()
    return figs


async def rd_aio(
    bootstrap: str, meter: Meter, member: RdMember, inp: str, out: str, group: str, shape: str
) -> list[Figures]:
    producer = AIOProducer(rd_conf(bootstrap, f"{group}-r0"))
    await producer.init_transactions(30)
    figs = []
    try:
        for n in SIZES:

            async def step(i: int, fig: Figures) -> None:
                t0 = time.perf_counter()
                await producer.begin_transaction()
                for p in range(PARTITIONS):
                    for _ in range(fig.n):
                        await producer.produce(out, VALUE, key=b"k", partition=p)
                meta = member.meta
                await producer.send_offsets_to_transaction(rd_offsets(inp, i), meta)
                await producer.commit_transaction()
                fig.txn_s.append(time.perf_counter() - t0)

            fig = await run_async(meter, Figures(shape, n, 1), step)
            print(json.dumps(fig.row()), flush=True)
            figs.append(fig)
    finally:
        await producer.close()
    return figs


def fenced(action: Callable[[], None]) -> str:
    try:
        action()
    except ck.KafkaException as exc:
        return f"yes ({exc.args[0].name()})"
    return "no"


def fencing(bootstrap: str, inp: str, out: str) -> dict[str, str]:
    """The two ways KIP-447 and a transactional ID fence a replica's producer in the librdkafka shape."""
    group = f"bench-fence-{uuid.uuid4().hex[:6]}"
    old_member = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    old_member.subscribe([inp])
    while not old_member.assignment():
        old_member.poll(0.2)
    stale = old_member.consumer_group_metadata()  # what the old replica decided under
    old = ck.Producer(rd_conf(bootstrap, f"{group}-replica-a"))
    old.init_transactions(30)

    # A new generation: another replica joins, the group rebalances (the old member rejoins too,
    # as a paused-then-resumed replica would); the old producer commits what it decided before.
    new_member = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    new_member.subscribe([inp])
    deadline = time.monotonic() + 60
    while not (new_member.assignment() and len(old_member.assignment()) < PARTITIONS):
        assert time.monotonic() < deadline, "the group never rebalanced"
        new_member.poll(0.1)
        old_member.poll(0.1)

    def stale_commit() -> None:
        old.begin_transaction()
        old.produce(out, VALUE, partition=0)
        old.send_offsets_to_transaction(rd_offsets(inp, 0), stale)
        old.commit_transaction()

    by_generation = fenced(stale_commit)
    with contextlib.suppress(ck.KafkaException):
        old.abort_transaction()

    # The same replica again (a restart under its name): its transactional ID fences the old one.
    current = old_member.consumer_group_metadata()
    again = ck.Producer(rd_conf(bootstrap, f"{group}-replica-a"))
    old.begin_transaction()
    old.produce(out, VALUE, partition=0)
    again.init_transactions(30)

    def zombie_commit() -> None:
        old.send_offsets_to_transaction(rd_offsets(inp, 1), current)
        old.commit_transaction()

    by_id = fenced(zombie_commit)
    for c in (old_member, new_member):
        c.close()
    return {"fenced by a new group generation": by_generation, "fenced by the same transactional ID": by_id}


async def topics(bootstrap: str, run: Callable[[str, str], Any]) -> Any:
    async with scratch_topic(bootstrap, "bench-txn-in", PARTITIONS) as inp:
        async with scratch_topic(bootstrap, "bench-txn-out", PARTITIONS) as out:
            return await run(inp, out)


def main() -> None:
    with broker() as bootstrap:
        meter = Meter(broker_pid(bootstrap))
        if meter.pid is None:
            print(json.dumps({"broker cpu": "not measured: no broker JVM of this machine on that port"}))
        meter.settle()
        print(json.dumps({"broker idle cpu ms/s": round(1000 * meter.idle_rate, 1), "seconds per run": SECONDS}))

        async def everything(inp: str, out: str) -> tuple[list[Figures], dict[str, str]]:
            figs = await aiokafka_shapes(bootstrap, meter, inp, out)
            loop = asyncio.get_running_loop()
            # librdkafka's runs own a thread each (the aio one its own event loop)
            figs += await loop.run_in_executor(None, rd_shapes, bootstrap, meter, inp, out)
            return figs, await loop.run_in_executor(None, fencing, bootstrap, inp, out)

        figs, fence = asyncio.run(topics(bootstrap, everything))
    print(json.dumps({"fencing (librdkafka, KIP-447)": fence}), flush=True)
    print(table([f.row() for f in figs]), flush=True)


def table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = [" | ".join(c.ljust(width[c]) for c in cols), "-|-".join("-" * width[c] for c in cols)]
    lines += [" | ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
