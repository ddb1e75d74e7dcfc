"""Worker logs end to end: what a real JS worker prints and throws reaches `GET …/logs`, its
follow stream and `sumi logs --follow`, tagged; other Spaces see none of it; a flood is bounded
and its drops are counted (real Kafka, Postgres, Node)."""

import asyncio
import io
import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from sumi.core.records import WorkerLogged
from sumi.host._uplogs import HostLogPrinter
from sumi.wire import codec
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, new_space
from tests.httpkit import WORKFLOW, auth
from tests.integration.observe.kit import PRINTER_JS, scrape, total

pytestmark = pytest.mark.integration


def logs_path(api: Api, worker: str) -> str:
    return f"/v2/spaces/{api.space}/workers/{worker}/logs"


async def follow(api: Api, worker: str, into: list[dict[str, Any]], ready: asyncio.Event) -> None:
    async with api.c.stream("GET", logs_path(api, worker), params={"follow": "true"}, headers=api.h) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        ready.set()
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                into.append({**json.loads(line[5:]), "_arrived": time.time()})


def sumi_logs(host: Host, api: Api, worker: str, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "sumi.cli", "logs", worker, "--space", api.space, "--url", host.url]
    return subprocess.Popen(
        [*argv, "--token", api.token, "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


async def until(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def lag_ms(entry: dict[str, Any]) -> float:
    """From the Host taking the line off the worker to the reader having it."""
    at = datetime.fromisoformat(entry["at"]).timestamp()
    return (entry["_arrived"] - at) * 1000


async def test_printed_lines_and_uncaught_errors_reach_every_reader_with_tags(api: Api, host: Host) -> None:
    # QC-23, QC-32: the batch's identifier tags its lines; a throwing handler's error is logged
    q = await api.queue()
    w = await api.worker(source=PRINTER_JS)
    c = await api.consumer(q, w, maxBatchSize=1, maxRetries=0)
    streamed: list[dict[str, Any]] = []
    ready = asyncio.Event()
    streaming = asyncio.create_task(follow(api, w, streamed, ready))
    since = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    cli = sumi_logs(host, api, w, "--follow", "--since", since)
    try:
        await asyncio.wait_for(ready.wait(), 30)
        hello_id, _ = await api.send(q, "hello", "throw")
        await until(lambda: len(streamed) >= 3)
        await api.until(q, acknowledged=1, discarded=1)
        hello = next(e for e in streamed if e["text"] == f"hello from {hello_id}")
        assert hello["level"] == "info" and hello["worker"] == w and hello["resource"] == c
        assert hello["version"].startswith("res_") and hello["batchId"]
        assert any(e["level"] == "warn" and e["text"] == "careful" for e in streamed)
        error = next(e for e in streamed if e["level"] == "error")
        assert error["text"] == "uncaught Error: handler threw on purpose" and error["batchId"] != hello["batchId"]
        print(f"log lag over SSE: {max(lag_ms(e) for e in streamed):.0f} ms")

        cli_lines: list[dict[str, Any]] = []
        assert cli.stdout is not None
        while len(cli_lines) < 3:
            line = await asyncio.to_thread(cli.stdout.readline)
            assert line, cli.stderr.read() if cli.stderr else "sumi logs ended"
            cli_lines.append(json.loads(line))
        assert [e["text"] for e in cli_lines] == [e["text"] for e in streamed[:3]]
    finally:
        streaming.cancel()
        cli.terminate()
        cli.wait(10)

    r = await api.c.get(logs_path(api, w), headers=api.h)
    assert r.status_code == 200
    assert {e["text"] for e in r.json()["items"]} >= {f"hello from {hello_id}", "careful", error["text"]}
    r = await api.c.get(logs_path(api, w), params={"level": "error"}, headers={**auth(api.viewer)})
    assert [e["text"] for e in r.json()["items"]] == [error["text"]]


async def test_sumi_up_logs_prints_every_workers_lines(api: Api, host: Host) -> None:
    # QC-23: what `sumi up --logs` prints beside the Host: each line, tagged with its batch
    out = io.StringIO()
    printer = HostLogPrinter(host.settings, out).start()
    try:
        assert await asyncio.to_thread(printer.ready.wait, 30)
        q = await api.queue()
        w = await api.worker(source=PRINTER_JS)
        await api.consumer(q, w)
        (message_id,) = await api.send(q, "hello")
        await until(lambda: f"hello from {message_id}" in out.getvalue())
    finally:
        printer.stop()
    line = next(x for x in out.getvalue().splitlines() if f"hello from {message_id}" in x)
    assert f"{api.space}/{w}:" in line and "[batchId bat" in line


async def test_another_spaces_token_sees_nothing(api: Api, host: Host) -> None:
    # QC-14, QC-15: a Space's logs are its own; another Space's token learns not even that they exist
    w = await api.worker(source=PRINTER_JS)
    other = await new_space(host)
    for token in (other.editor_token, other.viewer_token):
        r = await api.c.get(logs_path(api, w), headers=auth(token))
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        r = await api.c.get(logs_path(api, w), params={"follow": "true"}, headers=auth(token))
        assert r.status_code == 404
        r = await api.c.get(f"/v2/spaces/{other.name}/workers/{w}/logs", headers=auth(token))
        assert r.status_code == 404  # the worker's UID names nothing in their own Space
    assert (await api.c.get(logs_path(api, w))).status_code == 401


async def topic_lines(host: Host, worker: str) -> list[WorkerLogged]:
    consumer = AIOKafkaConsumer(
        host.settings.topic("logs"), bootstrap_servers=host.settings.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    out: list[WorkerLogged] = []
    try:
        while batch := await consumer.getmany(timeout_ms=1500):
            for m in (m for ms in batch.values() for m in ms):
                rec = codec.decode(m.value)
                if isinstance(rec, WorkerLogged) and rec.workerUid == worker:
                    out.append(rec)
    finally:
        await consumer.stop()
    return out


async def test_a_flood_of_lines_is_bounded_and_its_drops_counted(api: Api, host: Host) -> None:
    # QC-6, QC-24: a worker printing in a loop cannot flood the Host; other work goes on
    lines = 100_000
    q, calm = await api.queue(), await api.queue()
    w = await api.worker(source=PRINTER_JS)
    await api.consumer(q, w, maxBatchSize=1)
    await api.consumer(calm, await api.worker(source=PRINTER_JS), maxBatchSize=1)
    await api.send(q, f"flood:{lines}")
    slowest = 0.0
    async with httpx.AsyncClient(base_url=host.url, timeout=30) as other:
        while (await api.stats(q))["acknowledged"] < 1:
            await api.send(calm, "hello")
            started = time.monotonic()
            assert (await other.get("/healthz")).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(0.2)
    print(f"flood: slowest /healthz {slowest * 1000:.0f} ms")
    await api.until(calm, inFlight=0, ready=0)  # the calm queue was served all along

    kept: list[WorkerLogged] = []
    deadline = time.monotonic() + 30
    while True:
        kept = await topic_lines(host, w)
        told = sum(rec.dropped for rec in kept)
        printed = sum(1 for rec in kept if rec.text.startswith("flood "))
        backlog = sum(_backlog_drops(rec.text) for rec in kept)
        if printed + told + backlog == lines or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    print(f"flood: {printed} lines kept, {told} dropped by the rate bound, {backlog} by the runtime's backlog")
    assert printed + told + backlog == lines  # every line is either kept or counted
    assert told > 0 and printed < lines // 10
    r = await api.c.get(logs_path(api, w), params={"level": "warn"}, headers=api.h)
    notices = [e for e in r.json()["items"] if "dropped" in e]
    assert notices and all("log lines dropped" in e["text"] for e in notices)
    deadline = time.monotonic() + 30  # and /metrics counts them, by Space and worker
    while total(await scrape(api, host), "sumi_worker_log_lines_dropped_total", space=api.space, worker=w) < told:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.5)


def _backlog_drops(text: str) -> int:
    """The runtime process's own drops (its output backlog), which it tells as a line."""
    import re

    m = re.fullmatch(r"(\d+) log lines dropped \(output backlog\)", text)
    return int(m.group(1)) if m else 0


STEP_LOG_JS = """
export default {};
export class Flow {
  async run(event, step) {
    console.log('starting', event.instanceId);
    await step.do('charge', async () => { console.info('charging'); return {}; });
    throw new Error('declined after charging');
  }
}
"""


async def test_a_workflow_instance_lines_carry_instance_and_step(api: Api) -> None:
    # WF-34, WF-45: an instance's lines and its uncaught error, by instance and step
    w = await api.worker(source=STEP_LOG_JS, handlers=())
    wf = await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"})
    flows = Flows(api, wf)
    iid, other = await flows.started(), await flows.started()
    await flows.until(iid, "errored")
    await flows.until(other, "errored")
    deadline = time.monotonic() + 30
    while True:
        r = await api.c.get(logs_path(api, w), params={"instance": iid}, headers=api.h)
        items = r.json()["items"]
        if any(e["level"] == "error" for e in items) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert {e["instanceId"] for e in items} == {iid} and {e["resource"] for e in items} == {wf}
    charging = next(e for e in items if e["text"] == "charging")
    assert charging["step"] == "charge" and charging["level"] == "info"
    assert "step" not in next(e for e in items if e["text"].startswith("starting"))
    error = next(e for e in items if e["level"] == "error")
    assert error["text"] == "run_threw (the message is in the instance's history)"  # WF-13: not copied
