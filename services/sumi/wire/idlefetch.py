"""An idle consumer long-polls for seconds, and a new partition never waits behind that poll.

The broker answers a fetch as soon as a record commits in any partition it asks for, so its
max wait only bounds how often an idle consumer asks again: at aiokafka's 500 ms, twice a
second per consumer, about 30 requests a second from an idle Host, the most of its idle CPU
(issue 40). A consumer that has fetched nothing for `IDLE_AFTER` seconds asks with
`IDLE_WAIT_MS`, and with the short wait again once anything comes.

The risk of a long poll is what it does not ask for. The broker handles one request at a time
per connection, so a partition resumed, sought, reset or newly assigned while a long fetch is
outstanding would wait for that fetch's end, up to `IDLE_WAIT_MS` (the rare read-side stalls
seen when the wait was 2 s for all), and so would an offsets request (`end_offsets` and the
like). So before each round of the fetcher, and before each offsets request, a long fetch that
does not cover what is now to be read is dropped: its task cancelled and its connection
closed, and what was waiting goes out at once on a new connection, the next fetch short.

This reaches into aiokafka's Fetcher (`_get_actions_per_node`, `_proc_fetch_request`, its
in-flight set, the client's connections), checked for on start: without them a consumer keeps
the short wait, as before.
"""

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.conn import CloseReason

SHORT_WAIT_MS = 500
IDLE_WAIT_MS = 15000  # at 5 s, idle consumers still asked 0.2 times a second each (issue 40)
IDLE_AFTER = 3.0  # seconds with nothing fetched
BACKSTOP_MIN_MS = 1000


@dataclass
class _Held:
    """A long fetch the broker may still hold on a node's connection."""

    covered: frozenset[tuple[TopicPartition, int]]
    until: float
    task: "asyncio.Task[Any] | None" = field(default=None)


class Consumer(AIOKafkaConsumer):  # type: ignore[misc]
    """aiokafka's consumer with the idle long poll above."""

    def __init__(self, *topics: str, idle_wait_ms: int = IDLE_WAIT_MS, **options: Any) -> None:
        options.setdefault("fetch_max_wait_ms", SHORT_WAIT_MS)
        # aiokafka's fetcher wakes on every event it acts on (a fetch answered, a seek, a reset, a
        # resume, an assignment, records taken); its timeout is only a backstop, and at its 200 ms
        # (then 1 s) it woke each idle consumer for nothing between its long polls.
        # Never under 1 s: a consumer that asks for a short poll (idle_wait_ms=50) must not turn
        # its fetcher twenty times a second for it.
        options.setdefault("consumer_timeout_ms", max(idle_wait_ms, BACKSTOP_MIN_MS))
        super().__init__(*topics, **options)
        self._short_ms = int(options["fetch_max_wait_ms"])
        self._idle_ms = max(idle_wait_ms, self._short_ms)
        self._fetched_at = time.monotonic()
        self._held: dict[int, _Held] = {}

    async def start(self) -> None:
        await super().start()
        fetcher = getattr(self, "_fetcher", None)
        needed = ("_get_actions_per_node", "_proc_fetch_request", "_fetch_max_wait_ms", "_records", "_pending_tasks")
        if self._idle_ms > self._short_ms and all(hasattr(fetcher, a) for a in needed):
            self._hook(fetcher)

    # An offsets request goes on the connection a long fetch holds: it must not queue behind it.
    async def end_offsets(self, partitions: Any) -> Any:
        self._wake()
        return await super().end_offsets(partitions)

    async def beginning_offsets(self, partitions: Any) -> Any:
        self._wake()
        return await super().beginning_offsets(partitions)

    async def offsets_for_times(self, timestamps: Any) -> Any:
        self._wake()
        return await super().offsets_for_times(timestamps)

    def _wake(self) -> None:
        for node in list(self._held):
            self._drop(node)

    def _hook(self, fetcher: Any) -> None:
        actions, proc = fetcher._get_actions_per_node, fetcher._proc_fetch_request

        def get_actions(assignment: Any) -> Any:
            wanted = self._wanted(fetcher, assignment)
            for node in [n for n, h in self._held.items() if not wanted.get(n, frozenset()) <= h.covered]:
                self._drop(node)
            out = actions(assignment)
            wait = fetcher._fetch_max_wait_ms
            for node, _ in out[0]:
                if wait > self._short_ms:
                    self._held[node] = _Held(wanted.get(node, frozenset()), time.monotonic() + wait / 1000)
            return out

        async def proc_fetch(assignment: Any, node: int, request: Any) -> Any:
            task = asyncio.current_task()
            held = self._held.get(node)
            if held is not None and held.task is None:
                held.task = task
            got = await proc(assignment, node, request)
            if held is not None and self._held.get(node) is held and task is not None and not task.cancelling():
                del self._held[node]  # answered: nothing left at the broker
            now = time.monotonic()
            if got:
                self._fetched_at = now
                fetcher._fetch_max_wait_ms = self._short_ms
            elif now - self._fetched_at >= IDLE_AFTER:
                fetcher._fetch_max_wait_ms = self._idle_ms
            return got

        fetcher._get_actions_per_node = get_actions
        fetcher._proc_fetch_request = proc_fetch

    @staticmethod
    def _wanted(fetcher: Any, assignment: Any) -> dict[int, frozenset[tuple[TopicPartition, int]]]:
        """Per node, what a fetch round would ask for now (a reset counts as offset -1)."""
        out: dict[int, set[tuple[TopicPartition, int]]] = {}
        for tp in assignment.tps:
            state = assignment.state_value(tp)
            if state.paused or tp in fetcher._records:
                continue
            node = fetcher._select_read_replica(tp)
            if node is None or node == -1:
                continue
            out.setdefault(node, set()).add((tp, state.position if state.has_valid_position else -1))
        return {n: frozenset(s) for n, s in out.items()}

    def _drop(self, node: int) -> None:
        held = self._held.pop(node)
        if held.until <= time.monotonic():
            return
        self._fetched_at = time.monotonic()
        self._fetcher._fetch_max_wait_ms = self._short_ms
        if held.task is not None:
            held.task.cancel()  # aiokafka's fetch task ends quietly on a cancel
        conn = getattr(self._client, "_conns", {}).get((node, ConnectionGroup.DEFAULT))
        if conn is not None:  # the next fetch goes out on a new one, not behind the held fetch
            conn.close(reason=CloseReason.IDLE_DROP)
