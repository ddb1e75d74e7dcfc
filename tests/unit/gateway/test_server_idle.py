"""An idle gateway's server loop wakes once a second, and a stop ends it at once (issue 40).

Counted in main loop turns, not timed: uvicorn's own loop turns ten times a second."""

import asyncio
from typing import Any

import uvicorn

from sumi.gateway._server import Server


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    raise AssertionError("no request is made")


async def test_an_idle_server_turns_once_a_second_and_stops_when_told() -> None:
    # QC-25, WF-46: idle is idle; the gateway still stops on a signal.
    server = Server(uvicorn.Config(_app, host="127.0.0.1", port=0, lifespan="off", log_level="warning"))
    turns = 0
    tick = server.on_tick

    async def counted(counter: int) -> bool:
        nonlocal turns
        turns += 1
        return await tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    before = turns
    await asyncio.sleep(3)
    assert turns - before <= 3 * 2  # uvicorn's loop: 30
    server.stop()
    await asyncio.wait_for(serving, 10)
