"""The group's word to a replica about its partitions: the one rebalance listener.

Every processor that shares a topic's partitions through a consumer group (the engine shell,
the queue and workflow engines, the projections) hears of assignments and revocations here
and nowhere else; what it does with them is its `Owner`'s. What holds for all of them:

- a partition assigned is paused before its owner hears of it: no record of it is handed out
  until the owner has taken it over (fenced the previous owner, folded its state, sought where
  to read on), and the owner resumes it then;
- a failed call is logged and kept for the owner (`on_failure`): aiokafka only logs a
  listener's failure and goes on, and deciding on a partial take-over must not happen.

aiokafka sends no heartbeat while a callback runs, so an owner does here only what is quick
(fence, note, cancel) and folds in a task of its own.
"""

import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

log = logging.getLogger(__name__)
# Every consumer subscribed here, for what watches a replica's memberships (sumi._replica).
_subscribed: "weakref.WeakSet[AIOKafkaConsumer]" = weakref.WeakSet()


def subscribed() -> list[AIOKafkaConsumer]:
    """The consumers of this process that are members of a group through a `Membership`."""
    return list(_subscribed)


class Owner(Protocol):
    async def assigned(self, tps: list[TopicPartition]) -> None:
        """These partitions are this replica's now (paused, sorted; empty: none)."""

    async def revoked(self, tps: list[TopicPartition]) -> None:
        """These partitions go: when this returns, another replica may be given them."""


class Membership(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(
        self,
        name: str,
        consumer: AIOKafkaConsumer,
        owner: Owner,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.name = name
        self.consumer = consumer
        self.owner = owner
        self.on_failure = on_failure

    def subscribe(self, topic: str) -> None:
        self.consumer.subscribe([topic], listener=self)
        _subscribed.add(self.consumer)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._tell("revoking", self.owner.revoked, sorted(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        tps = sorted(assigned)
        if tps:
            self.consumer.pause(*tps)
        await self._tell("taking", self.owner.assigned, tps)

    async def _tell(
        self, what: str, call: Callable[[list[TopicPartition]], Awaitable[None]], tps: list[TopicPartition]
    ) -> None:
        try:
            await call(tps)
        except BaseException as exc:
            log.exception("%s: %s partitions %s failed", self.name, what, [tp.partition for tp in tps])
            if self.on_failure is not None:
                self.on_failure(exc)
            raise
