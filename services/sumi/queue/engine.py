"""The queue engine: delivers every Consumer's queue to its worker, at least once (QC-21..45).

Plumbing around the pure core (`_state`, `_decide`, `_batching`):
- The queue log (topic `queue`, keyed by queue UID) is the engine's input and its
  changelog at once. Replicas of the engine share its partitions through the engine shell
  (`sumi.engines.shell`, a `Serving` processor of its own log): for each assignment a
  replica fences the previous owners with the partitions' transactional producers, restores
  their latest snapshots and folds them from there up to the end offsets it found
  (read_committed), then is handed each record after those ends once: either a new
  `MessageAccepted` (folded: the gateway's, or another replica's dead letters and binding
  sends) or its own record (already folded when decided, skipped unread). Every decision
  about a queue commits through the outbox of the queue's partition, so a fenced replica
  commits nothing.
- The control log is read as a global table (no group), before any partition is taken.
- A record in either log that is no record of ours, or that a fold refuses, is
  skipped (logged): the projections of both topics quarantine and count it.
- Every decision is folded at once and committed through the outbox; a batch
  is committed before its handler starts, a settlement before its Promise
  resolves, an end-of-batch before a delete reports its stop boundary.
- Memory is bounded (`_memory`): the fold learns where each MessageAccepted lies in the
  log; a body past the budget is read back by offset when its batch is delivered
  (`_bodies`), all of one batch's together, while its BatchDelivered commits.
- After a restart or a takeover, every batch the log shows open was abandoned by
  the old owner: its unsettled messages are owed again at once (QC-43, QC-44);
  nothing is acknowledged by inference. A replica losing partitions first stops
  their batches' handlers and commits their ends (QC-42's proof, across replicas).
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from sumi.control.rules.state import OperationView
from sumi.core import clock, ids
from sumi.core import records as r
from sumi.core.clock import now_ms
from sumi.core.commands import Command, OperationReport, ResourceObserve, submitted
from sumi.core.config import Settings
from sumi.core.problems import Problem
from sumi.engines import exporter
from sumi.engines.metrics import PlumbingMetrics
from sumi.engines.runtimes import Runtimes
from sumi.engines.shell import Shell
from sumi.engines.worklogs import WorkerLogs
from sumi.queue._contexts import ContextPool, Key
from sumi.queue._metrics import QueueMetrics
from sumi.queue._runs import BatchRun, Workflows, gone, new_id
from sumi.queue.rules import _decide as d
from sumi.queue.rules import _snapshot as snapshot
from sumi.queue.rules._batching import pick_version, plan
from sumi.queue.rules._control import LIVE, Consumer, ControlTable
from sumi.queue.rules._memory import BodyBudget
from sumi.queue.rules._state import ENGINE_RECORDS, EngineState, evolve
from sumi.runtime.types import Runtime
from sumi.wire import codec, kafka
from sumi.wire.bodies import BodyReader
from sumi.wire.outbox import Box
from sumi.wire.topics import partition_for

log = logging.getLogger("sumi.queue")
SWEEP_MS = 1000
DRAIN_S = 4.0  # for the handlers of revoked partitions to stop, before their runtime is restarted


_ACCEPTED_FP = codec.encode(r.MessageAccepted("q", "s", "m", b"", 0, 0))[2:10]


class Engine:
    def __init__(self, settings: Settings, workflows: Workflows) -> None:
        self.settings = settings
        self.state = self._new_state()
        self.body_reader: BodyReader | None = None
        self.reading: set[str] = set()  # exhausted messages whose bodies are being read back
        self._reads: set[asyncio.Task[None]] = set()
        self.control = ControlTable()
        self.workflows = workflows
        self.runs: dict[str, BatchRun] = {}
        self.windows: dict[str, int | None] = {}
        self.observed_sent: dict[str, dict[str, bool]] = {}
        self.reported: set[str] = set()
        self.reconciling: set[str] = set()
        self._restarting: asyncio.Future[None] | None = None
        self.wake = asyncio.Event()
        self.owned = frozenset[int]()  # the partitions served: decided here, until their drain
        self.outboxes: dict[int, Box] = {}  # one per held partition, on its fenced producers
        queue = settings.topic("queue")
        self.shell = Shell(
            settings,
            "queue-engine",
            queue,
            self,
            changelog_topic=queue,
            turns=2,
            snapshots="queue",
            max_partition_fetch_bytes=4 << 20,
        )
        self._next_sweep: int | None = 0  # when the retention sweep is due; None: no message to expire
        self.runtimes = Runtimes(settings)  # one per kind
        self.contexts = ContextPool(on_stopped=self.wake.set)
        self.registry = CollectorRegistry()
        self.worklogs = WorkerLogs(settings, self.registry)
        self.metrics = QueueMetrics(self.registry)
        self.plumbing = PlumbingMetrics(self.registry)

    # ---- emitting ----------------------------------------------------------------------------

    def emit(self, records: list[Any], via: str) -> "asyncio.Future[None]":
        """Fold the engine's own records now and commit everything in order, in one transaction
        of the partition of queue `via` (the queue decided about; a dead letter or a binding's
        send goes to another queue, maybe another replica's, which folds it when it reads it)."""
        outbox = self.outboxes.get(self.of(via))
        if outbox is None:  # lost in a rebalance meanwhile: its new owner decides again
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lost.set_exception(RuntimeError(f"queue {via} is not this replica's"))
            lost.exception()  # retrieved: whoever awaits it still sees it
            return lost
        outs = []
        for rec in records:
            self.metrics.observe(rec, self._space_of)
            if isinstance(rec, ENGINE_RECORDS) and self.owns(rec.queueUid):
                evolve(self.state, rec)
            if isinstance(rec, r.CommandSubmitted):
                outs.append((self.settings.topic("commands"), rec.space, rec))
            else:
                outs.append((self.settings.topic("queue"), rec.queueUid, rec))
        return outbox.put(outs)

    def command(self, space: str, command: Command) -> r.CommandSubmitted:
        return submitted(
            command, command_id=ids.new_ulid(), space=space, principal="sumi-queue", admin=True, now=now_ms()
        )

    def _space_of(self, queue_uid: str) -> str:
        space = self.control.state.space_of(queue_uid)
        return space.name if space is not None else ""

    def of(self, queue_uid: str) -> int:
        return partition_for(queue_uid, self.settings.partitions)

    def owns(self, queue_uid: str) -> bool:
        return self.of(queue_uid) in self.owned

    def consumer(self, uid: str) -> Consumer | None:
        return self.control.consumer(uid)

    def servable(self, key: Key) -> bool:
        """Whether a warm context of (Consumer, Version) may serve another batch."""
        c = self.consumer(key[0])
        if c is None or c.state not in LIVE or not self.owns(c.queue):
            return False
        return any(v == key[1] for v, _ in self.control.allocation(c.worker))

    async def runtime(self, kind: str, space: str = "") -> Runtime:
        """The one runtime of a kind for a Space, started once however many batches ask at the same time."""
        return await self.runtimes.get(kind, space)

    # ---- the scheduler -----------------------------------------------------------------------

    def step(self) -> int | None:
        """Decide everything that is due now; return when to look again."""
        now = now_ms()
        wake: list[int] = []
        self._purge_deleted(now)
        self.contexts.retire(self.servable)
        if self._next_sweep is not None and now >= self._next_sweep:
            self._next_sweep = self._sweep(now)
        if self._next_sweep is not None:
            wake.append(self._next_sweep)
        for c in self.control.consumers():
            if not self.owns(c.queue):
                continue  # another replica's
            if c.state == "deleting":
                self._stop_boundary(c)
                continue
            if c.state not in LIVE:
                continue
            self._observe(c)
            at = self._deliver(c, now)
            if at is not None:
                wake.append(at)
        for q in self.state.queues.values():
            # Due messages nobody delivers (a dead-letter queue without a Consumer, a paused one)
            # would otherwise stay due in the past, and the engine would wake at once for ever.
            q.promote(now)
            due = q.next_due()
            if due is not None:
                wake.append(due)
        return min(wake) if wake else None

    def _deliver(self, c: Consumer, now: int) -> int | None:
        queue = self.control.queue(c.queue)
        allocation = self.control.allocation(c.worker)
        if queue is None or queue.state not in LIVE or not allocation:
            return None  # no usable Version: deliveries pause (forms.md, WorkerDeployment)
        q = self.state.queue(c.queue)
        q.promote(now)
        while True:
            in_flight = sum(1 for b in self.state.batches.values() if b.consumer_uid == c.uid)
            p = plan(
                q.ready_total(),
                in_flight,
                c.max_batch_size,
                c.max_batch_timeout_s,
                c.max_concurrency,
                self.windows.get(c.uid),
                now,
            )
            self.windows[c.uid] = p.window_opened
            if not p.send:
                return p.wake_at
            out = d.deliver(self.state, c, lambda seed: pick_version(allocation, seed), now, new_id)
            if out.unread:
                self._read_back(c.queue, out.unread)
            batch = out.batch
            messages = (
                [(mid, q.messages[mid].accepted_at, q.messages[mid].body) for mid in batch.messageIds] if batch else []
            )
            committed = self.emit(out.records, c.queue)
            if batch is None:
                if not out.records:
                    return None
                continue
            run = BatchRun(self, c.uid, batch, queue.name, messages, committed)
            self.runs[batch.batchId] = run
            run.start()

    async def bodies(self, queue_uid: str, mids: list[str]) -> dict[str, bytes]:
        """The bodies of these messages, read back from the log where the state lacks them;
        held then until the message is pending again or leaves (a dead letter copies it)."""
        assert self.body_reader is not None
        q = self.state.queue(queue_uid)
        messages = [m for mid in mids if (m := q.messages.get(mid)) is not None]
        want = {m.at: m.id for m in messages if m.body is None and m.at is not None}
        read = await self.body_reader.read(list(want)) if want else {}
        q = self.state.queue(queue_uid)  # a purge may have replaced it meanwhile
        for at, body in read.items():
            q.hold(want[at], body)
        return {m.id: m.body for m in messages if m.body is not None} | {want[at]: b for at, b in read.items()}

    def _read_back(self, queue_uid: str, mids: tuple[str, ...]) -> None:
        """Exhausted pending messages to dead-letter: their bodies first, then decide again."""
        todo = [mid for mid in mids if mid not in self.reading]
        if todo:
            self.reading.update(todo)
            task = asyncio.create_task(self._read_pending(queue_uid, todo))
            self._reads.add(task)
            task.add_done_callback(self._reads.discard)

    async def _read_pending(self, queue_uid: str, mids: list[str]) -> None:
        try:
            if len(await self.bodies(queue_uid, mids)) < len(mids):
                # Settled meanwhile, or not in the log: ask again later, not in a busy loop.
                await asyncio.sleep(1)
        except Exception:
            log.exception("reading back bodies of %s", queue_uid)
            await asyncio.sleep(1)  # the next step asks again
        finally:
            self.reading.difference_update(mids)
            self.wake.set()

    def _stop_boundary(self, c: Consumer) -> None:
        """QC-42: stop what is in flight; report the delete once every batch has ended."""
        for b in self.state.open_batches(c.uid):
            run = self.runs.get(b.id)
            if run is not None:
                run.stop()
        op = self.control.unfinished_delete(c.uid)
        if op is None or op.state == "pending" or op.id in self.reported:
            return
        if self.state.open_batches(c.uid) or self.contexts.stopping(c.uid):
            return
        if c.uid in self.contexts.unconfirmed:
            self._reconcile_stop(c, op)
            return
        self.reported.add(op.id)
        report = OperationReport(operation_id=op.id, outcome="succeeded", effect="complete")
        self.emit([self.command(c.space, report)], c.queue)

    def _reconcile_stop(self, c: Consumer, op: OperationView) -> None:
        """QC-42, QC-47: a stop the runtime did not confirm leaves the boundary unproven.

        The delete is reported `reconciling` with effect `unknown` (once), and the stop is
        proven the only certain way: the runtime processes exit, taking every context with
        them (their other batches end as stopped and are redelivered: at least once)."""
        if op.id not in self.reconciling:
            self.reconciling.add(op.id)
            self.emit(
                [
                    self.command(
                        c.space,
                        OperationReport(
                            operation_id=op.id,
                            outcome="reconciling",
                            effect="unknown",
                            error=Problem(
                                "backend_unavailable", "a handler's stop was not confirmed; stopping its runtime"
                            ).to_json(),
                        ),
                    )
                ],
                c.queue,
            )
        if self._restarting is None or self._restarting.done():
            self._restarting = asyncio.ensure_future(self._restart_runtimes())

    async def _restart_runtimes(self) -> None:
        await self.runtimes.restart()  # returns once the processes have exited
        self.contexts.unconfirmed.clear()
        self.wake.set()

    def _observe(self, c: Consumer) -> None:
        """QC-35: what the engine last confirmed about this Consumer."""
        queue, worker = self.control.queue(c.queue), self.control.worker(c.worker)
        observed = {
            "queueExists": queue is not None,
            "workerExists": worker is not None,
            "consumerAttached": queue is not None and worker is not None,
        }
        res = self.control.resource(c.uid)
        if observed == self.observed_sent.get(c.uid) or res is None or observed == res.observed:
            return
        self.observed_sent[c.uid] = observed
        self.emit([self.command(c.space, ResourceObserve(uid=c.uid, observed=observed))], c.queue)

    def _purge_deleted(self, now: int) -> None:
        for uid in list(self.control.deleted_queues):
            if uid in self.state.queues and not self.state.queues[uid].purged:
                for b in [b for b in self.state.batches.values() if b.queue_uid == uid]:
                    run = self.runs.get(b.id)
                    if run is not None:
                        run.stop()
                self.emit(d.purge(self.state, uid, now), uid)

    def _sweep(self, now: int) -> int | None:
        """Discards what outlived its retention; returns when the next message will (a message
        in flight past it is discarded once its batch ends: looked at again every SWEEP_MS)."""
        due: list[int] = []
        for uid in list(self.state.queues):
            queue = self.control.queue(uid)
            if queue is not None and self.state.queues[uid].has_messages():
                retention = int(queue.spec["retentionSeconds"])
                self.emit(d.expire(self.state, uid, retention, now), uid)
                at = d.next_expiry(self.state, uid, retention)
                if at is not None:
                    due.append(max(at, now + SWEEP_MS))
        return min(due) if due else None

    def _sweep_soon(self) -> None:
        """New messages, or a queue's retention changed: sweep within SWEEP_MS, which also
        bounds how often a busy engine sweeps."""
        soon = now_ms() + SWEEP_MS
        self._next_sweep = soon if self._next_sweep is None else min(self._next_sweep, soon)

    async def schedule(self) -> None:
        await clock.drive(self.step, self.wake, max_idle_s=None)

    # ---- reading the logs --------------------------------------------------------------------

    async def _reader(self, stack: contextlib.AsyncExitStack, topic: str) -> tuple[AIOKafkaConsumer, list[Any]]:
        # A fetch is a long poll: the broker answers as soon as committed data is there, so
        # its wait only bounds idle polling. A short one costs the engine and the broker a
        # fetch round every few ms for nothing (a third of the engine's CPU under load).
        consumer = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        await kafka.started(stack, consumer)
        return consumer, await kafka.partitions(consumer, topic)

    def take(self, m: Any) -> None:
        """A record of the log: of a take-over's fold (its partition not served yet), or read
        after it. Past the fold only appends by others are new; the rest was folded when
        decided. A record that is no record of ours is skipped (the queue projection
        quarantines it)."""
        rebuilding = m.partition not in self.owned
        if rebuilding or (m.value is not None and m.value[2:10] == _ACCEPTED_FP):
            at = (m.partition, m.offset)  # where a MessageAccepted's body can be read back
            kafka.fold_or_skip("queue-engine", m, lambda record: evolve(self.state, record, at))
            if not rebuilding:
                self._sweep_soon()
                self.wake.set()

    def fold(self, record: Any, key: str) -> None:
        """A record without its position: the shell hands this log's records to `take`."""
        evolve(self.state, record)

    def _fold_control(self, m: Any, rebuilding: bool = False) -> None:
        kafka.fold_or_skip("queue-engine", m, self.control.fold)
        self._sweep_soon()

    # ---- the partitions this replica serves (sumi.engines.shell) ------------------------------

    def _new_state(self) -> EngineState:
        budget = BodyBudget(self.settings.queue_body_budget_bytes)
        return EngineState(
            settled_window=self.settings.queue_settled_window,
            hot_messages=self.settings.queue_hot_messages,
            bodies=budget,
        )

    def reset(self) -> None:
        self.owned, self.outboxes = frozenset(), {}
        self.state = self._new_state()
        self._next_sweep = 0
        self.windows.clear()
        self.observed_sent.clear()

    async def prepare(self, partitions: frozenset[int], stack: contextlib.AsyncExitStack) -> None:
        """Nothing to read per assignment: the control log is the engine's, read before any."""

    def serve(self, outboxes: dict[int, Box]) -> Awaitable[None]:
        """The partitions are folded: what their log shows open was abandoned (`_recover`);
        decide on them until the revocation, then drain them."""
        self.outboxes, self.owned = outboxes, frozenset(outboxes)
        log.info("queue engine took over: %d queues, %d open batches", len(self.state.queues), len(self.state.batches))
        self._recover()
        self._next_sweep = 0
        self.wake.set()
        return self._serve()

    async def _serve(self) -> None:
        try:
            await self.schedule()
        finally:
            await self.drain()

    async def drain(self) -> None:
        """Before the partitions go to another replica: every handler stopped, its end committed
        (the shell waits for the outboxes). A handler that does not stop in time is stopped the
        certain way, with its runtime."""
        self.owned = frozenset()  # nothing more is delivered here
        runs = list(self.runs.values())
        for run in runs:
            run.stop()
        tasks = [run.task for run in runs if run.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
            if pending:
                await self.runtimes.restart()
                await asyncio.wait(pending, timeout=DRAIN_S)
        self.contexts.retire(self.servable)  # nothing is servable here any more

    def capture(self, partition: int, snapshot_id: str) -> tuple[Iterable[r.Record], int]:
        return snapshot.capture(self.state, lambda uid: self.of(uid) == partition, snapshot_id)

    async def restore(self, partition: int, chunks: list[r.Record]) -> None:
        """Into a state of its own first: one that is no snapshot leaves the engine's unchanged."""
        restored = replace(self.state, queues={}, batches={})  # the same body budget
        for chunk in chunks:  # a chunk at a time: the loop (heartbeats) goes on between
            if not isinstance(chunk, r.QueueSnapshotChunk):
                raise ValueError("not a queue engine's snapshot")
            snapshot.restore(restored, partition, [chunk])
            await asyncio.sleep(0)
        self.state.queues.update(restored.queues)
        self.state.batches.update(restored.batches)

    async def run(self) -> None:
        kafka.shorten_txn_retry()
        # The clients stop however the engine ends, a stop signal while it starts included.
        async with contextlib.AsyncExitStack() as stack:
            control_reader, control_tps = await self._reader(stack, self.settings.topic("control"))
            bodies = await kafka.started(stack, kafka.new_consumer(self.settings, max_partition_fetch_bytes=1 << 20))
            self.body_reader = BodyReader(bodies, self.settings.topic("queue"))
            await kafka.read_to_end(control_reader, control_tps, self._fold_control)  # before any decision
            try:
                async with asyncio.TaskGroup() as loops:  # one loop failing ends them all: the engine ends
                    loops.create_task(self.shell.run())
                    loops.create_task(kafka.follow(control_reader, self._fold_control, self.wake.set))
                    loops.create_task(self.workflows.run())
                    refresh = lambda: self._refresh_metrics(control_reader)  # noqa: E731
                    loops.create_task(exporter.export(self.settings, "queue", self.registry, refresh))
            finally:
                for run in list(self.runs.values()):
                    run.stop()
                await self.runtimes.close()
                await self.worklogs.close()

    async def _refresh_metrics(self, control_reader: AIOKafkaConsumer) -> None:
        member = self.shell.consumer  # once the shell runs
        await self.plumbing.refresh(self.runtimes, [control_reader] if member is None else [member, control_reader])

    def _recover(self) -> None:
        """Every batch still open in the log was abandoned by an earlier engine."""
        now = now_ms()
        for b in list(self.state.batches.values()):
            c = self.consumer(b.consumer_uid) or gone(b.consumer_uid, b.queue_uid)
            self.emit(d.end_batch(self.state, c, b.id, "abandoned", now, new_id), b.queue_uid)


__all__ = ["Engine", "Workflows"]
