"""What a Kafka transaction costs per replica step, by its shape. Run: python -m tests.bench.bench_txn

An engine replica decides records for each of the input partitions it holds, then commits the
records and the group's next offsets in Kafka transactions (sumi.wire.fencing). The shapes,
each on its own consumer group over an 8-partition input topic, records to an 8-partition output
topic, N records per partition per step (N = 1, 10, 100):

  aiokafka per-partition  today's shape: one transactional producer per partition, a step is 8
                          transactions (N records + that partition's offset each), side by side
                          (asyncio.gather, as sumi.engines.shell commits them), or one after another
  aiokafka one producer   one transaction per step: 8 N records and all 8 offsets; fenced by
                          nothing but its transactional ID (aiokafka speaks TxnOffsetCommit v0)

Per shape: steps and transactions per second, wall ms per transaction (p50/p99), the broker
JVM's CPU ms per transaction and per record (from /proc/<pid>/stat, its idle rate taken off),
this client's CPU ms per record. (The librdkafka shapes this bench once compared, and their
figures, are in docs/decisions.md, "One transaction per replica".)

Uses SUMI_KAFKA_BOOTSTRAP when set (the broker's JVM must run on this machine to be measured),
else starts its own broker. BENCH_TXN_SECONDS: measured seconds per shape and size (default 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

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

        async def everything(inp: str, out: str) -> list[Figures]:
            return await aiokafka_shapes(bootstrap, meter, inp, out)

        figs = asyncio.run(topics(bootstrap, everything))
    print(table([f.row() for f in figs]), flush=True)


def table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = [" | ".join(c.ljust(width[c]) for c in cols), "-|-".join("-" * width[c] for c in cols)]
    lines += [" | ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
