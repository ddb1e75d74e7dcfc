"""The Host's own log: text for a terminal, or one JSON object per line (`SUMI_LOG_FORMAT=json`)
for a collector, each carrying the Space, Resource, batch and instance its work was about.

The IDs ride on a context variable, set by the run that does the work (a batch's run, an
instance's context run): asyncio copies it into every task such a run starts, so every line
logged on its behalf carries them without each call site passing them.
"""

import logging
from contextvars import ContextVar
from typing import Any

TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
FORMATS = ("text", "json")
_TAGS: ContextVar[dict[str, str]] = ContextVar("sumi_log_tags", default={})  # noqa: B039 (never mutated)


def tag(**ids: str | None) -> None:
    """Name what the current task works on (space=, resource=, batch=, instance=) in its lines."""
    _TAGS.set({**_TAGS.get(), **{k: v for k, v in ids.items() if v is not None}})


class _Tags(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _TAGS.get().items():
            setattr(record, key, value)
        return True


def configure(fmt: str = "text", level: str = "WARNING") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_Tags())
    handler.setFormatter(_json() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)


def _json() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    fields: dict[str, Any] = {"levelname": "level", "name": "logger", "asctime": "time"}
    return JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields=fields)
