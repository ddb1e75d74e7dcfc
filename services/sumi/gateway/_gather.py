"""The Host's metrics in one scrape: the gateway's own, and the latest snapshot each service
process sent to the metrics topic (sumi.engines.exporter), every sample labelled with the
service and process it came from. A process that sent nothing for STALE_S has stopped: its
series go, as a restarted process's counters would start again.
"""

import asyncio
import logging
import time
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sumi.core.config import Settings
from sumi.core.records import MetricsSnapshot
from sumi.wire import codec, idlefetch

log = logging.getLogger("sumi.gateway")
STALE_S = 30.0


class Gathered(Collector):
    def __init__(self) -> None:
        self.latest: dict[str, MetricsSnapshot] = {}  # service/instance -> its latest snapshot

    def take(self, snapshot: MetricsSnapshot) -> None:
        self.latest[f"{snapshot.service}/{snapshot.instance}"] = snapshot
        if len(self.latest) > 64:  # processes restart under new pids: forget the long gone
            gone = snapshot.at - 10 * STALE_S * 1000
            self.latest = {k: v for k, v in self.latest.items() if v.at >= gone}

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        fresh_after = (time.time() - STALE_S) * 1000
        for snap in list(self.latest.values()):
            if snap.at < fresh_after:
                continue
            for family in text_string_to_metric_families(snap.text):
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                if into.type != family.type:
                    continue  # two versions disagree on a type: the first one seen stands
                extra = {"service": snap.service, "instance": snap.instance}
                into.samples += [s._replace(labels={**s.labels, **extra}) for s in family.samples]
        yield from merged.values()

    async def follow(self, settings: Settings) -> None:
        """Keep the latest snapshot of each process, from the topic's start (it is compacted)."""
        consumer = idlefetch.Consumer(  # long-polls between the services' snapshots
            settings.topic("metrics"),
            bootstrap_servers=settings.kafka_bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            async for m in consumer:
                try:
                    rec = codec.decode(m.value) if m.value is not None else None
                except ValueError as exc:
                    log.debug("metrics topic offset %d: %s", m.offset, exc)
                    continue
                if isinstance(rec, MetricsSnapshot):
                    self.take(rec)
        except asyncio.CancelledError:
            raise
        finally:
            await consumer.stop()
