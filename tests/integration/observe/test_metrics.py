"""`/metrics` over a real Host: it parses as Prometheus text, and each named series moves when
the work it counts runs (queue engine, workflow engine, gateway, gathered into one scrape)."""

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest

from tests.conformance.kit import Api, Flows
from tests.hostkit import Host
from tests.httpkit import WORKFLOW
from tests.integration.observe.kit import STEPS_JS, Samples, scrape, total

pytestmark = pytest.mark.integration


async def until_moved(api: Api, host: Host, checks: dict[str, Callable[[Samples], bool]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(api, host)
        still = [name for name, check in checks.items() if not check(samples)]
        if not still:
            return
        assert time.monotonic() < deadline, f"series that did not move: {still}"
        await asyncio.sleep(0.5)


async def test_every_named_series_moves_with_its_work(api: Api, host: Host) -> None:
    # QC-31, QC-32, QC-33, QC-34, WF-9, WF-41: what the engines count is what they did
    q, dlq, lone = await api.queue(), await api.queue(), await api.queue()
    w = await api.worker()
    await api.consumer(q, w, maxRetries=1, deadLetterQueue={"resourceUid": dlq})
    await api.consumer(lone, w, maxRetries=0)
    flow_worker = await api.worker(source=STEPS_JS, handlers=())
    wf = await api.create(
        f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": flow_worker}, "className": "Flow"}
    )
    before = await scrape(api, host)
    await api.queue()  # one more create Operation
    await api.send(q, "ack", "throw")
    await api.send(lone, "throw")
    flows = Flows(api, wf)
    iid = await flows.started()
    await flows.until(iid, "complete")
    await api.until(q, acknowledged=1, deadLettered=1)
    await api.until(lone, discarded=1)

    s = api.space

    def grew(name: str, by: float = 1, **labels: str) -> Callable[[Samples], bool]:
        return lambda now: total(now, name, **labels) - total(before, name, **labels) >= by

    def present(name: str, **labels: str) -> Callable[[Samples], bool]:
        want = set(labels.items())
        return lambda now: any(n == name and want <= ls for n, ls in now)

    await until_moved(
        api,
        host,
        {
            "deliveries": grew("sumi_queue_deliveries_total", 3, space=s, queue=q),  # ack, throw, throw again
            "acks": grew("sumi_queue_acks_total", 1, space=s, queue=q),
            "retries": grew("sumi_queue_retries_total", 1, space=s, queue=q),
            "dead letters": grew("sumi_queue_dead_letters_total", 1, space=s, queue=q),
            "discards": grew("sumi_queue_discards_total", 1, space=s, queue=lone, reason="retries_exhausted"),
            "batch sizes": grew("sumi_queue_batch_size_count", 2, space=s),
            "handler durations": grew("sumi_queue_handler_duration_seconds_count", 2, space=s),
            "step commits": grew("sumi_workflow_step_commits_total", 2, space=s, workflow=wf),
            "step latencies": grew("sumi_workflow_step_call_duration_seconds_count", 2, space=s, workflow=wf),
            "instances": lambda now: (
                total(now, "sumi_workflow_instances", space=s, workflow=wf, status="complete") == 1
            ),
            "contexts": present("sumi_runtime_contexts", kind="javascript", space=s),
            "runtime memory": lambda now: total(now, "sumi_runtime_memory_bytes", space=s) > 0,
            "runtime cpu": lambda now: total(now, "sumi_runtime_cpu_seconds", space=s) > 0,
            "lag": present("sumi_consumer_lag", service="queue", topic=host.settings.topic("queue")),
            "operations": grew("sumi_operation_duration_seconds_count", 1, space=s, kind="create", state="succeeded"),
            "http": grew("sumi_http_requests_total", 1, route="/v2/spaces/{space}/queues/{uid}/messages"),
        },
    )


async def test_a_token_is_needed(api: Api) -> None:
    # QC-15: the Host's counts are not open to anyone
    r = await api.c.get("/metrics")
    assert r.status_code == 401
