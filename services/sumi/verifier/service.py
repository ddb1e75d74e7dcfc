"""The verifier: loads every new WorkerVersion once in a sandbox and reports what it exports.

It stands on the engine shell (`sumi.engines.shell`, group `<prefix>-verifier`), which
shares the control log's partitions among any number of replicas and fences each
partition's commits. For each `ResourceCreated` of a WorkerVersion it starts a context in
the worker's runtime, asks `load_info()`, stops the context, and sends `operation.report`
for the Version's create Operation to the commands topic (keyed and partitioned by the
Space, like every command): an effect of the shell, committed with the group offset past
its record on the producer of the record's partition. A new record that does not decode,
or whose fold or verification raises, is quarantined the same way and the verifier goes on.

The worker's runtime and declared handlers come from the public control fold
(`sumi.control.rules.state`) of the same log (same Space, same partition, earlier). So that a
restart knows every worker, the control log is its own changelog: each assigned partition
is read from its beginning, and Versions before the committed offset are only folded,
never verified again.

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
from dataclasses import dataclass
from typing import Any

from sumi.control.rules.forms.names import MODULE_WORKER, WORKER_VERSION
from sumi.control.rules.state import ControlState, evolve
from sumi.core import records as r
from sumi.core.commands import OperationReport, submitted
from sumi.core.config import Settings
from sumi.core.problems import FieldError, Problem
from sumi.engines.fair import FairSlots
from sumi.engines.runtimes import Runtimes
from sumi.engines.shell import Decided, Shell
from sumi.runtime import Limits, Module
from sumi.runtime.types import LoadInfo
from sumi.wire.kafka import Out

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


class Verifier:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.control = ControlState()
        self.runtimes = Runtimes(settings)
        self.slots = FairSlots(settings.verify_slots, settings.verify_slots_per_space)

    # ---- what the shell asks (sumi.engines.shell.Processor) ----------------------------

    def fold(self, record: r.Record, key: str = "") -> None:
        evolve(self.control, record)

    def reset(self) -> None:
        self.control = ControlState()

    def decide(self, record: r.Record, now: int) -> Decided:
        """A new Version's report, loaded beside the shell's loop (the fold moves on meanwhile)."""
        if isinstance(record, r.ResourceCreated) and record.form == WORKER_VERSION:
            return self.reported(self.job(record))
        return []

    async def reported(self, job: Job) -> list[Out]:
        report = await self.judge(job)
        log.info("verified %s (%s): %s", job.record.uid, job.record.name, report.outcome)
        cmd = self.command(job.record.space, report, int(time.time() * 1000))
        return [Out(self.settings.topic("commands"), job.record.space, cmd)]

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


def verifier_shell(settings: Settings, verifier: Verifier) -> Shell:
    return Shell(settings, "verifier", settings.topic("control"), verifier)


async def serve(settings: Settings) -> None:
    verifier = Verifier(settings)
    try:
        await verifier_shell(settings, verifier).run()
    finally:
        await verifier.close()
