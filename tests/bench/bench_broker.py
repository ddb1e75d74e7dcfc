"""The embedded broker's JVM settings, measured in steady state. Run: python -m tests.bench.bench_broker

Each variant is a fresh single-node broker (`sumi.infra.KafkaBroker` with other JVM options)
driven the way an engine drives it: one transactional producer commits one record and its
consumer group's offset per transaction (aiokafka, as `sumi.wire.fencing` does today), one
transaction after another. Per variant:

  start s        launch to the port answering, and to the first transaction committed
  idle %         the JVM's CPU at rest after the load, % of one core
  warm ms/txn    broker CPU per transaction over the first seconds (the JIT still compiling)
  steady ms/txn  broker CPU per transaction once warmed (BENCH_BROKER_WARMUP s), and the
                 transaction's wall time p50/p99 then
  rss MiB        the JVM's resident memory at the end

Variants run one after another, in rounds (BENCH_BROKER_ROUNDS, default 1) so a drift of the
machine shows as a spread. BENCH_BROKER_VARIANTS picks some by name (comma-separated).
A raw transaction's floor is the steady figure itself: nothing but the broker and this client.
About 70 s a variant with the defaults (warmup 30 s, measured 20 s, idle 8 s).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psutil
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sumi.infra import BROKER_JVM, KafkaBroker
from tests.bench.bench_txn import aio_member, aio_producer, broker_pid, cpu_of

HEAP = ("-Xms256m", "-Xmx768m")
VARIANTS: dict[str, tuple[str, ...]] = {
    "c1 serial (today)": BROKER_JVM,
    "c2 serial": (*HEAP, "-XX:+UseSerialGC"),
    "c2 parallel": (*HEAP, "-XX:+UseParallelGC"),
    "c2 g1": (*HEAP, "-XX:+UseG1GC"),
    "c1 serial 128m": ("-Xms128m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"),
    "c1 serial 8+3 threads": BROKER_JVM,
}
# Broker settings beside the JVM's, by variant (the rest run with sumi's own, BROKER_THREADS).
PROPERTIES: dict[str, dict[str, str]] = {
    "c1 serial 8+3 threads": {"num.io.threads": "8", "num.network.threads": "3"},
}
WARMUP = float(os.environ.get("BENCH_BROKER_WARMUP", "30"))
MEASURE = float(os.environ.get("BENCH_BROKER_SECONDS", "20"))
IDLE = float(os.environ.get("BENCH_BROKER_IDLE", "8"))
ROUNDS = int(os.environ.get("BENCH_BROKER_ROUNDS", "1"))
WARM = 5.0  # seconds at the start counted as "warm": the JIT's first cost
VALUE = b"x" * 200


@dataclass
class Load:
    txns: int = 0
    cpu: float = 0.0
    wall: float = 0.0
    times: list[float] | None = None

    def ms_per_txn(self) -> float:
        return 1000 * self.cpu / max(1, self.txns)


async def _transactions(bootstrap: str, pid: int, seconds: float, keep_times: bool) -> Load:
    """One record and the group's offset per transaction, back to back, for `seconds`."""
    topic, group = f"b-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1), NewTopic(topic + "-out", 1, 1)])
    finally:
        await admin.close()
    producer = aio_producer(bootstrap, f"t-{uuid.uuid4().hex[:8]}")
    await producer.start()
    load = Load(times=[] if keep_times else None)
    try:
        async with aio_member(bootstrap, topic, group):
            tp, n = TopicPartition(topic, 0), 0
            c0, t0 = cpu_of(pid), time.perf_counter()
            while n == 0 or time.perf_counter() - t0 < seconds:
                s = time.perf_counter()
                async with producer.transaction():
                    await producer.send(topic + "-out", VALUE)
                    await producer.send_offsets_to_transaction({tp: n + 1}, group)
                if load.times is not None:
                    load.times.append(time.perf_counter() - s)
                n += 1
            load.txns, load.wall, load.cpu = n, time.perf_counter() - t0, cpu_of(pid) - c0
    finally:
        await producer.stop()
    return load


async def _variant(name: str, jvm: tuple[str, ...]) -> dict[str, Any]:
    broker = KafkaBroker(jvm=jvm, properties=PROPERTIES.get(name))
    t0 = time.perf_counter()
    broker.launch()
    try:
        broker.wait_started()
        port_s = time.perf_counter() - t0
        pid = broker_pid(broker.bootstrap)
        assert pid is not None, "the broker's JVM was not found"
        first = await _transactions(broker.bootstrap, pid, 0.0, keep_times=False)  # one transaction
        ready_s = time.perf_counter() - t0
        warm = await _transactions(broker.bootstrap, pid, WARM, keep_times=False)
        await _transactions(broker.bootstrap, pid, max(0.0, WARMUP - WARM), keep_times=False)
        steady = await _transactions(broker.bootstrap, pid, MEASURE, keep_times=True)
        c0 = cpu_of(pid)
        await asyncio.sleep(IDLE)
        idle = 100 * (cpu_of(pid) - c0) / IDLE
        rss = psutil.Process(pid).memory_info().rss / 2**20
    finally:
        broker.stop()
    assert first.txns >= 1 and steady.times
    q = statistics.quantiles(steady.times, n=100) if len(steady.times) > 1 else steady.times * 99
    return {
        "variant": name,
        "start s (port / first txn)": f"{port_s:.1f} / {ready_s:.1f}",
        "warm ms/txn": round(warm.ms_per_txn(), 2),
        "steady ms/txn": round(steady.ms_per_txn(), 2),
        "txn/s": round(steady.txns / steady.wall),
        "txn ms p50 / p99": f"{1000 * q[49]:.2f} / {1000 * q[98]:.2f}",
        "idle %": round(idle, 2),
        "rss MiB": round(rss),
    }


async def main() -> None:
    picked = [v.strip() for v in os.environ.get("BENCH_BROKER_VARIANTS", "").split(",") if v.strip()]
    variants = {k: v for k, v in VARIANTS.items() if not picked or k in picked}
    rows = []
    for round_ in range(ROUNDS):
        for name, jvm in variants.items():
            row = await _variant(name, jvm)
            print(row, flush=True)
            rows.append({"round": round_ + 1, **row})
    print(f"\nload average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    keys = list(rows[0])
    width = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    for line in [dict(zip(keys, keys, strict=True))] + rows:
        print("  ".join(str(line[k]).ljust(width[k]) for k in keys))


if __name__ == "__main__":
    asyncio.run(main())
