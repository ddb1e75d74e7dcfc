"""The verifier: loads every new WorkerVersion once in a sandbox and reports what it exports.

It reads the control log (consumer group `<prefix>-verifier`, read_committed); any
number of replicas share its partitions, each partition's reports committed by a
transactional producer of its own (`sumi.core.fencing`).
For each `ResourceCreated` of a WorkerVersion it starts a context in the
worker's runtime, asks `load_info()`, stops the context, and sends
`operation.report` for the Version's create Operation to the commands topic
(keyed and partitioned by the Space, like every command). The report and the
group offset past its record commit in one Kafka transaction on the producer of the
record's partition (sumi.core.kafka), which a replica taking the partition over fences.
A new record that does not decode, or whose fold or verification raises, is
quarantined the same way (with its offset) and the verifier goes on.

The worker's runtime and declared handlers come from the public control fold
(`sumi.control.state`) of the same log (same Space, same partition, earlier). So that a restart knows
every worker, each assigned partition is read from its beginning; Versions
before the committed offset are only folded, never verified again.

Spaces cannot starve each other (docs/security.md): loads run concurrently, at most
`verify_slots` at once and `verify_slots_per_space` for one Space (`sumi.engines.fair`),
so a Space whose modules take the whole load timeout delays only its own Versions. A
report commits as soon as its load ends, in whatever order loads end; a partition's
group offset moves only up to its oldest load still running, so a restart loads that
one (and those after it) again, and a repeated report changes nothing (the control
processor ignores a report for an Operation that has ended).
"""

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from sumi.control.forms.names import MODULE_WORKER, WORKER_VERSION
from sumi.control.state import ControlState, evolve
from sumi.core import kafka
from sumi.core import records as r
from sumi.core.commands import OperationReport, submitted
from sumi.core.config import Settings
from sumi.core.fencing import Folds, PartitionProducers
from sumi.core.problems import FieldError, Problem
from sumi.engines.fair import FairSlots
from sumi.engines.runtimes import Runtimes
from sumi.runtime import Limits, Module
from sumi.runtime.types import LoadInfo

log = logging.getLogger("sumi.verifier")
PRINCIPAL = "sumi-verifier"
VERIFY_LIMITS = Limits(cpu_ms=10_000, heap_mb=128)
VERIFY_TIMEOUT = 30.0  # seconds for start + load_info, whatever the module does at top level


@dataclass(frozen=True)
class Job:
    """One Version to verify, with what the fold knew of its worker at the Version's record:
    the fold moves on while the load runs."""

    record: r.ResourceCreated
    spec: dict[str, Any]
    runtime: str | None  # None: the worker is missing or not a ModuleWorker
    declared: tuple[str, ...]  # the handlers the worker declares (QC-16)


@dataclass
class Progress:
    """Per partition: the offset after the last record read, and the loads still running.
    The group offset to commit is the oldest running load's, else the next unread."""

    read: dict[TopicPartition, int] = field(default_factory=dict)
    running: dict[TopicPartition, set[int]] = field(default_factory=dict)

    def seen(self, tp: TopicPartition, offset: int) -> None:
        self.read[tp] = offset + 1

    def started(self, tp: TopicPartition, offset: int) -> None:
        self.running.setdefault(tp, set()).add(offset)

    def ended(self, tp: TopicPartition, offset: int) -> None:
        self.running.get(tp, set()).discard(offset)

    def offsets(self) -> dict[TopicPartition, int]:
        return {tp: min(self.running.get(tp) or {end}) for tp, end in self.read.items()}


class Verifier:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.control = ControlState()
        self.act_from: dict[TopicPartition, int] = {}
        self.runtimes = Runtimes(settings)
        self.slots = FairSlots(settings.verify_slots, settings.verify_slots_per_space)
        self.progress = Progress()
        self.group = f"{settings.topic_prefix}-verifier"
        self.quarantine = kafka.Quarantine(settings, "verifier")
        self.producers = PartitionProducers(settings, "verifier", linger_ms=1)
        self.folds = Folds()  # a record or a report of an older fold is never taken or committed

    # ---- the fold -----------------------------------------------------------------------

    def fold(self, record: r.Record) -> None:
        evolve(self.control, record)

    def reset(self) -> None:
        """A new assignment is folded afresh from the beginning of its partitions."""
        self.control = ControlState()
        self.act_from.clear()
        self.progress = Progress()

    # ---- verification -------------------------------------------------------------------

    async def load(self, runtime: str, modules: list[Module], main: str, space: str = "") -> LoadInfo:
        async def attempt() -> LoadInfo:
            ctx = await (await self.runtimes.get(runtime, space)).start_context(modules, main, VERIFY_LIMITS)
            try:
                return await ctx.load_info()
            finally:
                await ctx.stop()

        last: Exception | None = None
        for tries in (1, 2):
            try:
                return await asyncio.wait_for(attempt(), VERIFY_TIMEOUT)
            except TimeoutError:
                return LoadInfo(load_error=f"loading the main module took longer than {VERIFY_TIMEOUT:.0f}s")
            except ValueError as exc:  # the Python runtime refuses a module layout
                return LoadInfo(load_error=str(exc))
            except Exception as exc:  # the runtime process itself failed: once more, fresh
                log.warning("verification attempt %d failed: %r", tries, exc)
                try:  # only this Space's: the other Spaces' loads go on
                    await self.runtimes.restart((runtime, space))
                except Exception:
                    log.exception("closing the failed runtime")
                last = exc
        return LoadInfo(load_error=f"the {runtime} runtime is unavailable: {last}")

    def job(self, record: r.ResourceCreated) -> Job:
        spec = json.loads(record.spec)
        worker = self.control.resource(spec["worker"]["resourceUid"])
        if worker is None or worker.form != MODULE_WORKER:
            return Job(record, spec, None, ())
        runtime = str(worker.spec.get("runtime", "javascript"))
        return Job(record, spec, runtime, tuple(worker.spec.get("handlers", ())))

    async def verify(self, record: r.ResourceCreated) -> OperationReport:
        """The operation.report for one Version's create Operation."""
        return await self.judge(self.job(record))

    async def judge(self, job: Job) -> OperationReport:
        spec, op = job.spec, job.record.operationId
        if job.runtime is None:
            problem = Problem("dependency_conflict", f"worker {spec['worker']['resourceUid']}: not found")
            return OperationReport(
                operation_id=op, outcome="failed", observed={"verified": False}, error=problem.to_json()
            )
        modules = [Module(m["name"], m["content"]) for m in spec["modules"]]
        async with self.slots.slot(job.record.space):
            info = await self.load(job.runtime, modules, spec["mainModule"], job.record.space)
        if info.load_error is not None:
            problem = Problem(
                "invalid_spec",
                f"the main module {spec['mainModule']} does not load: {info.load_error}",
                [FieldError("/spec/modules", info.load_error)],
            )
            observed: dict[str, Any] = {"verified": True, "loadError": info.load_error}
            return OperationReport(operation_id=op, outcome="failed", observed=observed, error=problem.to_json())
        observed = {
            "verified": True,
            "handlers": list(info.handlers),
            "workflowClasses": list(info.workflow_classes),
        }
        missing = [h for h in job.declared if h not in info.handlers]
        if missing:  # QC-16: the worker declares it, so every Version must provide it
            problem = Problem(
                "invalid_spec",
                f"the main module {spec['mainModule']} does not provide the {missing[0]!r} handler its worker declares",
                [FieldError("/spec/mainModule", f"lacks the {missing[0]!r} handler")],
            )
            return OperationReport(operation_id=op, outcome="failed", observed=observed, error=problem.to_json())
        return OperationReport(operation_id=op, outcome="succeeded", observed=observed)

    def command(self, space: str, report: OperationReport, now: int) -> r.CommandSubmitted:
        return submitted(
            report,
            command_id=f"{report.operation_id}.verified",
            space=space,
            principal=PRINCIPAL,
            admin=True,
            now=now,
        )

    async def close(self) -> None:
        try:
            await self.runtimes.close()
        except Exception:
            log.exception("closing the runtimes")

    # ---- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        settings = self.settings
        consumer = kafka.new_consumer(settings, self.group, group_instance_id=kafka.static_member(settings, "verifier"))
        try:  # started inside: a stop signal while they start still stops them
            await consumer.start()
            consumer.subscribe([settings.topic("control")], listener=_FromBeginning(self, consumer))
            # A load or a commit that fails ends the group, and the service, as one failure did before.
            async with asyncio.TaskGroup() as loads:
                epoch = self.folds.epoch
                async for batch in kafka.batches(consumer, timeout_ms=500, max_records=500):
                    for tp, messages in batch.items():
                        for message in messages:
                            if self.folds.stale(epoch):
                                break
                            await self._take(tp, message, loads)
                    if batch and self.folds.stale(epoch):
                        # Fetched for an older fold: the new one reads every partition from its start.
                        await self._from_start(consumer, [tp for tp in batch if tp in consumer.assignment()])
                    epoch = self.folds.epoch
        finally:
            await consumer.stop()
            await self.producers.close()
            await self.close()

    @staticmethod
    async def _from_start(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        if tps:
            await consumer.seek_to_beginning(*tps)

    async def _take(self, tp: TopicPartition, message: Any, loads: asyncio.TaskGroup) -> None:
        """Fold one control record; a new WorkerVersion's load starts beside the loop. A record
        that does not decode, or whose fold raises, is quarantined (when new) and skipped."""
        new = message.offset >= self.act_from.get(tp, 0)
        progress = self.progress
        progress.seen(tp, message.offset)  # a load it starts holds the partition's offset back
        record = kafka.decode(message.value)
        if isinstance(record, kafka.Rejected):
            if new:
                await self._commit(tp, [self.quarantine.out(message, record)])
            return
        try:
            self.fold(record)
            job = (
                self.job(record)
                if new and isinstance(record, r.ResourceCreated) and record.form == WORKER_VERSION
                else None
            )
        except Exception as exc:
            log.exception("verifier skips %s[%d]@%d", message.topic, message.partition, message.offset)
            if new:
                await self._commit(tp, [self.quarantine.out(message, kafka.failed(exc))])
            return
        if job is not None:
            progress.started(tp, message.offset)
            loads.create_task(self._verify(job, tp, message, progress, self.folds.epoch))

    async def _verify(self, job: Job, tp: TopicPartition, message: Any, progress: Progress, epoch: int) -> None:
        try:
            report = await self.judge(job)
        except Exception as exc:
            log.exception("verifier skips %s[%d]@%d", message.topic, message.partition, message.offset)
            outs = [self.quarantine.out(message, kafka.failed(exc))]
        else:
            log.info("verified %s (%s): %s", job.record.uid, job.record.name, report.outcome)
            cmd = self.command(job.record.space, report, int(time.time() * 1000))
            outs = [kafka.Out(self.settings.topic("commands"), job.record.space, cmd)]
        progress.ended(tp, message.offset)
        await self._commit(tp, outs, epoch)

    async def _commit(self, tp: TopicPartition, outs: list[kafka.Out], epoch: int | None = None) -> None:
        """On the partition's own producer. A partition lost meanwhile, or a load of an older
        fold, commits nothing: the partition's owner verifies the Version again from the
        committed offset, and a repeated report changes nothing."""
        valid = self.folds.valid(self.folds.epoch if epoch is None else epoch)
        # never behind the committed offset: a partition folded again from its start is below it
        at = self.progress.offsets().get(tp)
        offsets = {tp: at} if at is not None and at >= self.act_from.get(tp, 0) else {}
        await self.producers.commit(tp, outs, offsets, self.group, valid)


class _FromBeginning(ConsumerRebalanceListener):  # type: ignore[misc]
    """Fold each assigned partition from its start; act only from the committed offset on."""

    def __init__(self, verifier: Verifier, consumer: AIOKafkaConsumer) -> None:
        self.verifier = verifier
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        verifier, tps = self.verifier, list(assigned)
        async with verifier.folds.refold(verifier.producers):
            verifier.reset()
            # Fenced first: the committed offsets read then hold the previous owner's last report.
            verifier.act_from.update(await verifier.producers.fenced(self.consumer, tps))
            if tps:
                await self.consumer.seek_to_beginning(*tps)


async def serve(settings: Settings) -> None:
    await Verifier(settings).run()
