"""The workflow engine's command intake: `workflow.commands` read, each command decided once.

Commands are read from the group's committed offsets; each is handed to the engine to decide
against its fold. The group's offsets are committed after the decisions they cover, never
past a command still undecided (a terminate waiting for its context's stop, a create waiting
for the control log), and decided command IDs are remembered from the log, so a command read
twice after a crash is decided once. Commands are an inbox, not a history: once the group's
offsets past them are committed, they are deleted from the topic (DeleteRecords), so the
params and payloads they carried do not outlive the data they became.
"""

import asyncio
import logging
from collections import OrderedDict
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import CommitFailedError, IllegalGenerationError, KafkaError, RebalanceInProgressError

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.core.problems import Problem
from sumi.wire import kafka
from sumi.workflow import commands as c
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._control import WorkflowControl

log = logging.getLogger("sumi.workflow")
REMEMBERED_COMMANDS = 200_000
DELETE_EVERY_S = 5.0  # how soon a decided command's payload leaves workflow.commands


class Decider(Protocol):
    """What the intake needs of the engine (so this module never imports it)."""

    control: WorkflowControl

    def now(self) -> int: ...

    def emit(self, key: str, records: list[r.Record]) -> "asyncio.Future[None]": ...

    def put(self, out: kafka.Out) -> None: ...

    def decide_now(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller) -> None: ...

    async def flushed(self) -> None: ...


class Intake:
    def __init__(self, settings: Settings, engine: Decider) -> None:
        self.engine = engine
        self.quarantine = kafka.Quarantine(settings, "workflow-engine")
        self.decided: OrderedDict[str, None] = OrderedDict()
        self.held: dict[str, tuple[TopicPartition, int]] = {}  # undecided command id -> its offset
        self.read: dict[TopicPartition, int] = {}  # next offset per commands partition
        self.deferred: dict[str, list[tuple[d.Caller, c.WorkflowCommand]]] = {}
        self.wake_recheck = asyncio.Event()
        self.moved = asyncio.Event()  # the offsets the group may commit moved on (`offsets`)
        self.committed: dict[TopicPartition, int] = {}  # what `commit_offsets` committed

    def remember(self, command_id: str) -> None:
        """A decision folded from the log (or just made): the command is never decided again."""
        self.decided[command_id] = None
        if len(self.decided) > REMEMBERED_COMMANDS:
            self.decided.popitem(last=False)

    def release(self, command_id: str) -> None:
        """The command is decided: the group's offsets may move past it."""
        self.held.pop(command_id, None)
        self.moved.set()

    def take(self, message: Any) -> None:
        tp = TopicPartition(message.topic, message.partition)
        if message.offset < self.read.get(tp, 0):
            return  # read again after a rebalance put the position back (decided or held already)
        self.read[tp] = message.offset + 1
        self.moved.set()
        rec = kafka.decode(message.value)
        if isinstance(rec, kafka.Rejected):
            self._quarantine(message, rec)
            return
        try:
            self._take(message, tp, rec)
        except Exception as exc:  # a command this engine cannot handle must not stop every workflow
            log.exception("workflow engine could not handle %s[%d]@%d", tp.topic, tp.partition, message.offset)
            self._quarantine(message, kafka.failed(exc))

    def _quarantine(self, message: Any, why: kafka.Rejected) -> None:
        """Set a command aside; the group's offset moves past it only once this has committed."""
        self.engine.put(self.quarantine.out(message, why))

    def _take(self, message: Any, tp: TopicPartition, rec: r.Record) -> None:
        if not isinstance(rec, r.CommandSubmitted) or rec.commandId in self.decided:
            return
        engine = self.engine
        caller = d.Caller(rec.commandId, rec.space, rec.principal, rec.kind)
        try:
            cmd = c.decode(rec.kind, rec.payload)
        except Problem as problem:
            engine.emit(message.key.decode() if message.key else rec.space, [d.rejected(caller, engine.now(), problem)])
            return
        key = c.key_of(cmd)
        view = engine.control.view(cmd.workflow_uid)
        if key in self.deferred or (isinstance(cmd, c.CreateInstance) and not (view.exists and view.ready)):
            # Before a create is refused for a Workflow this engine does not know (yet), the control
            # log is read to its current end: the Workflow may have been created a moment ago. Later
            # commands of the same instance wait behind it, so their order stays the log's.
            self.held[rec.commandId] = (tp, message.offset)
            self.deferred.setdefault(key, []).append((caller, cmd))
            self.wake_recheck.set()
            return
        if isinstance(cmd, c.TerminateInstance):
            self.held[rec.commandId] = (tp, message.offset)  # until decided: a run may have to stop first
        engine.decide_now(key, cmd, caller)

    async def recheck(self, reader: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        """Decide deferred commands once the control log has been folded up to its end as of now."""
        while True:
            await self.wake_recheck.wait()
            self.wake_recheck.clear()
            if not self.deferred:
                continue
            ends = await reader.end_offsets(tps)
            for _ in range(500):  # at most ~5 s behind; then decide on what is known
                if not await kafka.behind(reader, ends):
                    break
                await asyncio.sleep(0.01)
            deferred, self.deferred = self.deferred, {}
            for key, entries in deferred.items():
                for caller, cmd in entries:
                    if not isinstance(cmd, c.TerminateInstance):
                        self.held.pop(caller.command_id, None)
                        self.moved.set()
                    self.engine.decide_now(key, cmd, caller)

    def offsets(self) -> dict[TopicPartition, int]:
        """How far the group may commit: never past a command that is still undecided."""
        out = dict(self.read)
        for tp, offset in self.held.values():
            out[tp] = min(out.get(tp, offset), offset)
        return out

    async def commit_offsets(self, consumer: AIOKafkaConsumer) -> None:
        """The group's offsets, committed after the decisions they cover (every outbox flushed
        first: each partition's commits in order, the partitions' side by side), into
        `committed`, whose commands `delete_decided` then deletes."""
        while True:
            # Asleep while nothing moves (an idle engine wakes for nothing); then a moment
            # more, so one commit covers what comes in a burst.
            await self.moved.wait()
            await asyncio.sleep(0.2)
            self.moved.clear()
            offsets = {tp: o for tp, o in self.offsets().items() if self.committed.get(tp) != o}
            if not offsets:
                continue
            await self.engine.flushed()
            try:
                await consumer.commit(offsets)
            except (CommitFailedError, IllegalGenerationError, RebalanceInProgressError) as exc:
                # A replica joined (or left) meanwhile: the same offsets go with the next round.
                log.info("workflow engine: committing the commands' offsets after a rebalance (%s)", exc)
                self.moved.set()
                continue
            except KafkaError as exc:  # a broker died: the group's coordinator moves; next round
                log.warning("workflow engine: the commands' offsets wait for the next round (%r)", exc)
                self.moved.set()
                continue
            self.committed.update(offsets)

    async def delete_decided(self, admin: AIOKafkaAdminClient) -> None:
        """Delete the commands before the group's committed offsets: their documents live on
        only sealed in the instance log. The admin client reads the whole cluster's metadata for
        every DeleteRecords (a quarter of this engine's CPU at 300 steps/s on a broker with many
        topics, when it ran with every commit): the decided commands go every few seconds."""
        deleted: dict[TopicPartition, int] = {}
        while True:
            await asyncio.sleep(DELETE_EVERY_S)
            gone = {tp: o for tp, o in self.committed.items() if deleted.get(tp) != o}
            if not gone:
                continue
            try:
                await admin.delete_records({tp: RecordsToDelete(o) for tp, o in gone.items()})
            except KafkaError as exc:  # housekeeping: a broker died meanwhile; next time
                log.warning("workflow engine: decided commands are deleted later (%r)", exc)
                continue
            deleted.update(gone)
