"""A service's own metrics, sent to the gateway for a single scrape of the whole Host.

Every few seconds the service renders its registry (Prometheus text) and sends it as a
`MetricsSnapshot` keyed by service and process to the compacted `<prefix>.metrics` topic;
the gateway keeps the latest of each and serves them with its own (sumi.gateway._gather).
Rejected: a metrics port per service, which the gateway would have to be told of for every
copy on every machine; the topic reaches every copy wherever it runs, as the other records do.
"""

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, generate_latest

from sumi.core.clock import now_ms
from sumi.core.config import Settings
from sumi.core.records import MetricsSnapshot
from sumi.wire import kafka

log = logging.getLogger("sumi.metrics")
# Well inside the gateway's STALE_S (30 s), and rare enough that an idle Host's snapshots are
# not a steady load on the broker (at 2 s they kept every service and the broker awake, issue 40).
EVERY_S = 10.0
# A registry that has not changed is sent again only this long after the last send: an idle
# service's figures stand still, and the gateway needs to hear from it only within STALE_S.
UNCHANGED_EVERY_S = 20.0


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def export(
    settings: Settings, service: str, registry: CollectorRegistry, refresh: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Send the registry every EVERY_S seconds until cancelled; a failed send is tried again."""
    producer = kafka.new_producer(settings, enable_idempotence=False, acks=1)
    key = f"{service}/{instance_name()}"
    try:
        await producer.start()
        sent, sent_at = "", 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                if refresh is not None:
                    await refresh()
                text = generate_latest(registry).decode()
                if text != sent or loop.time() - sent_at >= UNCHANGED_EVERY_S:
                    snapshot = MetricsSnapshot(service, instance_name(), text, now_ms())
                    await kafka.send(producer, settings.topic("metrics"), key, snapshot, settings.partitions)
                    sent, sent_at = text, loop.time()
            except Exception as exc:  # metrics are never a reason to stop the work
                log.warning("metrics snapshot not sent: %r", exc)
            await asyncio.sleep(EVERY_S)
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
