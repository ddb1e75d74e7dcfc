"""What both engines tell about their plumbing: runtime contexts and processes, and how far
their readers are behind the ends of their topics. Labels: Space, runtime kind, topic and
partition, all bounded by the Host's own configuration."""

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from sumi.engines import procstat
from sumi.engines.runtimes import Runtimes


class PlumbingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.contexts = Gauge("sumi_runtime_contexts", "Execution contexts alive", ("kind", "space"), registry=registry)
        self.cpu = Gauge(
            "sumi_runtime_cpu_seconds", "CPU time of the runtime processes alive", ("kind", "space"), registry=registry
        )
        self.memory = Gauge(
            "sumi_runtime_memory_bytes",
            "Resident memory of the runtime processes",
            ("kind", "space"),
            registry=registry,
        )
        self.lag = Gauge(
            "sumi_consumer_lag",
            "Records between a reader's position and its partition's end",
            ("topic", "partition"),
            registry=registry,
        )

    async def refresh(self, runtimes: Runtimes, readers: Iterable[Any] = ()) -> None:
        for gauge in (self.contexts, self.cpu, self.memory):
            gauge.clear()
        for (kind, space), (contexts, pids) in runtimes.alive().items():
            self.contexts.labels(kind, space).set(contexts)
            used = [u for pid in pids if (u := procstat.usage(pid)) is not None]
            self.cpu.labels(kind, space).set(sum(u[0] for u in used))
            self.memory.labels(kind, space).set(sum(u[1] for u in used))
        for reader in readers:
            await self._lag(reader)

    async def _lag(self, reader: Any) -> None:
        """An aiokafka consumer's lag per assigned partition, as of its last fetch."""
        for tp in reader.assignment():
            end = reader.highwater(tp)
            if end is not None:
                self.lag.labels(tp.topic, str(tp.partition)).set(max(0, end - await reader.position(tp)))
