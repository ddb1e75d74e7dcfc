"""Request counts and latency by route template and status, in a registry per app."""

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


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

    def set_quarantined(self, rows: list[dict[str, Any]]) -> None:
        self.quarantined.clear()
        for row in rows:
            self.quarantined.labels(row["processor"], row["source_topic"], row["reason"]).set(row["n"])

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(seconds)


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
