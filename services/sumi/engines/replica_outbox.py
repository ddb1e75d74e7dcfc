"""The outbox of a replica that commits in one transaction (`sumi.engines.rdkafka.Transactions`):
the interface of `sumi.wire.outbox.Outbox`, which a processor decides on, over the replica's one
producer. Every partition the replica serves shares it, so everything ready at one moment, of
any partition, commits together with the inputs' offsets.

Order is the order of `put`: the transactions take what was handed in, in turn, and commit one
after another. A failed transaction fails every waiter and this outbox for good, as `Outbox`
does: state is rebuilt from the log, never patched up.
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from sumi.engines.rdkafka import Record, Transactions
from sumi.wire import kafka, outbox


class ReplicaOutbox:
    def __init__(self, transactions: Transactions, partitions: int) -> None:
        self.transactions = transactions
        self.partitions = partitions
        self.failed: BaseException | None = None
        self.on_idle: Callable[[dict[tuple[str, int], int]], None] | None = None
        self._open = 0  # puts not yet committed
        self._last: asyncio.Future[None] | None = None
        self._failure = asyncio.Event()

    @property
    def busy(self) -> bool:
        """Records put and not yet committed: the state holds decisions the log does not yet."""
        return self._open > 0

    @property
    def written(self) -> dict[tuple[str, int], int]:
        return self.transactions.written

    def put(self, outs: list[tuple[str, str, Any]]) -> "asyncio.Future[None]":
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(RuntimeError("the outbox failed"))
            return fut
        if not outs:
            fut.set_result(None)
            return fut
        records = []
        for topic, key, record in outs:
            key_bytes, value, partition = kafka.encoded(key, record, self.partitions)
            records.append(Record(topic, partition, key_bytes, value))
        self._open += 1
        self.transactions.submit(records).add_done_callback(lambda done: self._committed(done, fut))
        self._last = fut
        return fut

    def _committed(self, done: "asyncio.Future[None]", fut: "asyncio.Future[None]") -> None:
        self._open -= 1
        exc = RuntimeError("the commit was cancelled") if done.cancelled() else done.exception()
        if exc is not None and self.failed is None:
            self.failed = exc
            self._failure.set()
            outbox.end_soon()
        if not fut.done():
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(RuntimeError(f"commit failed: {exc!r}"))
                fut.exception()  # retrieved: whoever awaits it still sees it
        if exc is None and self._open == 0 and self.on_idle is not None:
            self.on_idle(self.written)

    async def idle(self) -> None:
        """Once everything put so far has committed (or failed)."""
        if self._last is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._last)

    def close(self) -> None:
        """Nothing more is put: the generation that decided on it has ended."""
        if self.failed is None:
            self.failed = RuntimeError("the outbox is closed")

    async def run(self) -> None:
        """Until a commit fails (then raises): the transactions run on their own."""
        await self._failure.wait()
        raise RuntimeError("a commit failed") from self.failed
