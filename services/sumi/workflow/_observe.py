"""A Workflow's instance counts as the workflow engine reports them (WF-9): one report per
partition of the instance log the replica owns, so each partition's counts come from its one
owner and the control plane's sum is exact whichever replica owns which partition.

A partition is reported when its counts differ from what the control plane holds for it (the
engine folds the control log too), a partition whose instances were all purged included: it
reports zeros, so it is not left counting them. Comparing with what is held, not with what this
replica last sent, is what lets a replica that takes a partition over with a fresh engine
report it again only when it needs to, and heals a report overtaken by a stale one of the
partition's previous owner. A report not yet seen held is repeated only after `RESEND_MS`, so
a control plane that lags is not sent the same counts every second.

It reaches the engine only through the `Reporter` port.
"""

import asyncio
from collections.abc import Sequence
from typing import Protocol

from sumi.core import records as r
from sumi.core.commands import Command, ResourceObserve
from sumi.workflow.rules._control import Workflow, WorkflowControl
from sumi.workflow.rules._table import InstanceTable

RESEND_MS = 10_000


class Reporter(Protocol):
    """What the count reports need of the engine: the fold, the control log's, the partitions
    it owns, and how a command reaches the control plane."""

    table: InstanceTable
    control: WorkflowControl
    owned: frozenset[int]

    def now(self) -> int: ...

    def emit(self, key: str, records: Sequence[r.Record]) -> "asyncio.Future[None]": ...

    def control_command(self, space: str, command: Command) -> r.CommandSubmitted: ...


class CountReports:
    def __init__(self, engine: Reporter) -> None:
        self.engine = engine
        # (workflow UID, partition) -> the counts sent and when, until the control plane holds them
        self.sent: dict[tuple[str, int], tuple[dict[str, int], int]] = {}

    def step(self) -> None:
        """Report every owned partition's counts of every live Workflow the control plane lacks."""
        now, live = self.engine.now(), set()
        for wf in self.engine.control.workflows():
            if wf.state == "deleting":
                continue  # its instances are being purged, and its observed goes with the Resource
            live.add(wf.uid)
            for partition in sorted(self.engine.owned):
                self._report(wf, partition, now)
        for gone in [k for k in self.sent if k[0] not in live]:
            del self.sent[gone]

    def _report(self, wf: Workflow, partition: int, now: int) -> None:
        engine, at = self.engine, (wf.uid, partition)
        counts = engine.table.counts.of(wf.uid, partition)
        if counts == engine.control.held_counts(wf.uid, partition):
            self.sent.pop(at, None)
            return
        sent = self.sent.get(at)
        if sent is not None and sent[0] == counts and now - sent[1] < RESEND_MS:
            return
        self.sent[at] = (counts, now)
        observe = ResourceObserve(uid=wf.uid, observed={"instanceCounts": counts}, partition=partition)
        # A command to the control plane: keyed by nothing of the instance log (routed by Space).
        engine.emit(wf.uid, [engine.control_command(wf.space, observe)])
