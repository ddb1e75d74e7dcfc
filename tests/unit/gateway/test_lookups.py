"""The rows the gateway keeps between requests (gateway._lookups): kept only while changes are
heard, dropped on every change, and never a row that a change may have overtaken."""

import asyncio

from sumi.gateway._lookups import Lookups, Row


class Table:
    """A read model's row that a load reads, counting the loads."""

    def __init__(self, row: Row | None) -> None:
        self.row, self.loads = row, 0

    async def load(self) -> Row | None:
        self.loads += 1
        return self.row


async def test_a_row_is_kept_while_changes_are_heard_and_dropped_on_a_change() -> None:
    # QC-15: a token's rights are those of the read model now, not of a row kept from before
    lookups, table = Lookups(), Table({"principal": "p"})
    lookups.heard(True)
    assert await lookups.get("k", table.load) == {"principal": "p"}
    assert await lookups.get("k", table.load) == {"principal": "p"}
    assert table.loads == 1
    table.row = None  # revoked
    lookups.changed()
    assert await lookups.get("k", table.load) is None
    assert table.loads == 2


async def test_nothing_is_kept_while_changes_could_pass_unheard() -> None:
    # QC-15: without the listener a revocation could pass unheard, so every request reads
    lookups, table = Lookups(), Table({"principal": "p"})
    for _ in range(3):
        await lookups.get("k", table.load)
    assert table.loads == 3
    lookups.heard(True)
    await lookups.get("k", table.load)
    lookups.heard(False)  # the listener lost its connection: what was kept may be stale
    await lookups.get("k", table.load)
    assert table.loads == 5


async def test_a_row_loaded_across_a_change_is_not_kept() -> None:
    # QC-15: the load began before the revocation committed; its row may predate it
    lookups = Lookups()
    lookups.heard(True)
    started, release = asyncio.Event(), asyncio.Event()
    loads = 0

    async def slow() -> Row | None:
        nonlocal loads
        loads += 1
        started.set()
        await release.wait()
        return {"principal": "p"}

    first = asyncio.create_task(lookups.get("k", slow))
    await started.wait()
    lookups.changed()
    release.set()
    assert await first == {"principal": "p"}
    await lookups.get("k", slow)
    assert loads == 2


async def test_a_flood_of_keys_stays_within_the_limit() -> None:
    # QC-15: unknown tokens by the thousand cost loads, never unbounded memory
    lookups, table = Lookups(limit=10), Table(None)
    lookups.heard(True)
    for n in range(100):
        await lookups.get(n, table.load)
    assert len(lookups._rows) <= 10
