"""Projections: stream processors that fold topics into Postgres read models (`service.serve` runs them all)."""

from sumi.core.config import Settings
from sumi.wire.keyreader import KeyReader
from sumi_projections import _prune as prune
from sumi_projections import control, quarantine, queue, workflow
from sumi_projections._migrate import drop, migrate
from sumi_projections._runner import Collected, ProjectionRunner, run_all


def runners(settings: Settings) -> list[ProjectionRunner]:
    return [
        ProjectionRunner(settings, "control", settings.topic("control"), control.apply),
        ProjectionRunner(settings, "queue", settings.topic("queue"), queue.apply),
        ProjectionRunner(settings, "quarantine", settings.topic("quarantine"), quarantine.apply),
        # Sealed documents are opened with the keys alive (a purged one's read as absent).
        ProjectionRunner(settings, "workflow", settings.topic("workflow"), workflow.apply, KeyReader(settings)),
    ]


__all__ = ["Collected", "ProjectionRunner", "drop", "migrate", "prune", "run_all", "runners"]
