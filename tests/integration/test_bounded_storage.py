"""Bounded storage: settled queue rows and their bodies leave Postgres while every counter stays
exact, and the audit still finds the rebuilt read models identical (sumi_projections._prune)."""

from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from sumi.audit import replay_and_compare
from sumi.core import pgtext
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
    settled = rows(host, "SELECT length(body) FROM queue_messages WHERE queue_uid = %s", q)
    assert len(settled) == 15 and {n for (n,) in settled} == {0}  # bodies left at the settlement

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
