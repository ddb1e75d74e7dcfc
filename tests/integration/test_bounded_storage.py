"""Bounded storage: settled queue rows leave Postgres while every counter stays exact, and the
audit still finds the rebuilt read models identical (sumi_projections._prune); no row holds a
message's body, which a peek reads from the queue log."""

import base64
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from sumi.host.audit import replay_and_compare
from sumi.wire import pgtext
from sumi.wire.topics import partition_for
from sumi_projections import _prune
from tests.conformance.kit import Api
from tests.hostkit import Host

pytestmark = pytest.mark.integration


def rows(host: Host, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    schema = host.settings.db_schema
    with psycopg.connect(host.settings.database_url, options=f"-c search_path={schema}") as conn:
        return conn.execute(sql, params).fetchall()


def counters(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "observedAt"}


async def prune_now(host: Host) -> int:
    """A pass as the projections service runs it, with a retention of zero at this instant."""
    async with await psycopg.AsyncConnection.connect(
        host.settings.database_url,
        autocommit=True,
        options=f"-c search_path={host.settings.db_schema}",
        context=pgtext.ADAPTERS,
    ) as conn:
        return await _prune.prune(conn, host.settings.db_schema, datetime.now(UTC))


async def test_settled_rows_leave_and_the_counters_and_the_audit_stay(
    host: Host, client: httpx.AsyncClient, space: Any
) -> None:
    # QC-43, QC-33, QC-34: settled state stays exact in the stats after its rows are gone
    # The projections service runs its prune pass from its start (a mark exists).
    assert rows(host, "SELECT what FROM prune_marks") == [("queue_messages",)]
    api = Api(client, space)
    q, dlq = await api.queue(), await api.queue()
    await api.consumer(q, await api.worker(), maxRetries=1, deadLetterQueue={"resourceUid": dlq})
    await api.send(q, *(["ack"] * 12 + ["retry"] * 3))
    before = await api.until(q, acknowledged=12, deadLettered=3, retried=3, inFlight=0)
    settled = rows(host, "SELECT state FROM queue_messages WHERE queue_uid = %s", q)
    assert sorted(state for (state,) in settled) == ["acknowledged"] * 12 + ["deadlettered"] * 3

    assert await prune_now(host) >= 15
    assert rows(host, "SELECT count(*) FROM queue_messages WHERE queue_uid = %s", q) == [(0,)]
    assert counters(await api.stats(q)) == counters(before)  # nothing counted changed
    assert (await api.stats(dlq))["ready"] == 3  # the dead letters are pending there, and stay
    assert len(await api.peek(dlq)) == 3

    await api.send(q, "ack")  # counting goes on from the kept counters
    after = await api.until(q, acknowledged=13, inFlight=0)
    assert (after["deadLettered"], after["retried"], after["ready"]) == (3, 3, 0)
    # The rebuild from the topics still sees every settled message, and is pruned to the same mark.
    audit = await replay_and_compare(host.settings)
    assert audit.differences == [], audit.lines()


async def test_a_peek_reads_bodies_from_the_log_and_no_row_holds_one(
    host: Host, client: httpx.AsyncClient, space: Any
) -> None:
    # QC-52, QC-43: a peek shows each pending message's body, read where its row says it lies
    # in the queue log, also when other queues' records lie between them (two seeks).
    assert ("body",) not in rows(
        host, "SELECT column_name FROM information_schema.columns WHERE table_name = %s", "queue_messages"
    )
    api = Api(client, space)
    q = await api.queue()
    parts = host.settings.partitions
    other = await api.queue()
    while partition_for(other, parts) != partition_for(q, parts):  # a neighbour in the same partition
        other = await api.queue()
    first = [bytes([i]) * (i + 1) for i in range(3)]
    sent = await api.send(q, *first)
    for _ in range(7):  # 700 records of the neighbour between them: past the reader's gap
        await api.send(other, *(["x" * 32] * 100))
    later = [b"\x00\xffafter", b""]
    sent += await api.send(q, *later)
    peek = await api.peek(q)
    assert [m["id"] for m in peek] == sent
    assert [base64.b64decode(m["body"]) for m in peek] == first + later
    assert [m["size"] for m in peek] == [len(b) for b in first + later]
    places = rows(host, "SELECT log_partition FROM queue_messages WHERE queue_uid = ANY(%s)", [q, other])
    assert {p for (p,) in places} == {partition_for(q, parts)}
