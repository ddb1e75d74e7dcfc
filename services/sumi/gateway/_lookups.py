"""What every request looks up (who its token is, the queue or worker it names), kept in memory
until the read models those rows come from change (docs/decisions.md).

The control projection notifies `sumi_changed_<schema>` in the same transaction as any change
to Spaces, tokens, grants or Resources; the gateway's listener (`_decisions`) drops everything
here when it hears it. The notification of a revocation is delivered with its decision, ahead
of it, so the gateway that answered the revocation never serves the revoked token again; any
other gateway stops within the notification's delivery. While the listener is not connected
(Postgres restarting) nothing is kept, since a change could pass unheard.
"""

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

Row = dict[str, Any]


def changes_channel(schema: str) -> str:
    """The projections' side computes the same name in SQL from `current_schema()`."""
    return f"sumi_changed_{schema}"


class Lookups:
    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit  # rows kept at most: a flood of unknown tokens costs a refill, not memory
        self.live = False  # whether changes are heard: only then is anything kept
        self._generation = 0
        self._rows: dict[Hashable, Row | None] = {}

    def heard(self, live: bool) -> None:
        """The listener (re)connected or lost its connection: what was kept may be stale either way."""
        self.live = live
        self.changed()

    def changed(self) -> None:
        self._generation += 1
        self._rows.clear()

    async def get(self, key: Hashable, load: Callable[[], Awaitable[Row | None]]) -> Row | None:
        if key in self._rows:
            return self._rows[key]
        generation = self._generation
        row = await load()
        # A change heard while the row was on its way may be newer than the row: not kept.
        if self.live and generation == self._generation:
            if len(self._rows) >= self.limit:
                self._rows.clear()
            self._rows[key] = row
        return row
