"""Group commit: every record an engine decides goes out in one Kafka transaction (the queue and
workflow engines each keep one outbox; it lives here so neither engine package imports the other).

Decisions put records here (already folded into the engine's state, since the
engine is the single writer of its logs) and get a future that resolves
once the transaction holding them has committed. Records leave in the order
they were put, so the log's order is the order of the decisions. A failed
transaction fails every waiter and ends the process: state is then rebuilt from
the log, never patched up.
"""

import asyncio
import contextlib
from typing import Any

from aiokafka import AIOKafkaProducer

from sumi.core import kafka


class Outbox:
    def __init__(self, producer: AIOKafkaProducer, partitions: int) -> None:
        self.producer = producer
        self.partitions = partitions
        self._items: list[tuple[str, str, Any]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._event = asyncio.Event()
        self.failed: BaseException | None = None
        self._last: asyncio.Future[None] | None = None

    def put(self, outs: list[tuple[str, str, Any]]) -> "asyncio.Future[None]":
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(RuntimeError("the outbox failed"))
        elif not outs:
            fut.set_result(None)
        else:
            self._items += outs
            self._waiters.append(fut)
            self._last = fut
            self._event.set()
        return fut

    async def idle(self) -> None:
        """Once everything put so far has committed (or failed)."""
        if self._last is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._last)

    async def run(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            items, waiters = self._items, self._waiters
            self._items, self._waiters = [], []
            try:
                async with self.producer.transaction():
                    for topic, key, record in items:
                        await kafka.send(self.producer, topic, key, record, self.partitions)
            except BaseException as exc:
                self.failed = exc
                for fut in waiters + self._waiters:
                    if not fut.done():
                        fut.set_exception(RuntimeError(f"commit failed: {exc!r}"))
                        fut.exception()  # retrieved: whoever awaits it still sees it
                raise
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
