"""One live process per replica name: a named `sumi serve` holds its name while it runs.

A replica named by SUMI_REPLICA is a static member of its service's consumer groups (KIP-345):
Kafka takes a second member with the same group instance ID for a restart of the first and
hands it the first's partitions; the first, no longer recognized, rejoins and takes them back,
every heartbeat, and neither decides anything while they do (issue 40). So the name is a lock:

- At start, a Postgres advisory lock keyed by (topic prefix, schema, service, replica), held by
  a session of the process's own for its life. Every service but the gateway reaches Postgres
  at start (the migrations), and a lock there goes with its holder: Postgres drops a session
  whose connection closes, at once when the holder dies on a live machine (SIGKILL included,
  the kernel closes the socket), or when the keepalives below give up on a dead machine or
  network (`HOLDER_GONE_S`). A start that finds the name held waits that long for it, then is
  refused (`Clash`): a restart of a crashed replica starts; a copy of a live one does not.
- At run time, a session lost (a database restart) is taken again; found held by another
  process by then, or the static membership fenced in Kafka by a member that never asked
  Postgres (an older version, another database), the process stops with the same message
  instead of fighting over the partitions. Fenced shows two ways: aiokafka's warning that the
  coordinator no longer knows the member, twice; or a member that was in its group out of it
  (rejoining) for `STALLED_S` while its coordinator is known: after one such warning the group
  can hang in its rebalance for minutes, and nothing is logged meanwhile.

Kafka could not be the lock: a static member does not leave its group when it stops, so a
clean restart would find its own name there until the session expired, and each service has
groups of its own to look in.
"""

import asyncio
import contextlib
import hashlib
import logging
import os
import sys
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer

from sumi.core.config import Settings
from sumi.wire import membership

log = logging.getLogger(__name__)

# Postgres gives up on a silent client after idle + interval * count seconds.
KEEPALIVE = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 2}
HOLDER_GONE_S = 20.0  # the keepalives' 15 s and a margin: how long a dead holder can keep its name
POLL_S = 0.5
CHECK_S = 5.0  # how often the held session is proved alive
# aiokafka's heartbeat warning for a member the coordinator no longer knows. A session that
# expired (a long pause) gives one burst of it, a heartbeat of each group at once on waking;
# another member under our instance ID gives it again a heartbeat later, and soon no more: the
# group can then hang in its rebalance for minutes, which is why the second time is enough.
NOT_RECOGNIZED = "local member_id was not recognized"
FENCED_AFTER = 2  # times, at least FENCED_SPAN_S apart within FENCED_WINDOW_S
FENCED_SPAN_S = 1.0
FENCED_WINDOW_S = 60.0
# A rebalance of live members takes seconds; one waiting for a dead member, its session (10 s).
STALLED_S = 30.0
STOP_GRACE_S = 20.0  # how long a stopping replica may take to close before it exits anyway
EXIT_REFUSED = 2  # the CLI's usage error: the settings must change


def _exit_now(message: str) -> None:
    log.error("SUMI_REPLICA: closing did not end the process in %.0f s; exiting", STOP_GRACE_S)
    sys.stderr.write(f"sumi: {message}\n")
    sys.stderr.flush()
    os._exit(EXIT_REFUSED)


class Clash(Exception):
    """Another live process holds this replica's name."""


def clash_message(settings: Settings, service: str, fenced: bool = False) -> str:
    what = "was fenced in Kafka by another member" if fenced else "is held by another live process"
    return (
        f"SUMI_REPLICA={settings.replica!r}: this name of a `{service}` replica {what}; "
        "give each replica a name of its own (or none) and start it again"
    )


def lock_key(settings: Settings, service: str) -> int:
    """The advisory lock's bigint: what makes two static members the same member in Kafka."""
    name = f"sumi-replica/{settings.topic_prefix}/{settings.db_schema}/{service}/{settings.replica}"
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.asynccontextmanager
async def named(settings: Settings, service: str) -> AsyncIterator[None]:
    """Hold this replica's name while the block runs (nothing to hold for an unnamed replica).

    Raises `Clash` at once if the name is taken, or out of the block when it is lost."""
    if not settings.replica:
        yield
        return
    key = lock_key(settings, service)
    conn = await _take(settings, service, key, HOLDER_GONE_S)
    if conn is None:
        raise Clash(clash_message(settings, service))
    main = asyncio.current_task()
    assert main is not None
    lost: list[str] = []

    def stop(message: str) -> None:
        if not lost:
            lost.append(message)
            main.get_loop().call_soon_threadsafe(main.cancel)
            # A rebalance that hangs may hold the stop too: the line and the exit come regardless.
            main.get_loop().call_soon_threadsafe(main.get_loop().call_later, STOP_GRACE_S, _exit_now, message)

    def fenced(how: str) -> None:
        log.warning("SUMI_REPLICA=%r: %s", settings.replica, how)
        stop(clash_message(settings, service, fenced=True))

    watch = _FencedWatch(lambda: fenced("the group coordinator no longer knows this member, again"))
    logging.getLogger("aiokafka.consumer.group_coordinator").addHandler(watch)
    stalls = _Stalls(lambda: fenced(f"out of its group for {STALLED_S:.0f} s while the coordinator answers"))
    keeper = asyncio.create_task(_keep(settings, service, key, conn, stop, stalls.check))
    try:
        yield
    except asyncio.CancelledError:
        if lost:
            raise Clash(lost[0]) from None
        raise
    finally:
        logging.getLogger("aiokafka.consumer.group_coordinator").removeHandler(watch)
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _connect(settings: Settings, service: str) -> psycopg.AsyncConnection[Any]:
    keepalive = " ".join(f"-c {k}={v}" for k, v in KEEPALIVE.items())
    return await psycopg.AsyncConnection.connect(
        settings.database_url,
        autocommit=True,
        application_name=f"sumi {service} {settings.replica}"[:63],
        options=keepalive,
        connect_timeout=10,
    )


async def _take(settings: Settings, service: str, key: int, wait: float) -> "psycopg.AsyncConnection[Any] | None":
    """A session holding the lock, or None if another held it for `wait` seconds."""
    conn = await _connect(settings, service)
    deadline = time.monotonic() + wait
    try:
        while True:
            row = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))).fetchone()
            if row is not None and row[0]:
                return conn
            if time.monotonic() >= deadline:
                await conn.close()
                return None
            await asyncio.sleep(POLL_S)
    except BaseException:
        await conn.close()
        raise


async def _keep(
    settings: Settings,
    service: str,
    key: int,
    conn: "psycopg.AsyncConnection[Any]",
    stop: Callable[[str], None],
    also: Callable[[], None],
) -> None:
    """Prove the session alive; a lost one is taken again, or the process stops if it cannot be.
    `also` runs at each check (the memberships' watch: no wakeups of its own)."""
    try:
        while True:
            await asyncio.sleep(CHECK_S)
            also()
            try:
                await conn.execute("SELECT 1")
                continue
            except psycopg.Error:
                log.warning("the session holding SUMI_REPLICA=%r was lost; taking it again", settings.replica)
            await conn.close()
            while True:
                try:
                    taken = await _take(settings, service, key, HOLDER_GONE_S)
                except psycopg.Error:  # the database is away: the name is nobody else's meanwhile
                    await asyncio.sleep(CHECK_S)
                    continue
                if taken is None:
                    stop(clash_message(settings, service))
                    return
                conn = taken
                break
    finally:
        await conn.close()


class _FencedWatch(logging.Handler):
    """Calls `fenced` when aiokafka keeps finding this process's static member unknown."""

    def __init__(self, fenced: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self.fenced = fenced
        self.seen: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if NOT_RECOGNIZED not in record.getMessage():
            return
        now = time.monotonic()
        self.seen = [t for t in self.seen if now - t < FENCED_WINDOW_S] + [now]
        if len(self.seen) >= FENCED_AFTER and now - self.seen[0] >= FENCED_SPAN_S:
            self.fenced()


class _Stalls:
    """Calls `fenced` when a static member that was in its group has been out of it since
    `STALLED_S` ago, at every check, its group coordinator known each time (an unreachable broker
    is an outage, not a rival: its clock starts again)."""

    def __init__(self, fenced: Callable[[], None]) -> None:
        self.fenced = fenced
        self.was_in: weakref.WeakSet[AIOKafkaConsumer] = weakref.WeakSet()
        self.out_since: weakref.WeakKeyDictionary[AIOKafkaConsumer, float] = weakref.WeakKeyDictionary()

    def check(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for consumer in membership.subscribed():
            state = in_group(consumer)
            if state:
                self.was_in.add(consumer)
                self.out_since.pop(consumer, None)
            elif state is False and consumer in self.was_in:
                if now - self.out_since.setdefault(consumer, now) >= STALLED_S:
                    self.fenced()
                    return
            else:
                self.out_since.pop(consumer, None)


def in_group(consumer: AIOKafkaConsumer) -> bool | None:
    """Whether a static member is in its group now: it heartbeats only between a completed join
    and the next rebalance, and stops for good once the coordinator forgets it. None: not a
    static member, no coordinator known, or aiokafka's internals not as read here."""
    coordinator = getattr(consumer, "_coordinator", None)
    if getattr(consumer, "_closed", True) is not False or coordinator is None:
        return None  # not started, or stopped: out of its group on purpose
    if getattr(coordinator, "_group_instance_id", None) is None:
        return None
    if getattr(coordinator, "coordinator_id", None) is None or not hasattr(coordinator, "_heartbeat_task"):
        return None
    task = coordinator._heartbeat_task
    return task is not None and not task.done()
