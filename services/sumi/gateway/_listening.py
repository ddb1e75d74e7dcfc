"""A Postgres connection that waits for notifications without waking (issue 40).

psycopg's async connection re-arms each wait every 0.1 s (its `_WAIT_INTERVAL`, there so a
blocking wait sees Ctrl-C; an asyncio task is cancelled anyway), so the gateway's listener woke
ten times a second with nothing to hear. Its waits end on the socket, on a timeout asked for, or
on a cancel; the interval stays only as a backstop.
"""

from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen

RV = TypeVar("RV")
BACKSTOP_S = 60.0


class ListeningConnection(psycopg.AsyncConnection[Any]):
    async def wait(self, gen: PQGen[RV], interval: float = BACKSTOP_S, timeout: float | None = None) -> RV:
        return await super().wait(gen, interval=max(interval, BACKSTOP_S), timeout=timeout)
