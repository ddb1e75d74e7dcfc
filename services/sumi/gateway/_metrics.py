"""Request counts and latency by route template and status, in a registry per app; with the
quarantine counts and Operation durations read from Postgres at each scrape, and the other
services' metrics gathered from the metrics topic (`_gather`)."""

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sumi.gateway._gather import Gathered
from sumi.gateway._reads import OPERATION_BUCKETS


class Metrics:
    def __init__(self) -> None:
        # A registry of its own, so several apps in one process (tests) do not collide.
        self.registry = CollectorRegistry()
        labels = ("method", "route", "status")
        self.requests = Counter("sumi_http_requests", "HTTP requests answered", labels, registry=self.registry)
        self.latency = Histogram(
            "sumi_http_request_duration_seconds", "Time to answer an HTTP request", labels, registry=self.registry
        )

        # The processors run in processes of their own; what they quarantine reaches this one
        # through the quarantine topic's read model, read at each scrape.
        self.quarantined = Gauge(
            "sumi_quarantined_records",
            "Records a processor could not decode or apply and set aside on the quarantine topic",
            ("processor", "topic", "reason"),
            registry=self.registry,
        )
        self.operations = OperationDurations()
        self.registry.register(self.operations)
        self.gathered = Gathered()
        self.registry.register(self.gathered)

    def set_quarantined(self, rows: list[dict[str, Any]]) -> None:
        self.quarantined.clear()
        for row in rows:
            self.quarantined.labels(row["processor"], row["source_topic"], row["reason"]).set(row["n"])

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(seconds)


class OperationDurations(Collector):
    """From an Operation's acceptance to its end, per Space, kind and final state (as last read)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "sumi_operation_duration_seconds",
            "Ended Operations: from acceptance to success or failure",
            labels=("space", "kind", "state"),
        )
        for row in self.rows:
            buckets = [(str(b), row[f"le_{i}"]) for i, b in enumerate(OPERATION_BUCKETS)] + [("+Inf", row["n"])]
            family.add_metric((row["space"], row["kind"], row["state"]), buckets, row["seconds"])
        yield family


class MetricsMiddleware:
    """Outermost: sees the final status, including Problems made by the inner layers."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            # The route template, not the raw path: label values stay few.
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - started)
