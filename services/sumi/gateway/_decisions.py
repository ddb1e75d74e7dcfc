"""Decisions pushed to the gateway: Postgres notifications, not polling (docs/decisions.md).
The same connection hears the changes of the rows `_lookups` keeps. The workflow engine's
decisions come sooner from its log (`_logdecisions`), which resolves the same waiting
requests; this is how every other decision comes, and the fallback for what that log cannot give.

A projection that writes a `decisions` row also notifies `sumi_decided_<schema>`, in the
same transaction, so the notification arrives exactly when the row (and the read-model rows
written with it) is visible. The notification carries the decision itself, so the answer
needs no read; one too large for a notification, or the second decision of a command ID
(the row keeps the first), names the command ID and the row is read. Each gateway listens on one
connection of its own and resolves the requests it has waiting by command ID; any
number of gateways listen side by side, each taking the IDs it waits for.

A request registers before its command is appended, so no notification can pass it by
while the listener is connected. While it is not (Postgres restarting), notifications
are lost: on every (re)connect the listener reads the rows of everything waiting once.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import psycopg_pool

from sumi.core.config import Settings
from sumi.gateway._listening import ListeningConnection
from sumi.gateway._lookups import Lookups, changes_channel
from sumi.wire import pgtext

log = logging.getLogger("sumi.gateway")

Row = dict[str, Any]


def channel(schema: str) -> str:
    """The notification channel of one Host's read models (its schema); the projections'
    side computes the same name in SQL from `current_schema()`."""
    return f"sumi_decided_{schema}"


class Decisions:
    def __init__(
        self, settings: Settings, fetch: Callable[[list[str]], Awaitable[list[Row]]], lookups: Lookups
    ) -> None:
        self.settings = settings
        self.fetch = fetch  # the decisions rows of these command IDs (the backend's pool)
        self.lookups = lookups  # told of every change of the rows it keeps, on the same connection
        self.waiting: dict[str, list[asyncio.Future[Row]]] = {}
        self.listening = asyncio.Event()
        self._notified: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._fetch_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def expect(self, command_id: str) -> "asyncio.Future[Row]":
        """A future for the decision of `command_id`; register it before the command is appended."""
        fut: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(command_id, []).append(fut)
        fut.add_done_callback(lambda f: self._forget(command_id, f))
        return fut

    def waits_for(self, command_id: str) -> bool:
        return command_id in self.waiting

    def _forget(self, command_id: str, fut: "asyncio.Future[Row]") -> None:
        futures = self.waiting.get(command_id)
        if futures is not None and fut in futures:
            futures.remove(fut)
            if not futures:
                del self.waiting[command_id]

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await ListeningConnection.connect(
            self.settings.database_url,
            autocommit=True,
            options=f"-c search_path={self.settings.db_schema}",
            context=pgtext.ADAPTERS,
        )

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await self._connect() as conn:
                    changes = changes_channel(self.settings.db_schema)
                    await conn.execute(f'LISTEN "{channel(self.settings.db_schema)}"; LISTEN "{changes}"')
                    self.listening.set()
                    self.lookups.heard(True)
                    delay = 0.1
                    self._notify(list(self.waiting))  # whatever was decided while nobody listened
                    async for note in conn.notifies():
                        if note.channel == changes:
                            self.lookups.changed()
                        else:
                            self._heard(note.payload)
            except asyncio.CancelledError:
                raise
            except psycopg.Error as exc:
                log.warning("decision listener: %s; reconnecting in %.1fs", exc, delay)
            self.listening.clear()
            self.lookups.heard(False)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _heard(self, payload: str) -> None:
        # A decision the projection inserted comes whole (the row as `fetch` returns it): no
        # read. One too large for a notification, or decided before, comes as its ID.
        if payload.startswith("{"):
            self.resolve([json.loads(payload)])
        else:
            self._notify(payload.split(","))

    def resolve(self, rows: list[Row]) -> None:
        for row in rows:
            for fut in list(self.waiting.get(row["command_id"], ())):
                if not fut.done():
                    fut.set_result(row)

    def _notify(self, command_ids: list[str]) -> None:
        wanted = [i for i in command_ids if i in self.waiting]
        if wanted:
            self._notified.update(wanted)
            self._wake.set()

    async def _fetch_loop(self) -> None:
        """Read the rows of the notified commands someone waits for: one query for all that
        arrived meanwhile, however many requests wait."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            ids, self._notified = list(self._notified), set()
            try:
                rows = await self.fetch(ids)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                log.warning("decision fetch: %s; retrying", exc)
                self._notified.update(ids)
                await asyncio.sleep(0.1)
                self._wake.set()
                continue
            self.resolve(rows)
