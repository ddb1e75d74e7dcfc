"""The gateway's one scrape: the snapshots of every service process merged into valid Prometheus text."""

import time

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sumi.core.records import MetricsSnapshot
from sumi.gateway._gather import STALE_S, Gathered


def snapshot(service: str, instance: str, n: int, at: float | None = None) -> MetricsSnapshot:
    registry = CollectorRegistry()
    Counter("sumi_queue_acks", "Messages acknowledged", ("space",), registry=registry).labels("demo").inc(n)
    text = generate_latest(registry).decode()
    return MetricsSnapshot(service, instance, text, int((at if at is not None else time.time()) * 1000))


def test_two_copies_of_a_service_make_one_family_labelled_by_process() -> None:
    # QC-31: every process's acks are counted, each under its own labels, in one valid family
    gathered = Gathered()
    gathered.take(snapshot("queue", "a:1", 3))
    gathered.take(snapshot("queue", "b:2", 4))
    gathered.take(snapshot("queue", "a:1", 5))  # a later snapshot of the same process replaces its first
    gathered.take(snapshot("queue", "c:3", 100, at=time.time() - STALE_S - 1))  # a process gone quiet
    registry = CollectorRegistry()
    registry.register(gathered)
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    names = [f.name for f in families]
    assert sorted(names) == ["sumi_queue_acks", "sumi_queue_acks_created"]  # each once, though two processes
    acks = next(f for f in families if f.name == "sumi_queue_acks")
    totals = {s.labels["instance"]: s.value for s in acks.samples if s.name.endswith("_total")}
    assert totals == {"a:1": 5.0, "b:2": 4.0}
