"""The workflow engine in-process on the real broker, fed by control records written directly.

The Workflow's Form and HTTP routes are another piece; here the control log gets the
Resources a Workflow needs (worker, verified Version exporting the class, Deployment,
Workflow) as the control processor would have written them, and instances are driven
through the engine's own command topic, exactly as the gateway does."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER, QUEUE, WORKER_DEPLOYMENT, WORKER_VERSION
from sumi.core import records as r
from sumi.core.config import Settings
from sumi.infra.lifeline import ENV as LIFELINE
from sumi.wire import codec
from sumi.wire.keyreader import KeyReader
from sumi.wire.topics import ensure_topics, partition_for
from sumi.workflow import commands as c
from sumi.workflow.engine import Engine
from sumi.workflow.rules import _decide as d

SPACE = "demo"
TERMINAL = ("complete", "errored", "terminated")
STOP_S = 30  # an engine stops its contexts within 5 s and its Kafka clients within a few more


def _now() -> int:
    return int(time.time() * 1000)


@dataclass
class Log:
    """Every record of the instance log, read as it commits."""

    records: list[Any] = field(default_factory=list)
    latest: dict[str, str] = field(default_factory=dict)  # instance ID -> its last status
    decisions: dict[str, r.CommandDecided] = field(default_factory=dict)
    ends: dict[str, "asyncio.Future[str]"] = field(default_factory=dict)  # instance ID -> its terminal status

    def ended(self, iid: str) -> "asyncio.Future[str]":
        """Resolves with the instance's terminal status once it is readable."""
        fut = self.ends.get(iid)
        if fut is None:
            fut = self.ends[iid] = asyncio.get_running_loop().create_future()
            if self.latest.get(iid) in TERMINAL:
                fut.set_result(self.latest[iid])
        return fut

    def add(self, rec: Any) -> None:
        self.records.append(rec)
        if isinstance(rec, r.InstanceCreated):
            self.latest[rec.instanceId] = "queued"
        elif isinstance(rec, r.InstanceStatusChanged):
            self.latest[rec.instanceId] = rec.status
            fut = self.ends.get(rec.instanceId)
            if rec.status in TERMINAL and fut is not None and not fut.done():
                fut.set_result(rec.status)
        elif isinstance(rec, r.CommandDecided):
            self.decisions[rec.commandId] = rec

    def of(self, iid: str, kind: type | None = None) -> list[Any]:
        return [
            x for x in self.records if getattr(x, "instanceId", None) == iid and (kind is None or isinstance(x, kind))
        ]

    def status(self, iid: str) -> str | None:
        return self.latest.get(iid)

    def decision(self, command_id: str) -> r.CommandDecided | None:
        return self.decisions.get(command_id)


class Bench:
    def __init__(self, settings: Settings, producer: AIOKafkaProducer, log: Log) -> None:
        self.settings = settings
        self.producer = producer
        self.log = log
        self.workflow_uid = ""
        self.queue_uid = ""
        self.worker_uid = ""

    async def _send(self, topic: str, key: str, rec: Any) -> None:
        await self.producer.send_and_wait(
            self.settings.topic(topic),
            codec.encode(rec),
            key=key.encode(),
            partition=partition_for(key, self.settings.partitions),
        )

    async def deploy(
        self,
        js: str,
        class_name: str = "Flow",
        runtime: str = "javascript",
        queue_binding: str | None = None,
        binding: str | None = None,
        handlers: list[str] | None = None,
    ) -> str:
        """Worker, Version (verified, exporting the class), Deployment and Workflow, all active; with
        `queue_binding`, an AtLeastOnceQueue bound to the Version under that name (its UID: `self.queue_uid`);
        with `binding`, the Workflow itself bound to the Version under that name (a Caller Binding)."""
        tag = uuid.uuid4().hex[:8]
        worker, version, dep, wf, queue = (f"res_{p}{tag}" for p in ("w", "v", "d", "f", "q"))
        main = "worker.js" if runtime == "javascript" else "worker.py"
        version_spec: dict[str, Any] = {
            "worker": {"resourceUid": worker},
            "mainModule": main,
            "modules": [{"name": main, "content": js}],
        }
        if binding:
            version_spec["workflowBindings"] = [{"name": binding, "resource": {"resourceUid": wf}}]
        specs: list[tuple[str, str, dict[str, Any], Any]] = []
        if queue_binding:
            specs.append((queue, QUEUE, {"retentionSeconds": 86400}, None))
            version_spec["queueBindings"] = [{"name": queue_binding, "queue": {"resourceUid": queue}}]
            self.queue_uid = queue
        specs += [
            (worker, MODULE_WORKER, {"runtime": runtime}, None),
            (
                version,
                WORKER_VERSION,
                version_spec,
                {"verified": True, "workflowClasses": [class_name], "handlers": handlers or []},
            ),
            (
                dep,
                WORKER_DEPLOYMENT,
                {
                    "worker": {"resourceUid": worker},
                    "versions": [{"version": {"resourceUid": version}, "percentage": 100}],
                },
                None,
            ),
            (wf, DURABLE_WORKFLOW, {"worker": {"resourceUid": worker}, "className": class_name}, None),
        ]
        for uid, form, spec, observed in specs:
            await self.resource(uid, form, spec, observed)
        self.workflow_uid, self.worker_uid = wf, worker
        return wf

    async def resource(self, uid: str, form: str, spec: dict[str, Any], observed: Any = None) -> None:
        """One active Resource, as the control processor would have recorded it."""
        await self._send("control", SPACE, r.ResourceCreated(uid, SPACE, uid, form, json.dumps(spec), 1, "op", _now()))
        if observed is not None:
            await self._send("control", SPACE, r.ResourceObserved(uid, SPACE, json.dumps(observed), _now()))
        await self._send("control", SPACE, r.ResourceStateChanged(uid, SPACE, "active", _now()))

    async def submit(self, cmd: c.WorkflowCommand) -> str:
        command_id = uuid.uuid4().hex
        rec = c.submitted(cmd, command_id=command_id, space=SPACE, principal="alice", now=_now())
        await self._send("workflow.commands", c.key_of(cmd), rec)
        return command_id

    async def decided(self, cmd: c.WorkflowCommand, timeout: float = 30) -> r.CommandDecided:
        command_id = await self.submit(cmd)
        return await until(lambda: self.log.decision(command_id), timeout)

    async def create(self, iid: str, params: Any = c.UNSET) -> r.CommandDecided:
        return await self.decided(c.CreateInstance(self.workflow_uid, iid, params))

    async def event(self, iid: str, type_: str, payload: Any = c.UNSET) -> r.CommandDecided:
        return await self.decided(c.SendEvent(self.workflow_uid, iid, type_, payload))

    async def status(self, iid: str, *wanted: str, timeout: float = 60) -> str:
        return await until(lambda: s if (s := self.log.status(iid)) in wanted else None, timeout)


async def until(probe: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(0.002)
    raise TimeoutError("condition not met in time")


def engine_process(settings: Settings) -> "subprocess.Popen[bytes]":
    """`sumi serve workflow` as its own process, as the supervisor starts it: with a lifeline on
    stdin, so it (and its runtime processes) die with the test run, however that ends."""
    env = {**os.environ, **settings.to_env(), LIFELINE: "stdin"}
    return subprocess.Popen(
        [sys.executable, "-m", "sumi.cli", "serve", "workflow"], env=env, stdin=subprocess.PIPE, start_new_session=True
    )


def reader(settings: Settings, topic: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        settings.topic(topic),
        bootstrap_servers=settings.kafka_bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )


async def _tail(settings: Settings, log: Log) -> None:
    """The instance log as it commits, its sealed documents opened with the keys alive, as the
    workflow projection reads it."""
    consumer = reader(settings, "workflow")
    keys = KeyReader(settings)
    await consumer.start()
    try:
        while True:
            for messages in (await consumer.getmany(timeout_ms=100)).values():
                for rec in await keys.open([codec.decode(m.value) for m in messages]):
                    log.add(rec)
    finally:
        await consumer.stop()
        await keys.close()


@contextlib.asynccontextmanager
async def engine_bench(
    settings: Settings, limits: d.Limits | None = None, in_process: bool = True, engine_cls: type[Engine] = Engine
) -> AsyncIterator[tuple[Bench, Engine]]:
    """A Bench, and an engine in this process (unless `in_process` is False: the test runs its own)."""
    await ensure_topics(settings)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    log = Log()
    engine = engine_cls(settings, limits)  # None: the limits the settings give
    tasks = [asyncio.create_task(_tail(settings, log))]
    if in_process:
        tasks.append(asyncio.create_task(engine.run()))
    try:
        yield Bench(settings, producer, log), engine
    finally:
        try:
            await stopped(tasks)
        finally:
            async with asyncio.timeout(STOP_S):  # TimeoutError here: the bench's producer did not stop
                await producer.stop()


async def stopped(tasks: list["asyncio.Task[None]"]) -> None:
    """Cancel the tasks and wait for them, bounded: one that does not end (a loop that lost its
    cancel) fails the test at once, naming where every task still running waits, instead of
    leaving it to hang until the suite's timeout with nothing in its stack but the event loop."""
    for t in tasks:
        t.cancel()
    _, stuck = await asyncio.wait(tasks, timeout=STOP_S)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # a task that failed on its cancel: retrieved, as before
    if stuck:
        waiting = "\n".join(w for t in asyncio.all_tasks() if not t.done() and (w := _waits_in(t)))
        names = ", ".join(t.get_coro().__qualname__ for t in stuck)
        raise AssertionError(f"still running {STOP_S} s after their cancel: {names}; awaiting:\n{waiting}")


def _waits_in(task: "asyncio.Task[Any]") -> str:
    """The task's chain of awaits, ours only (aiokafka's own loops wait in every test)."""
    frames, at = [], task.get_coro()
    while at is not None:
        frame = getattr(at, "cr_frame", None) or getattr(at, "ag_frame", None)
        if frame is not None and frame.f_globals.get("__name__", "").startswith(("sumi.", "tests.")):
            frames.append(f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})")
        at = getattr(at, "cr_await", None) or getattr(at, "ag_await", None)
    return f"  {task.get_name()}: " + " -> ".join(frames) if frames else ""
