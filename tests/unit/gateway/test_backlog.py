"""The backlog a create would join (issue 41): read while creates come, not while none do."""

import asyncio

import pytest

from sumi.gateway import _backlog
from sumi.gateway._backlog import Backlog


async def test_the_backlog_is_read_while_creates_come_and_not_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    # WF-27: creates are refused while the Host's instances queue past the bound; an idle gateway reads nothing.
    monkeypatch.setattr(_backlog, "READ_EVERY_S", 0.01)
    monkeypatch.setattr(_backlog, "IDLE_AFTER_S", 0.1)
    reads: list[int] = []

    async def count() -> int:
        reads.append(1)
        return 70

    backlog = Backlog(64, count)
    backlog.start()
    try:
        await asyncio.sleep(0.05)
        assert reads == [] and not backlog.full()  # idle: nothing read; the first create is let in
        await asyncio.sleep(0.05)
        assert backlog.full() and backlog.queued == 70
        await asyncio.sleep(0.3)  # no creates for longer than IDLE_AFTER_S: reading stops
        n = len(reads)
        await asyncio.sleep(0.1)
        assert len(reads) == n and not backlog.full()
    finally:
        await backlog.stop()
