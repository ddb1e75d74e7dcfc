"""The verifier: loads every new WorkerVersion once in a sandbox and reports what it exports.

It reads the control log (consumer group `<prefix>-verifier`, read_committed).
For each `ResourceCreated` of a WorkerVersion it starts a context in the
worker's runtime, asks `load_info()`, stops the context, and sends
`operation.report` for the Version's create Operation to the commands topic
(keyed and partitioned by the Space, like every command). The report and the
group offset past its record commit in one Kafka transaction (sumi.core.kafka).
A new record that does not decode, or whose fold or verification raises, is
quarantined the same way (with its offset) and the verifier goes on.

The worker's runtime and declared handlers come from the public control fold
(`sumi.control.state`) of the same log (same Space, same partition, earlier). So that a restart knows
every worker, each assigned partition is read from its beginning; Versions
before the committed offset are only folded, never verified again.
"""

import asyncio
import json
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from sumi.control.forms.names import MODULE_WORKER, WORKER_VERSION
from sumi.control.state import ControlState, evolve
from sumi.core import kafka
from sumi.core import records as r
from sumi.core.commands import OperationReport, submitted
from sumi.core.config import Settings
from sumi.core.problems import FieldError, Problem
from sumi.engines.runtimes import Runtimes
from sumi.runtime import Limits, Module
from sumi.runtime.types import LoadInfo

log = logging.getLogger("sumi.verifier")
PRINCIPAL = "sumi-verifier"
VERIFY_LIMITS = Limits(cpu_ms=10_000, heap_mb=128)
VERIFY_TIMEOUT = 30.0  # seconds for start + load_info, whatever the module does at top level


class Verifier:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.control = ControlState()
        self.act_from: dict[TopicPartition, int] = {}
        self.runtimes = Runtimes()

    # ---- the fold -----------------------------------------------------------------------

    def fold(self, record: r.Record) -> None:
        evolve(self.control, record)

    def reset(self) -> None:
        """A new assignment is folded afresh from the beginning of its partitions."""
        self.control = ControlState()
        self.act_from.clear()

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
                try:
                    await self.runtimes.restart()
                except Exception:
                    log.exception("closing the failed runtimes")
                last = exc
        return LoadInfo(load_error=f"the {runtime} runtime is unavailable: {last}")

    async def verify(self, record: r.ResourceCreated) -> OperationReport:
        """The operation.report for one Version's create Operation."""
        spec = json.loads(record.spec)
        worker = self.control.resource(spec["worker"]["resourceUid"])
        op = record.operationId
        if worker is None or worker.form != MODULE_WORKER:
            problem = Problem("dependency_conflict", f"worker {spec['worker']['resourceUid']}: not found")
            return OperationReport(
                operation_id=op, outcome="failed", observed={"verified": False}, error=problem.to_json()
            )
        modules = [Module(m["name"], m["content"]) for m in spec["modules"]]
        runtime = str(worker.spec.get("runtime", "javascript"))
        info = await self.load(runtime, modules, spec["mainModule"], record.space)
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
        missing = [h for h in worker.spec.get("handlers", ()) if h not in info.handlers]
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
        group = f"{settings.topic_prefix}-verifier"
        quarantine = kafka.Quarantine(settings, "verifier")
        # Transactional: a report (or a quarantined record) and the offset past its record commit
        # together, and a restarted verifier fences the one it replaces.
        producer = kafka.new_producer(settings, f"{settings.topic_prefix}-verifier-0", linger_ms=1)
        consumer = kafka.new_consumer(settings, group)
        try:  # started inside: a stop signal while they start still stops them
            await producer.start()
            await consumer.start()
            consumer.subscribe([settings.topic("control")], listener=_FromBeginning(self, consumer))
            async for batch in kafka.batches(consumer, timeout_ms=500, max_records=500):
                for tp, messages in batch.items():
                    for message in messages:
                        new = message.offset >= self.act_from.get(tp, 0)
                        outs = await self._handle(message, new, quarantine)
                        if new and outs:
                            await kafka.commit(producer, outs, settings.partitions, {tp: message.offset + 1}, group)
                            self.act_from[tp] = message.offset + 1
        finally:
            await consumer.stop()
            await producer.stop()
            await self.close()

    async def _handle(self, message: Any, new: bool, quarantine: kafka.Quarantine) -> list[kafka.Out]:
        """Fold one control record; for a new WorkerVersion, its report. A record that does not
        decode, or whose fold or verification raises, is quarantined (when new) and skipped."""
        record = kafka.decode(message.value)
        if isinstance(record, kafka.Rejected):
            return [quarantine.out(message, record)] if new else []
        try:
            self.fold(record)
            if not (new and isinstance(record, r.ResourceCreated) and record.form == WORKER_VERSION):
                return []
            payload = await self.verify(record)
        except Exception as exc:
            log.exception("verifier skips %s[%d]@%d", message.topic, message.partition, message.offset)
            return [quarantine.out(message, kafka.failed(exc))] if new else []
        cmd = self.command(record.space, payload, int(time.time() * 1000))
        log.info("verified %s (%s): %s", record.uid, record.name, payload.outcome)
        return [kafka.Out(self.settings.topic("commands"), record.space, cmd)]


class _FromBeginning(ConsumerRebalanceListener):  # type: ignore[misc]
    """Fold each assigned partition from its start; act only from the committed offset on."""

    def __init__(self, verifier: Verifier, consumer: AIOKafkaConsumer) -> None:
        self.verifier = verifier
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.verifier.reset()
        tps = list(assigned)
        for tp in tps:
            self.verifier.act_from[tp] = await self.consumer.committed(tp) or 0
        if tps:
            await self.consumer.seek_to_beginning(*tps)


async def serve(settings: Settings) -> None:
    await Verifier(settings).run()
