"""The workflow engine (`sumi serve workflow`): DurableWorkflow instances over the instance log.

Plumbing around the pure core (`_state`, `_decide`):
- The instance log (topic `workflow`, key `<workflowUid>/<instanceId>`) is the engine's
  changelog; the owner of a partition is its only writer. The shell (`sumi.engines.shell`),
  after the partitions' transactional producers (a pair per partition its outbox takes turns
  on, `sumi.wire.outbox`) have fenced their previous owner, restores their latest snapshots
  (`_checkpoints`) and folds the log after them to the end (read_committed); it is never read
  again: every later record is folded when decided.
- Commands (topic `workflow.commands`, same key) come through the intake (`_intake`):
  each is decided once against the fold, and its `CommandDecided` goes to the instance log
  with the facts it decided; the group's offsets follow the decisions, and decided
  commands leave the topic.
- The control log is read as a global table: Workflows, their worker's allocation,
  Versions' code and bindings.
- Data keys (`_keys`, `sumi.core.sealing`): every document goes to the instance log sealed
  with a key that lives only on the compacted key topic, written in the same transaction; a
  purge (a terminal transition's unmatched events, retention, the Workflow's delete) writes
  the keys' tombstones with it. The key topic is folded before the instance log at a start,
  and each record read back is opened with the keys still alive.
- Durable timers: every due time is a field of the fold (`_decide.next_due`); the engine
  keeps a heap of them and fires by appending records, so a restart re-arms every sleep,
  wait timeout, retry and retention purge from the log alone.
- Each execution context is one `ContextRun` (`_runs`): a new owner token per context,
  step calls committed before they are answered, the physical stop before any status
  that depends on it. An engine restart starts a new context for every instance that
  was running: its new token fences whatever the old process left behind.
- Which instance gets a context, and when the engine looks again, is the scheduler's
  (`_scheduler`): fair shares among Spaces, instances waiting for a usable Version, retries
  after a failed context. It starts runs through the engine and owns nothing durable.
- A Workflow's delete (`_deletes`) stops its contexts, then purges its instances and reports
  each owned partition's share of the Operation; a stop never confirmed is proven by the
  runtimes' exit (WF-13, WF-14). Instance counts (`_observe`) are reported per owned
  partition too; the control plane sums them (WF-9).

Replicas share the partitions through the shell: every replica joins the commands' group, and
each assignment is a generation (`Serving`) that fences its partitions' transactional
producers (a pair per partition, `<prefix>-workflow-engine-p<N>`), rebuilds exactly those
partitions, decides their commands and runs their instances; on revocation it stops their
contexts, proven, before the partitions go. What spans partitions is a protocol across
replicas: a Workflow's delete and its instance counts are reported per partition, and a
Caller Binding's call on another replica's instance goes through the commands topic.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import CollectorRegistry

from sumi.core import clock, ids, sealing
from sumi.core import records as r
from sumi.core.clock import now_ms
from sumi.core.commands import Command as ControlCommand
from sumi.core.commands import submitted
from sumi.core.config import Settings
from sumi.core.problems import Problem
from sumi.engines import exporter
from sumi.engines.metrics import PlumbingMetrics
from sumi.engines.runtimes import Runtimes
from sumi.engines.shell import Shell
from sumi.engines.worklogs import WorkerLogs
from sumi.runtime.types import Runtime, WorkflowOutcome
from sumi.wire import kafka
from sumi.wire.outbox import Box
from sumi.wire.topics import instance_key, partition_for
from sumi.workflow import commands as c
from sumi.workflow._bindings import Bindings
from sumi.workflow._checkpoints import Checkpoints
from sumi.workflow._deletes import Deletes
from sumi.workflow._intake import Intake
from sumi.workflow._metrics import WorkflowMetrics
from sumi.workflow._observe import CountReports
from sumi.workflow._remote import Remote
from sumi.workflow._routes import elsewhere
from sumi.workflow._runs import ContextRun
from sumi.workflow._scheduler import Scheduler
from sumi.workflow._spares import Spares
from sumi.workflow.replies import Replies
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules import _keys
from sumi.workflow.rules._control import WorkflowControl
from sumi.workflow.rules._state import Instance
from sumi.workflow.rules._table import InstanceTable

log = logging.getLogger("sumi.workflow")
OBSERVE_MS = 1000
Answer = asyncio.Future[r.CommandDecided]


def limits_of(settings: Settings) -> d.Limits:
    """The engine's limits from the settings (retention: WF-47, checked by Settings itself)."""
    return d.Limits(
        retention_ms=settings.workflow_retention_seconds * 1000, always_replay=settings.workflow_always_replay
    )


class Engine:
    def __init__(self, settings: Settings, limits: d.Limits | None = None) -> None:
        self.settings = settings
        self.limits = limits or limits_of(settings)
        self.registry = CollectorRegistry()
        self.worklogs = WorkerLogs(settings, self.registry)
        self.metrics = WorkflowMetrics(self.registry)
        self.plumbing = PlumbingMetrics(self.registry)
        self.commands: AIOKafkaConsumer | None = None  # the group's member, once running
        self.admin: AIOKafkaAdminClient | None = None
        self.control_reader: AIOKafkaConsumer | None = None  # a generation's, from `prepare`
        self.control_tps: list[TopicPartition] = []
        self.reset()
        self.owned = frozenset(range(settings.partitions))  # a Shell's generation says which
        topic = settings.topic
        self.shell = Shell(
            settings,
            "workflow-engine",
            topic("workflow.commands"),
            self,
            changelog_topic=topic("workflow"),
            turns=2,
            snapshots="workflow",
            max_partition_fetch_bytes=4 << 20,
        )

    def reset(self) -> None:
        """The state of a new generation: nothing of an earlier one is kept."""
        # The instance log's partitions this replica decides (commands and log share the key, so
        # the same numbers): an instance of another partition is another replica's (`prepare`).
        self.owned = frozenset[int]()
        self.table = InstanceTable(self.limits, self.settings.partitions)
        self.instances = self.table.instances  # the table's (runs, bindings and checkpoints read it)
        self.ring = sealing.KeyRing()  # the data keys alive: the fold of the key topic
        self.runs: dict[str, ContextRun] = {}
        # Every run's task until it has ended, also after `ended` took the run out of `runs`
        # while its last records commit: a stop awaits them all, none left unretrieved.
        self.run_tasks: set[asyncio.Task[None]] = set()
        self.control = WorkflowControl()
        self.replies = Replies(self.settings.topic("workflow"))  # answers of calls to other replicas' instances
        remote = Remote(self, self.settings.partitions, self.settings.decision_timeout)
        self.bindings = Bindings(self, remote, everywhere=self.settings.workflow_remote_bindings)
        self.spares = Spares(self)
        self.scheduler = Scheduler(self.settings, self.limits, self)
        # Terminates of instances with a live run, decided in `ended` once its stop is proven (WF-26).
        self.terminates: dict[str, list[tuple[d.Caller, c.TerminateInstance, Answer]]] = {}
        self.intake = Intake(self.settings, self)
        self.checkpoints = Checkpoints(self.settings, self)
        self.deletes = Deletes(self)
        self.counts = CountReports(self)
        self.outboxes: dict[int, Box] = {}  # one per owned partition, on its fenced producers
        self.runtimes = Runtimes(self.settings)  # one per kind
        self._last_observe = 0
        self.closing = False

    def now(self) -> int:
        return now_ms()

    def owns(self, key: str) -> bool:
        """Whether this replica decides the instance (or Workflow) with this log key."""
        return partition_for(key, self.settings.partitions) in self.owned

    # ---- the fold and the outbox ------------------------------------------------------------

    def fold(self, record: r.Record, key: str) -> None:
        """One record of the instance log, as the shell's take-over reads it (sealed)."""
        self._fold(key, sealing.open_record(record, self.ring))

    def _fold(self, key: str, rec: r.Record) -> None:
        if isinstance(rec, r.CommandDecided):
            self.intake.remember(rec.commandId)
            self.checkpoints.remember(key, rec.commandId)
            return
        if isinstance(rec, r.InstancesPurged) or not isinstance(rec, r.WorkflowRecord):
            return  # the marker after the per-instance purges (WF-13); nothing else is on this log
        if self.table.fold(key, rec) is not None:  # purged: nothing of it is kept
            self.scheduler.forget(key)

    def adopt(self, key: str, inst: Instance) -> None:
        """An instance as a snapshot holds it (`_checkpoints`): in the table as if folded."""
        self.table.adopt(key, inst)

    def remember(self, command_id: str) -> None:
        self.intake.remember(command_id)

    def emit(self, key: str, records: Sequence[r.Record]) -> "asyncio.Future[None]":
        """Fold now, commit in order; the future resolves once the transaction holding them committed."""
        box = self._outbox_of(key, any(elsewhere(rec, key) is None for rec in records))
        outs: list[tuple[str, str, Any]] = []
        inst = self.instances.get(key)
        for rec in records:
            self.metrics.observe(rec, inst.space if inst is not None else "")
            route = elsewhere(rec, key)
            if route is not None:
                outs.append((self.settings.topic(route[0]), route[1], rec))
            elif isinstance(rec, r.WorkflowRecord):
                outs += self._sealed(key, rec)
            else:  # a command's answer
                self._fold(key, rec)
                outs.append((self.settings.topic("workflow"), key, rec))
        return box.put(outs)

    def _outbox_of(self, key: str, to_log: bool) -> Box:
        """The outbox of the key's partition. Records for other topics only (the control plane's
        commands, a queue's messages) may go through any partition's: its producer is fenced
        all the same. Deciding on another replica's instance is a fault, caught before the fold."""
        box = self.outboxes.get(partition_for(key, self.settings.partitions))
        if box is not None:
            return box
        if to_log or not self.outboxes:
            raise RuntimeError(f"the instance log's key {key!r} is another replica's")
        return self.outboxes[min(self.outboxes)]

    def put(self, out: kafka.Out) -> None:
        """One record of no instance's (a quarantined command), committed with the rest."""
        self._outbox_of(out.key, False).put([(out.topic, out.key, out.record)])

    async def flushed(self) -> None:
        """Once everything put so far has committed; raises if a commit failed (the group's
        offsets must then not move past the commands it held)."""
        for box in list(self.outboxes.values()):
            await box.idle()
            if box.failed is not None:
                raise RuntimeError("a commit failed")

    def _sealed(self, key: str, rec: r.WorkflowRecord) -> list[tuple[str, str, Any]]:
        """Fold one record and give what goes out for it: its new keys, the record sealed with
        them, and the tombstones of the keys it destroys, in that order (one transaction)."""
        keys = self.settings.topic("workflow.keys")
        part = self.table.partition_of
        change = _keys.changes(
            self.instances.get(key),
            rec,
            self.ring,
            self.now(),
            lambda: f"dk_{ids.new_ulid()}",
            lambda iid: part(instance_key(rec.workflowUid, iid)) == part(key),  # asked by a purge only
        )
        outs: list[tuple[str, str, Any]] = []
        for made in change.made:
            self.ring.add(made)
            outs.append((keys, made.keyId, made))
        self._fold(key, rec)
        outs.append((self.settings.topic("workflow"), key, sealing.seal_record(rec, self.ring)))
        for dropped in change.dropped:
            self.ring.drop(dropped)
            outs.append((keys, dropped, None))
        return outs

    def control_command(self, space: str, command: ControlCommand) -> r.CommandSubmitted:
        return submitted(
            command, command_id=ids.new_ulid(), space=space, principal="sumi-workflow", admin=True, now=now_ms()
        )

    # ---- commands ------------------------------------------------------------------------------

    def decide_now(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller) -> None:
        if isinstance(cmd, c.TerminateInstance):
            self.terminate(key, cmd, caller)
        else:
            now = self.now()
            self.apply(key, self.decide(key, cmd, caller, now))
            self.scheduler.start_alone(key, now)

    def terminate(self, key: str, cmd: c.TerminateInstance, caller: d.Caller) -> Answer:
        """WF-26: every terminate is decided, once, whatever state the instance is in. A live run,
        wherever it is (its context start in flight, running, stopping), is stopped first and the
        terminate decided in `ended` once the stop is proven; without one it is decided now. The
        answer resolves once the decision has committed."""
        answer: Answer = asyncio.get_running_loop().create_future()
        run = self.runs.get(key)
        if run is None:
            self._terminate_now(key, cmd, caller, answer)
        else:
            self.terminates.setdefault(key, []).append((caller, cmd, answer))
            run.stop()
        return answer

    def _terminate_now(
        self, key: str, cmd: c.TerminateInstance, caller: d.Caller, answer: Answer
    ) -> "asyncio.Future[None]":
        self.intake.release(caller.command_id)
        decision = self.decide(key, cmd, caller, self.now())
        record = next(x for x in decision.records if isinstance(x, r.CommandDecided))
        committed = self.apply(key, decision)
        committed.add_done_callback(lambda f: _settle(answer, f, record))
        return committed

    def decide(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller, now: int) -> d.Decision:
        inst = self.instances.get(key)
        if isinstance(cmd, c.CreateInstance):
            return d.create(inst, cmd, self.control.view(cmd.workflow_uid), caller, now)
        if self.control.view(cmd.workflow_uid).closed:
            # Intake is closed while the Workflow is deleted (WF-13): every instance path answers
            # as it will once the delete has succeeded (host-api.md section 5), as a create does.
            return d.Decision([d.rejected(caller, now, Problem("not_found", "the Workflow is being deleted"))])
        if isinstance(cmd, c.SendEvent):
            return d.event(inst, cmd, caller, now, self.limits, key in self.runs)
        if isinstance(cmd, c.QueryInstance):
            return d.query(inst, cmd, caller, now)
        return d.terminate(inst, cmd, caller, now, key in self.runs)

    def apply(self, key: str, decision: d.Decision) -> "asyncio.Future[None]":
        fut = self.emit(key, decision.records)
        if decision.runnable:
            self.scheduler.mark(key)
        return fut

    # ---- runs ------------------------------------------------------------------------------

    async def ended(self, run: ContextRun, outcome: WorkflowOutcome) -> None:
        """The context of `run` has physically stopped: publish what follows from it."""
        key, now = run.key, self.now()
        self.runs.pop(key, None)
        if self.closing:  # the engine is going down: the next one decides from the log
            return
        decision, delay = self.scheduler.ended(run, outcome, now)
        futures = [] if decision is None else [self.apply(key, decision)]
        for caller, cmd, answer in self.terminates.pop(key, []):
            futures.append(self._terminate_now(key, cmd, caller, answer))
        self.scheduler.requeue(key, delay, now)  # after the terminates: a terminated instance needs none
        for fut in futures:
            await fut

    def start_run(self, key: str, class_name: str, allocation: list[tuple[str, int]], solo: bool) -> None:
        """A new execution context for the instance (the scheduler's choice), live from now on."""
        run = ContextRun(self, key, class_name, allocation, solo=solo)
        self.runs[key] = run
        run.start()
        if run.task is not None:
            self.run_tasks.add(run.task)
            run.task.add_done_callback(self.run_tasks.discard)

    async def runtime(self, kind: str, space: str = "") -> Runtime:
        """The one runtime of a kind for a Space, started once however many runs ask at the same time."""
        if self.closing:
            raise RuntimeError("the workflow engine is stopping")
        return await self.runtimes.get(kind, space)

    async def restart_runtimes(self) -> None:
        """A stop the runtime did not confirm is proven the only certain way: its process exits."""
        self.spares.forget()
        await self.runtimes.restart()

    # ---- the clock ---------------------------------------------------------------------------

    def step(self) -> int | None:
        """Decide everything that is due now; return when to look again. Deletes and reports go
        between the timers and the starts, so a context is never started for an instance this
        step purges."""
        now = self.now()
        self.scheduler.fire(now)
        self.deletes.step()
        if now - self._last_observe >= OBSERVE_MS:
            self._last_observe = now
            self.counts.step()
            self.spares.retire({v for wf in self.control.workflows() for v, _ in self.control.allocation(wf)})
        self.scheduler.start_runs(now)
        return self.scheduler.next_look()

    async def schedule(self) -> None:
        await clock.drive(self.step, self.scheduler.wake)

    # ---- reading the logs ------------------------------------------------------------------

    def capture(self, partition: int, snapshot_id: str) -> tuple[list[r.WorkflowSnapshotChunk], int]:
        return self.checkpoints.capture(partition, snapshot_id)

    async def restore(self, partition: int, chunks: list[r.Record]) -> None:
        await self.checkpoints.restore(partition, chunks)  # the keys are folded: documents open

    def _fold_keys(self, m: Any, before_end: bool = True) -> None:
        if m.key is None:
            return
        key_id = m.key.decode()
        if m.value is None:  # a tombstone: the key was destroyed by a purge
            self.ring.fold(key_id, None)
            return
        kafka.fold_or_skip("workflow-engine", m, lambda record: self.ring.fold(key_id, record))

    def _fold_control(self, m: Any, before_end: bool = True) -> None:
        kafka.fold_or_skip("workflow-engine", m, self.control.fold)

    async def run(self) -> None:
        """One replica: the commands' partitions it is given, each assignment a generation."""
        try:
            await self.shell.run()
        finally:
            await self.worklogs.close()

    def take(self, message: Any) -> None:
        self.intake.take(message)
        self.scheduler.wake.set()

    async def _reader(
        self, stack: contextlib.AsyncExitStack, topic: str
    ) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
        consumer = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        await kafka.started(stack, consumer)
        return consumer, await kafka.partitions(consumer, topic)

    async def prepare(self, partitions: frozenset[int], stack: contextlib.AsyncExitStack) -> None:
        """Before the instance log: the keys (its documents open with them), the control log."""
        self.owned = partitions
        self.commands = self.shell.consumer
        self.admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap)
        stack.push_async_callback(self.admin.close)  # an admin client closes, it does not stop
        await self.admin.start()
        keys_reader, keys_tps = await self._reader(stack, self.settings.topic("workflow.keys"))
        # Every partition's keys: an owned instance's key lies wherever its ID hashes.
        await kafka.read_to_end(keys_reader, keys_tps, self._fold_keys)
        await keys_reader.stop()
        self.control_reader, self.control_tps = await self._reader(stack, self.settings.topic("control"))
        await kafka.read_to_end(self.control_reader, self.control_tps, self._fold_control)
        # A short long-poll: a partition resumed while a fetch of others is in flight waits for it.
        replies = await kafka.started(stack, kafka.new_consumer(self.settings, fetch_max_wait_ms=50, idle_wait_ms=50))
        self.replies.attach(replies, await kafka.partitions(replies, self.settings.topic("workflow")))

    def serve(self, outboxes: dict[int, Box]) -> Awaitable[None]:
        """Ready to decide on the owned partitions (their outboxes, their timers) now, before
        the shell hands over any command; the awaitable serves until cancelled."""
        self.outboxes = outboxes
        self.scheduler.rebuilt(self.now())
        log.info("workflow engine serves partitions %s: %d instances", sorted(self.owned), len(self.instances))
        return self._serve()

    async def _serve(self) -> None:
        """Decide on the owned partitions until cancelled; then stop their contexts, proven."""
        assert self.admin is not None and self.control_reader is not None and self.commands is not None
        commands, admin, control_reader = self.commands, self.admin, self.control_reader
        try:
            # A TaskGroup: one failure (a fenced producer above all) cancels every other loop at once.
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self.replies.run())
                tasks.create_task(self.schedule())
                tasks.create_task(self.intake.commit_offsets(commands))
                tasks.create_task(self.intake.delete_decided(admin))
                tasks.create_task(kafka.follow(control_reader, self._fold_control, self.scheduler.unblock))
                tasks.create_task(self.intake.recheck(control_reader, self.control_tps))
                readers = [commands, control_reader]
                refresh = lambda: self._refresh_metrics(readers)  # noqa: E731
                tasks.create_task(exporter.export(self.settings, "workflow", self.registry, refresh))
        finally:
            self.closing = True
            await self.spares.close()
            runs = list(self.runs.values())
            for run in runs:
                run.stop()
            pending = list(self.run_tasks)
            if pending:  # each stops its context physically; bounded, the runtimes' exit proves the rest
                await asyncio.wait(pending, timeout=5)
                for task in pending:
                    task.cancel()  # e.g. one still starting its runtime process
                await asyncio.gather(*pending, return_exceptions=True)
            await self.runtimes.close()

    async def _refresh_metrics(self, readers: list[AIOKafkaConsumer]) -> None:
        self.metrics.count(self.table.counts.per, self._space_of)
        await self.plumbing.refresh(self.runtimes, readers)

    def _space_of(self, uid: str) -> str:
        space = self.control.state.space_of(uid)
        return space.name if space is not None else ""


def warn_if_nonconformant(settings: Settings) -> None:
    """Settings only SUMI_NONCONFORMANT_TEST_SETTINGS=1 allows are said at start, every time."""
    for why in settings.nonconformance():
        log.warning("this Host is not conformant to DurableWorkflow 0.3.0: %s", why)


def _settle(answer: Answer, committed: "asyncio.Future[None]", record: r.CommandDecided) -> None:
    if answer.done():  # its waiter gave up (e.g. a binding call of a context that stopped)
        return
    if committed.cancelled() or committed.exception() is not None:
        answer.set_exception(RuntimeError("the terminate's decision could not be committed"))
    else:
        answer.set_result(record)


__all__ = ["Engine"]
