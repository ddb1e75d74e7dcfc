"""Timestamps as the contract writes them: RFC 3339 UTC with milliseconds and a `Z`."""

from datetime import UTC, datetime


def rfc3339(value: datetime | int) -> str:
    """UTC with millisecond precision and a `Z` (epoch ms accepted too)."""
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, UTC)
    text = value.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
