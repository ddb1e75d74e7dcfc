"""The control log as the queue engine sees it: the engine's questions over the public fold.

Pure: the engine folds every partition of the control log (every Space) into one
`sumi.control.rules.state.ControlState` and asks it, through this table, for its
Consumers, their queues, workers, Deployments and Versions.
"""

from dataclasses import dataclass, field

from sumi.control.rules.forms import ResourceView
from sumi.control.rules.forms.names import MODULE_WORKER, QUEUE, QUEUE_CONSUMER
from sumi.control.rules.state import LIVE, ControlState, OperationView, VersionView, evolve, serving_allocation, version
from sumi.core import records as r

__all__ = ["LIVE", "Code", "Consumer", "ControlTable"]


@dataclass(frozen=True)
class Consumer:
    """A QueueConsumer's delivery settings (QC-4..9), as its current spec says."""

    uid: str
    space: str
    queue: str
    worker: str
    max_batch_size: int
    max_batch_timeout_s: int
    max_concurrency: int
    max_retries: int
    retry_delay_s: int
    dead_letter_queue: str | None
    state: str

    @classmethod
    def of(cls, res: ResourceView, space: str) -> "Consumer":
        s = res.spec
        dlq = s.get("deadLetterQueue")
        return cls(
            res.uid,
            space,
            s["queue"]["resourceUid"],
            s["worker"]["resourceUid"],
            s["maxBatchSize"],
            s["maxBatchTimeoutSeconds"],
            s["maxConcurrency"],
            s["maxRetries"],
            s["retryDelaySeconds"],
            dlq["resourceUid"] if dlq else None,
            res.state,
        )


# What a batch runs: one usable WorkerVersion of the worker.
Code = VersionView


@dataclass
class ControlTable:
    state: ControlState = field(default_factory=ControlState)

    def fold(self, rec: r.Record) -> None:
        evolve(self.state, rec)

    # ---- questions the engine asks ---------------------------------------------------------

    def resource(self, uid: str) -> ResourceView | None:
        return self.state.resource(uid)

    def consumer(self, uid: str) -> Consumer | None:
        space = self.state.space_of(uid)
        res = space.resources.get(uid) if space is not None else None
        return Consumer.of(res, space.name) if space is not None and res is not None else None

    def consumers(self) -> list[Consumer]:
        return [Consumer.of(res, space.name) for space, res in self.state.resources(QUEUE_CONSUMER)]

    def queue(self, uid: str) -> ResourceView | None:
        res = self.state.resource(uid)
        return res if res is not None and res.form == QUEUE else None

    def worker(self, uid: str) -> ResourceView | None:
        res = self.state.resource(uid)
        return res if res is not None and res.form == MODULE_WORKER else None

    @property
    def deleted_queues(self) -> list[str]:
        return [uid for uid, form in self.state.deleted.items() if form == QUEUE]

    def unfinished_delete(self, uid: str) -> OperationView | None:
        space = self.state.space_of(uid)
        op = space.unfinished_operation(uid) if space is not None else None
        return op if op is not None and op.kind == "delete" else None

    def allocation(self, worker_uid: str) -> list[tuple[str, int]]:
        """The active Deployment's weighted Versions that are usable (their Resource is live)."""
        return serving_allocation(self.state, worker_uid)

    def code(self, version_uid: str) -> Code | None:
        return version(self.state, version_uid)
