"""The engine shell (`sumi.engines.shell`) on the real broker, once for every processor that
stands on it: an assignment folds the partition's log before deciding (the workflow and queue
engines': its snapshot, then the log after it), a reassignment drops the state of the
partitions a replica lost, and a replica taking a partition over fences the one before (its
commit fails)."""

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import ProducerFenced

from sumi.control.rules.forms.names import MODULE_WORKER, QUEUE, QUEUE_CONSUMER, WORKER_VERSION
from sumi.control.rules.state import ControlState
from sumi.control.service import ControlLogic, control_shell
from sumi.core import records as r
from sumi.core.commands import SpaceCreate, submitted
from sumi.core.config import Settings
from sumi.engines.shell import Shell
from sumi.queue.engine import Engine as QueueEngine
from sumi.testing import new_settings
from sumi.verifier import Verifier
from sumi.verifier.service import verifier_shell
from sumi.wire import codec, kafka
from sumi.wire.outbox import Outbox
from sumi.wire.topics import ensure_topics, instance_key, partition_for
from sumi.workflow import commands as c
from sumi.workflow.client import WorkflowClient
from sumi.workflow.engine import Engine
from tests.hostkit import committed_messages
from tests.integration.workflow.engine_kit import SPACE, engine_bench
from tests.unit.queue.test_snapshot import view

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


@dataclass(frozen=True)
class Case:
    """A processor on the shell: its log's history for a name (keyed `key(name)`), an input
    whose decision needs that history, and whether the decision found in the outputs used it."""

    make: Callable[[Settings], tuple[Shell, Callable[[str], bool]]]  # and whether it holds a name's history
    seed: Callable[[str], list[tuple[str, r.Record]]]  # (topic, record)
    ask: Callable[[str], r.Record]
    asked: str  # the topic the input goes to
    answers: str  # the topic its decision goes to
    folded: Callable[[Any, str], bool | None]  # None: not this name's answer
    key: Callable[[str], str] = lambda name: name


def _holds(state: Callable[[], ControlState]) -> Callable[[str], bool]:
    return lambda space: state().space_exists(space)


def _control(settings: Settings) -> tuple[Shell, Callable[[str], bool]]:
    shell = control_shell(settings)
    logic = shell.processor
    assert isinstance(logic, ControlLogic)
    return shell, _holds(lambda: logic.state)


def _create_again(space: str) -> r.Record:
    return submitted(SpaceCreate(name=space), command_id=f"c-{space}", space=space, principal="t", admin=True, now=NOW)


def _refused(rec: Any, space: str) -> bool | None:
    if not (isinstance(rec, r.CommandDecided) and rec.commandId == f"c-{space}"):
        return None
    return rec.status == 409  # the Space in the log exists: created again only by a state without it


def _verifier(settings: Settings) -> tuple[Shell, Callable[[str], bool]]:
    verifier = Verifier(settings)
    return verifier_shell(settings, verifier), _holds(lambda: verifier.control)


def _worker(space: str) -> list[tuple[str, r.Record]]:
    spec = json.dumps({"runtime": "javascript", "handlers": []})
    worker = r.ResourceCreated(f"w-{space}", space, "w", MODULE_WORKER, spec, 1, "ow", NOW)
    return [("control", r.SpaceCreated(space, NOW)), ("control", worker)]


def _version(space: str) -> r.Record:
    spec = {
        "worker": {"resourceUid": f"w-{space}"},
        "mainModule": "w.js",
        "modules": [{"name": "w.js", "content": "export default {"}],
    }
    return r.ResourceCreated(f"v-{space}", space, "v", WORKER_VERSION, json.dumps(spec), 1, f"op-{space}", NOW)


def _loaded(rec: Any, space: str) -> bool | None:
    if not (isinstance(rec, r.CommandSubmitted) and f'"op-{space}"' in rec.payload):
        return None
    return '"invalid_spec"' in rec.payload  # loaded, so its worker was known (else dependency_conflict)


WF = "res_wf"  # no Workflow in the control log: an event is decided against the instance alone


def _workflow(settings: Settings) -> tuple[Shell, Callable[[str], bool]]:
    engine = Engine(settings)
    return engine.shell, lambda name: _instance(name) in engine.instances


def _instance(name: str) -> str:
    return instance_key(WF, f"i-{name}")


def _created(name: str) -> list[tuple[str, r.Record]]:
    return [("workflow", r.InstanceCreated(WF, f"i-{name}", "demo", NOW))]


def _event(name: str) -> r.Record:
    return c.submitted(
        c.SendEvent(WF, f"i-{name}", "ping"), command_id=f"c-{name}", space="demo", principal="t", now=NOW
    )


def _accepted(rec: Any, name: str) -> bool | None:
    if not (isinstance(rec, r.CommandDecided) and rec.commandId == f"c-{name}"):
        return None
    return '"unknown_instance"' not in (rec.problem or "")  # in the log: unknown only to a state without it


def _queue(settings: Settings) -> tuple[Shell, Callable[[str], bool]]:
    engine = QueueEngine(settings, workflows=None)  # type: ignore[arg-type]  # no handler runs here
    return engine.shell, lambda name: f"q-{name}" in engine.state.queues


def _accepted_message(name: str) -> list[tuple[str, r.Record]]:
    return [("queue", r.MessageAccepted(f"q-{name}", "demo", f"m-{name}", b"x", NOW, NOW))]


def _delivered(name: str) -> r.Record:
    """A batch an engine before delivered and never ended: the next take-over's fold ends it."""
    return r.BatchDelivered(f"q-{name}", f"c-{name}", f"b-{name}", (f"m-{name}",), (1,), "v", NOW)


def _abandoned(rec: Any, name: str) -> bool | None:
    if not (isinstance(rec, r.BatchEnded) and rec.batchId == f"b-{name}"):
        return None
    return rec.outcome == "abandoned"  # QC-43: only a fold that holds the batch ends it


CASES = {
    "control": Case(
        _control, lambda s: [("control", r.SpaceCreated(s, NOW))], _create_again, "commands", "control", _refused
    ),
    "verifier": Case(_verifier, _worker, _version, "control", "commands", _loaded),
    "workflow": Case(_workflow, _created, _event, "workflow.commands", "workflow", _accepted, _instance),
    "queue": Case(_queue, _accepted_message, _delivered, "queue", "queue", _abandoned, lambda name: f"q-{name}"),
}


@pytest.fixture
async def settings(kafka_bootstrap: str, database_url: str) -> AsyncIterator[Settings]:
    settings = new_settings(kafka_bootstrap, database_url, partitions=2)
    await ensure_topics(settings)
    yield settings


def _names(case: Case) -> tuple[str, str]:
    """Two names whose records go to different partitions."""
    names = [f"s{i}" for i in range(20)]
    first = names[0]
    other = next(n for n in names if partition_for(case.key(n), 2) != partition_for(case.key(first), 2))
    return first, other


async def _write(settings: Settings, records: list[tuple[str, str, r.Record]]) -> None:
    """(topic, key, record)s."""
    producer = kafka.new_producer(settings)
    await producer.start()
    try:
        for topic, key, rec in records:
            await kafka.send(producer, settings.topic(topic), key, rec, settings.partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def _read(settings: Settings, topic: str) -> list[Any]:
    return [codec.decode(m.value) for m in await committed_messages(settings, topic) if m.value]


async def _answers(settings: Settings, case: Case, space: str, timeout: float = 60) -> list[bool]:
    """The decisions of the input for `space`, once there is one."""
    for _ in range(int(timeout * 2)):
        found = [f for rec in await _read(settings, case.answers) if (f := case.folded(rec, space)) is not None]
        if found:
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"no decision for {space}")


async def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    for _ in range(int(timeout * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not reached: {what}")


async def _stop(task: asyncio.Task[None], shell: Shell) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    if isinstance(shell.processor, Verifier):
        await shell.processor.close()  # its runtimes: what `serve` closes
    if isinstance(shell.processor, Engine | QueueEngine):
        await shell.processor.worklogs.close()  # what `Engine.run` closes: its worker logs' shipping


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_takeover_folds_the_log_before_deciding_and_fences_the_replica_before(
    settings: Settings, name: str
) -> None:
    # WF-46, QC-42, QC-43: a replica that lost a partition commits nothing for it after; the new
    # owner decides against the fold of the partition's log, and what the old one decided is not
    # redone (the queue engine's: a batch it ended as abandoned is not ended again).
    case = CASES[name]
    a, b = _names(case)
    await _write(settings, [(topic, case.key(s), rec) for s in (a, b) for topic, rec in case.seed(s)])
    # Asked before the run: the queue engine takes what its own log held at the take-over for its own.
    await _write(settings, [(case.asked, case.key(a), case.ask(a))])
    first, _ = case.make(settings)
    running = asyncio.create_task(first.run())
    assert await _answers(settings, case, a) == [True]

    # Cut off as a replica the group gave up on: it still holds its producers.
    orphans, first.producers.producers = first.producers.producers, {}
    await _stop(running, first)
    await _write(settings, [(case.asked, case.key(b), case.ask(b))])
    second, _ = case.make(settings)
    running = asyncio.create_task(second.run())
    try:
        assert await _answers(settings, case, b) == [True]
        assert await _answers(settings, case, a) == [True]  # committed once, not decided again
        out = kafka.Out(settings.topic("quarantine"), a, r.SpaceCreated("late", NOW))
        for partition, producers in orphans.items():
            with pytest.raises(ProducerFenced):
                await kafka.commit(producers[0], [out], settings.partitions)
            assert partition in second.producers.producers
        assert orphans
    finally:
        await _stop(running, second)
        for producers in orphans.values():
            for producer in producers:
                await producer.stop()


SHARED = {
    "verifier": True,
    "control": False,
    "workflow": True,
    "queue": True,
}  # control: one replica holds every partition


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_reassignment_drops_the_state_of_the_partitions_lost(settings: Settings, name: str) -> None:
    # WF-46, QC-42, QC-44: each assignment folds afresh what it holds, so no decision is made against
    # the state of a partition another replica now decides.
    case = CASES[name]
    a, b = _names(case)
    await _write(settings, [(topic, case.key(s), rec) for s in (a, b) for topic, rec in case.seed(s)])
    (first, first_holds), (second, second_holds) = case.make(settings), case.make(settings)

    def spaces(holds: Callable[[str], bool]) -> set[str]:
        return {s for s in (a, b) if holds(s)}

    tasks = [asyncio.create_task(first.run())]
    try:
        await _until("both folded", lambda: spaces(first_holds) == {a, b})
        before = first.folds.epoch
        tasks.append(asyncio.create_task(second.run()))
        # the listener's fold and the loop's each move the epoch on twice (a generation folds in a task)
        moves = 2 if first.serves is not None else 4
        await _until(
            "reassigned", lambda: first.folds.epoch >= before + moves and not first.folds.stale(first.folds.epoch)
        )
        if SHARED[name]:
            await _until("each folds its own", lambda: len(spaces(first_holds)) == len(spaces(second_holds)) == 1)
            assert spaces(first_holds) | spaces(second_holds) == {a, b}
        else:
            assert len(first.producers.producers) == 2 and not second.producers.producers
            assert spaces(first_holds) == {a, b} and spaces(second_holds) == set()
    finally:
        for task, shell in zip(tasks, (first, second), strict=False):
            await _stop(task, shell)


def _held(shell: Shell) -> tuple[Any, int]:
    """What a snapshotted processor holds, comparably, and how many items."""
    if isinstance(shell.processor, QueueEngine):
        return view(shell.processor.state), len(shell.processor.state.queues)
    assert isinstance(shell.processor, Engine)
    return shell.processor.instances, len(shell.processor.instances)


SNAPSHOTTED = ["queue", "workflow"]  # the processors whose changelog the shell snapshots


async def _folded(settings: Settings, case: Case) -> Shell:
    """A take-over's fold of both partitions, as the shell makes it; its snapshot written, if due."""
    shell, _ = case.make(settings)
    async with contextlib.AsyncExitStack() as stack:
        assert shell.checkpoints is not None and shell.serves is not None
        await shell.checkpoints.start()
        stack.push_async_callback(shell.checkpoints.stop)
        await shell.serves.prepare(frozenset({0, 1}), stack)
        await shell.rebuild([0, 1])
        store = shell.checkpoints.store
        if store is not None:
            await asyncio.gather(*store.writing.values())
    return shell


@pytest.mark.parametrize("name", SNAPSHOTTED)
async def test_a_snapshot_and_the_log_after_it_fold_to_what_the_whole_log_folds_to(
    settings: Settings, name: str
) -> None:
    # WF-46, WF-21, QC-43: a take-over restores a partition's latest snapshot and folds only the
    # log after it, and holds exactly what the fold of the whole log holds
    case = CASES[name]
    settings = replace(settings, snapshot_quiet_seconds=float("inf"))  # none taken for quiet alone
    await _write(settings, [(t, case.key(f"s{i}"), rec) for i in range(8) for t, rec in case.seed(f"s{i}")])
    first = await _folded(replace(settings, snapshot_records=2), case)  # due right after the fold
    assert first.checkpoints is not None
    snapshotted = dict(first.checkpoints.taken)
    assert len(snapshotted) == 1 and min(snapshotted.values()) >= 2  # one partition at a time
    await _write(settings, [(t, case.key(f"t{i}"), rec) for i in range(8) for t, rec in case.seed(f"t{i}")])
    restored = await _folded(replace(settings, snapshot_records=1000), case)  # restores, takes none
    assert restored.checkpoints is not None and restored.checkpoints.taken == snapshotted
    whole = await _folded(replace(settings, snapshot_records=0), case)  # no snapshots: the whole log
    held = [_held(shell) for shell in (restored, whole)]
    assert held[0] == held[1] and held[1][1] == 16


SERVING = ["workflow"]  # the processors that run contexts of the partitions they hold
LONG = """
export class Flow {
  async run(event, step) {
    await step.do('forever', async () => { await new Promise((resolve) => setTimeout(resolve, 60000)); });
    return {};
  }
}
"""


@pytest.mark.parametrize("name", SERVING)
async def test_a_revocation_returns_only_once_the_contexts_of_its_partitions_have_stopped(
    settings: Settings, name: str
) -> None:
    # WF-46: no context of a revoked partition runs once another replica may be given it, and
    # the replica given it runs the instance on
    case = CASES[name]
    async with engine_bench(settings, in_process=False) as (bench, _):
        wf = await bench.deploy(LONG)
        first, _ = case.make(settings)
        second, _ = case.make(settings)
        engines = [first.processor, second.processor]
        assert isinstance(engines[0], Engine) and isinstance(engines[1], Engine)
        revoke, drained = first.revoked, []

        async def noting(tps: list[Any]) -> None:
            live = list(engines[0].runs.values())
            await revoke(tps)
            drained.append(
                (len(live), all(run.task is not None and run.task.done() for run in live), len(engines[0].runs))
            )

        first.revoked = noting  # type: ignore[method-assign]
        tasks = [asyncio.create_task(first.run())]
        try:
            iids = [f"i{n}" for n in range(20)]
            other = next(
                i for i in iids if partition_for(instance_key(wf, i), 2) != partition_for(instance_key(wf, "i0"), 2)
            )
            for iid in ("i0", other):
                assert (await bench.create(iid)).status == 201
            await _until("both running", lambda: len(engines[0].runs) == 2)
            tasks.append(asyncio.create_task(second.run()))
            await _until("one each", lambda: len(engines[0].runs) == len(engines[1].runs) == 1, timeout=90)
            # both stopped, proven, before the partitions went (the revocation before any assignment had none)
            assert [d for d in drained if d[0]] == [(2, True, 0)]
        finally:
            for task, shell in zip(tasks, (first, second), strict=False):
                await _stop(task, shell)


HANDLER = "export default { async queue(batch) { await new Promise((resolve) => setTimeout(resolve, 60000)); } };"


async def test_a_revocation_of_the_queue_engines_partitions_returns_once_their_handlers_ended_committed(
    settings: Settings,
) -> None:
    # QC-42, QC-43, QC-44: no handler of a revoked partition runs once another replica may be
    # given it, its batch's end is committed before (the drain), and its message is delivered again
    async with engine_bench(settings, in_process=False) as (bench, _):
        await bench.deploy(HANDLER + "\nexport class Flow {}", handlers=["queue"])
        names = [f"q{n}{uuid.uuid4().hex[:6]}" for n in range(20)]
        queues = [names[0], next(q for q in names if partition_for(q, 2) != partition_for(names[0], 2))]
        for q in queues:
            await bench.resource(q, QUEUE, {"retentionSeconds": 86400})
            spec = {
                "queue": {"resourceUid": q},
                "worker": {"resourceUid": bench.worker_uid},
                **{"maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1},
                **{"maxRetries": 3, "retryDelaySeconds": 0},
            }
            await bench.resource(f"c-{q}", QUEUE_CONSUMER, spec)
        engines = [QueueEngine(settings, WorkflowClient(settings)) for _ in range(2)]
        revoke, drained = engines[0].shell.revoked, []

        async def noting(tps: list[Any]) -> None:
            live = list(engines[0].runs.values())
            await revoke(tps)
            ended = [run.task is not None and run.task.done() and run.task.exception() is None for run in live]
            drained.append((len(live), all(ended), len(engines[0].runs)))

        engines[0].shell.revoked = noting  # type: ignore[method-assign]
        tasks = [asyncio.create_task(engines[0].run())]
        try:
            now = int(time.time() * 1000)  # within the queues' retention
            for q in queues:
                await bench._send("queue", q, r.MessageAccepted(q, SPACE, f"m-{q}", b"x", now, now))
            await _until("both handlers running", lambda: len(engines[0].runs) == 2, timeout=90)
            tasks.append(asyncio.create_task(engines[1].run()))
            await _until("one each", lambda: len(engines[0].runs) == len(engines[1].runs) == 1, timeout=90)
            # both ended and committed before the partitions went (the revocation before any assignment had none)
            assert [d for d in drained if d[0]] == [(2, True, 0)]
            ends = [x for x in await _read(settings, "queue") if isinstance(x, r.BatchEnded)]
            assert sorted(e.queueUid for e in ends if e.outcome == "stopped") == sorted(queues)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def test_a_queue_snapshot_covers_only_what_the_engine_has_read_of_its_log(settings: Settings) -> None:
    # QC-21, QC-43: the queue log is appended to by the gateway too, so a decision committed past
    # a message not read yet leaves a state that is no fold of the log up to the decision: a
    # snapshot covering it would lose that message at the next start
    settings = replace(settings, snapshot_records=1, snapshot_quiet_seconds=float("inf"))
    shell, _ = _queue(settings)
    checkpoints, q = shell.checkpoints, "q-s0"
    assert checkpoints is not None and checkpoints.store is not None
    tp = TopicPartition(settings.topic("queue"), partition_for(q, 2))
    await _write(settings, [("queue", q, r.MessageAccepted(q, "demo", "m0", b"x", NOW, NOW))])
    async with contextlib.AsyncExitStack() as stack:
        await checkpoints.start()
        stack.push_async_callback(checkpoints.stop)
        await shell.producers.assign([tp])
        stack.push_async_callback(shell.producers.close)
        await shell.rebuild([tp.partition])
        await asyncio.gather(*checkpoints.store.writing.values())
        assert checkpoints.taken == {tp.partition: 1}  # the fold's end: m0 read
        await _write(settings, [("queue", q, r.MessageAccepted(q, "demo", "m1", b"x", NOW, NOW))])  # unread
        box = Outbox(shell.producers.turns_of(tp.partition), settings.partitions)
        box.on_idle = checkpoints.idle
        stack.callback(checkpoints.watch([box]))
        running = asyncio.create_task(box.run())
        try:
            await box.put([(settings.topic("queue"), q, r.QueuePurged(q, NOW))])  # a decision, after m1
            assert box.written[(tp.topic, tp.partition)] == 2
            assert checkpoints.taken == {tp.partition: 1}  # none past what was read
            checkpoints.read(tp.partition, 4)  # m1, the decision and its commit marker read
            assert checkpoints.taken == {tp.partition: 4}
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
