"""A listening connection sleeps until a notification comes (issue 40, idle is idle).

Counted in the waits it arms on its socket, not timed: psycopg's own re-arms every 0.1 s.
No requirement ID applies: the requirements say what a Host answers, not what it costs while
nothing happens; what the listener must keep doing (hearing a decision at once) is asserted."""

import asyncio
from typing import Any

import psycopg
import pytest

from sumi.gateway._listening import ListeningConnection

pytestmark = pytest.mark.integration


async def test_a_listener_waits_without_waking_and_hears_a_notification(database_url: str) -> None:
    loop = asyncio.get_running_loop()
    armed = 0
    add_reader = loop.add_reader

    def counted(fd: Any, callback: Any, *args: Any) -> None:
        nonlocal armed
        armed += 1
        add_reader(fd, callback, *args)

    async with await ListeningConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute('LISTEN "idle40"')
        heard: asyncio.Queue[str] = asyncio.Queue()

        async def listen() -> None:
            async for note in conn.notifies():
                heard.put_nowait(note.payload)

        loop.add_reader = counted  # type: ignore[method-assign]
        listening = asyncio.create_task(listen())
        try:
            await asyncio.sleep(3)
            assert armed <= 3, armed  # psycopg's connection: ~30
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as other:
                await other.execute("NOTIFY \"idle40\", 'decided'")
            assert await asyncio.wait_for(heard.get(), 10) == "decided"
        finally:
            loop.add_reader = add_reader  # type: ignore[method-assign]
            listening.cancel()  # before the connection closes: notifies() holds it
            await asyncio.gather(listening, return_exceptions=True)
