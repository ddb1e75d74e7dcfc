"""The queue engine's metrics, read off the records it decides (every decision passes `emit`).

Labels are the Space and a Resource UID (the queue, or the Consumer for batches), never a
message or batch ID, so the series are as many as the Host's queues and Consumers.
"""

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from sumi.core import records as r

SIZES = (1, 2, 5, 10, 20, 50, 100)


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, *extra: str) -> Counter:
            return Counter(name, doc, ("space", "queue", *extra), registry=registry)

        self.deliveries = counter("sumi_queue_deliveries", "Messages handed to a handler")
        self.acks = counter("sumi_queue_acks", "Messages acknowledged", "cause")
        self.retries = counter("sumi_queue_retries", "Redeliveries scheduled", "cause")
        self.dead_letters = counter("sumi_queue_dead_letters", "Messages moved to a dead-letter queue")
        self.discards = counter("sumi_queue_discards", "Messages dropped for good", "reason")
        labels = ("space", "consumer")
        self.batch_size = Histogram(
            "sumi_queue_batch_size", "Messages per batch", labels, buckets=SIZES, registry=registry
        )
        self.handler = Histogram(
            "sumi_queue_handler_duration_seconds",
            "From a batch's delivery to its end",
            (*labels, "outcome"),
            registry=registry,
        )
        self._started: dict[str, int] = {}  # open batch -> its delivery time (ms)

    def observe(self, rec: Any, space_of: Callable[[str], str]) -> None:
        """Count one record the engine decided; `space_of` maps a queue UID to its Space."""
        if isinstance(rec, r.BatchDelivered):
            space = space_of(rec.queueUid)
            self.deliveries.labels(space, rec.queueUid).inc(len(rec.messageIds))
            self.batch_size.labels(space, rec.consumerUid).observe(len(rec.messageIds))
            self._started[rec.batchId] = rec.at
        elif isinstance(rec, r.MessagesAcknowledged):
            self.acks.labels(space_of(rec.queueUid), rec.queueUid, rec.cause).inc(len(rec.messageIds))
        elif isinstance(rec, r.MessageRetryScheduled):
            self.retries.labels(space_of(rec.queueUid), rec.queueUid, rec.cause).inc()
        elif isinstance(rec, r.MessageDeadLettered):
            self.dead_letters.labels(space_of(rec.queueUid), rec.queueUid).inc()
        elif isinstance(rec, r.MessageDiscarded):
            self.discards.labels(space_of(rec.queueUid), rec.queueUid, rec.reason).inc()
        elif isinstance(rec, r.BatchEnded) and (started := self._started.pop(rec.batchId, None)) is not None:
            seconds = max(0, rec.at - started) / 1000
            self.handler.labels(space_of(rec.queueUid), rec.consumerUid, rec.outcome).observe(seconds)
