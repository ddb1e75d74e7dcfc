"""Which of a worker's log lines a `GET …/logs` asks for, and how each is answered.

No I/O of its own, yet not a pure module: importing it loads the gateway package, and with it
the HTTP app (tests/unit/test_pure_modules.py would see starlette).
"""

from dataclasses import dataclass
from datetime import datetime

from sumi.core.problems import Problem
from sumi.core.records import WorkerLogged

LEVELS = ("debug", "info", "warn", "error")


@dataclass(frozen=True)
class LogFilter:
    space: str
    worker_uid: str
    instance: str | None = None
    level: str = "debug"  # this level and above
    since: int | None = None  # epoch ms

    def matches(self, rec: WorkerLogged) -> bool:
        return (
            rec.space == self.space
            and rec.workerUid == self.worker_uid
            and (self.instance is None or rec.instanceId == self.instance)
            and LEVELS.index(rec.level) >= LEVELS.index(self.level)
            and (self.since is None or rec.at >= self.since)
        )


def parse_since(raw: str | None) -> int | None:
    """An RFC 3339 time (`2026-12-02T06:00:00Z`) as epoch ms."""
    if raw is None:
        return None
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise Problem("invalid_request", "since must be an RFC 3339 time, e.g. 2026-12-02T06:00:00Z") from None
    if at.tzinfo is None:
        raise Problem("invalid_request", "since needs a time zone (Z or an offset)")
    # Before 1970 is before every line: Kafka's time index takes no negative times.
    return max(0, int(at.timestamp() * 1000))
