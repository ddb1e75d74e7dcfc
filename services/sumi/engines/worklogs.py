"""What workers print, tagged and shipped to the log topic (`<prefix>.logs`).

An engine hands each context it invokes a sink made here with the invocation's tags (Space,
worker, Version, the Consumer or Workflow, the batch or instance and its current step). The
runtime's channel has already bounded the context's rate (`sumi.runtime._lograte`); here the
lines wait in a bounded buffer for one plain producer (acks=1, not transactional: a log line
is not state, and at-most-once is what `wrangler tail` gives too). A buffer full because the
broker is slow drops the line and counts it, and the next line that gets through says so.
"""

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from sumi.core.clock import now_ms
from sumi.core.config import Settings
from sumi.core.records import WorkerLogged
from sumi.runtime.types import LogSink
from sumi.wire import kafka, topics

log = logging.getLogger("sumi.worklogs")
CAPACITY = 20_000  # lines waiting for the producer, all contexts of this engine together


@dataclass(frozen=True)
class LogTags:
    space: str
    worker_uid: str
    version_uid: str
    resource_uid: str  # the QueueConsumer or DurableWorkflow that invoked the worker
    batch_id: str | None = None
    instance_id: str | None = None

    def record(self, level: str, text: str, dropped: int, step: str | None = None) -> WorkerLogged:
        return WorkerLogged(
            self.space,
            self.worker_uid,
            self.version_uid,
            self.resource_uid,
            level,
            text,
            now_ms(),
            self.batch_id,
            self.instance_id,
            step,
            dropped,
        )


class WorkerLogs:
    def __init__(self, settings: Settings, registry: CollectorRegistry | None = None, capacity: int = CAPACITY) -> None:
        self._settings = settings
        self.dropped = Counter(
            "sumi_worker_log_lines_dropped",
            "Lines a worker printed that were refused (its rate bound, or the Host's full buffer)",
            ("space", "worker"),
            registry=registry,
        )
        self._capacity = capacity
        self._pending: deque[WorkerLogged] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.overflowed = 0  # lines this engine dropped for a full buffer, ever (a metric)
        self._unsaid: dict[tuple[str, str], int] = {}  # per (Space, worker): dropped, not yet told

    def sink(self, tags: LogTags) -> LogSink:
        def write(level: str, text: str, dropped: int, step: str | None) -> None:
            self.put(tags, tags.record(level, text, dropped, step))

        return write

    def put(self, tags: LogTags, rec: WorkerLogged) -> None:
        key = (tags.space, tags.worker_uid)
        if rec.dropped:
            self.dropped.labels(*key).inc(rec.dropped)
        if len(self._pending) >= self._capacity:
            self.dropped.labels(*key).inc()
            self.overflowed += 1
            self._unsaid[key] = self._unsaid.get(key, 0) + 1
            return
        if unsaid := self._unsaid.pop(key, 0):
            self._pending.append(
                tags.record("warn", f"{unsaid} log lines dropped (the Host's log buffer was full)", unsaid)
            )
        self._pending.append(rec)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._ship())
        self._wake.set()

    async def _ship(self) -> None:
        producer = kafka.new_producer(self._settings, enable_idempotence=False, acks=1, linger_ms=20)
        try:
            await producer.start()
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    rec = self._pending.popleft()
                    key = topics.log_key(rec.space, rec.workerUid)
                    try:
                        sent = await kafka.send(
                            producer, self._settings.topic("logs"), key, rec, self._settings.partitions
                        )
                    except Exception as exc:  # a log line is never a reason to fail the work
                        log.warning("worker log line not sent: %r", exc)
                        continue
                    sent.add_done_callback(_quiet)
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()  # flushes what was sent

    async def close(self) -> None:
        """Ship what is buffered (a few seconds at most), then stop the producer."""
        task, self._task = self._task, None
        if task is None:
            return
        for _ in range(50):
            if not self._pending:
                break
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _quiet(fut: "asyncio.Future[object]") -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("worker log line not delivered: %r", fut.exception())
