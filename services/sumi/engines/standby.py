"""One holder and standbys: the group membership of an engine whose decisions span partitions.

The workflow engine decides across partitions: a Workflow's delete purges its instances in
every partition before one report, its instance counts are one observation over all of
them, and a Caller Binding's call lands on an instance wherever its key hashes. So its
replicas do not share partitions; they take turns (as the control processor does,
`sumi.core.assignors`). Every replica joins the group on the engine's input topic; the
assignor gives every partition to the member that holds them (or, when it is gone, the first
by ID) and none to the others, which wait here without reading anything.

The holder fences its predecessor itself: its transactional producer starts only once it
holds (`Membership.until_holding`), which aborts whatever the old holder left open and makes
its next commit fail. A holder that is later given nothing (it was cut off long enough for
the group to give up on it, and another member holds now) stops: `lost` ends the engine,
and its platform starts it again as a standby.

Under aiokafka's eager protocol a standby joining revokes everything from the holder and
assigns it straight back; positions then fall back to the committed offsets, so the holder
seeks each partition back to where it had read (`resume`), and nothing is read twice.
"""

import asyncio
import logging
from collections.abc import Callable

from aiokafka import ConsumerRebalanceListener, TopicPartition

from sumi.core import assignors, kafka
from sumi.core.config import Settings

log = logging.getLogger(__name__)


class Membership(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(
        self,
        settings: Settings,
        name: str,
        topic: str,
        resume: Callable[[TopicPartition], int | None] = lambda tp: None,
        **options: object,
    ) -> None:
        self.name = name
        self.topic = topic
        self.holding = asyncio.Event()
        self.lost = asyncio.Event()
        self.assigned: list[TopicPartition] = []
        self.resume = resume  # where the holder had read each partition (None: not yet)
        self.consumer = kafka.group_member(
            settings, name, partition_assignment_strategy=(assignors.one_owner(self.holding.is_set),), **options
        )

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self)

    async def until_holding(self) -> list[TopicPartition]:
        """Stand by until this member holds every partition; nothing read meanwhile is kept (the
        holder reads from the committed offsets once it has fenced its predecessor)."""
        while not self.holding.is_set():
            await self.consumer.getmany(timeout_ms=500)
        log.info("%s holds every partition of %s", self.name, self.topic)
        return self.assigned

    async def from_committed(self) -> None:
        """Read each partition from the group's committed offset (call after the fence)."""
        for tp in self.assigned:
            self.consumer.seek(tp, await self.consumer.committed(tp) or 0)

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass  # eager: the holder is normally given everything straight back

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if not assigned:
            if self.holding.is_set():
                log.error("%s: another member holds %s now; this one stops", self.name, self.topic)
                self.lost.set()
            return
        self.assigned = sorted(assigned)
        for tp in self.assigned:
            at = self.resume(tp)
            if at is not None:
                self.consumer.seek(tp, at)
        self.holding.set()

    async def until_lost(self) -> None:
        await self.lost.wait()
        raise RuntimeError(f"{self.name}: another replica holds {self.topic}; this one ends and stands by anew")
