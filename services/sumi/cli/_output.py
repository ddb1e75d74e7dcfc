"""What a command prints: one value rendered as a table (for people), JSON or YAML (for scripts)."""

import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from sumi.cli._errors import CliError

FORMATS = ("table", "json", "yaml")
err = Console(stderr=True, highlight=False, soft_wrap=True)


def show(value: Any, fmt: str, columns: Sequence[str] = ()) -> None:
    """A list of objects as rows of COLUMNS, an object as field/value rows, anything else as it is."""
    if fmt == "json":
        print(json.dumps(value, indent=2, ensure_ascii=False))
    elif fmt == "yaml":
        print(yaml.safe_dump(value, sort_keys=False, allow_unicode=True), end="")
    elif isinstance(value, list):
        _print(_rows(value, columns or _keys(value)))
    elif isinstance(value, dict):
        _print(_fields(value))
    else:
        print(value)


def problem(error: CliError, fmt: str) -> None:
    """A failure: the whole Problem as JSON on stdout for scripts, one line on stderr for people."""
    if fmt == "json":
        print(json.dumps(error.as_json(), ensure_ascii=False))
    err.print(f"sumi: {error.line()}", markup=False)


def note(message: str) -> None:
    """Progress and outcomes for a person: stderr, so stdout stays the command's value."""
    err.print(message, markup=False)


def _keys(items: list[Any]) -> list[str]:
    keys: list[str] = []
    for item in items:
        for k in item if isinstance(item, dict) else ():
            if k not in keys:
                keys.append(k)
    return keys


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _rows(items: list[Any], columns: Sequence[str]) -> Table:
    table = Table(*columns, box=None, header_style="bold", pad_edge=False)
    for item in items:
        table.add_row(*(_cell(_dig(item, c)) for c in columns))
    return table


def _fields(value: dict[str, Any]) -> Table:
    table = Table("field", "value", box=None, header_style="bold", pad_edge=False)
    for k, v in value.items():
        table.add_row(k, _cell(v))
    return table


def _dig(item: Any, column: str) -> Any:
    """`spec.queue` reads item["spec"]["queue"]."""
    for part in column.split("."):
        item = item.get(part) if isinstance(item, dict) else None
    return item


def _print(table: Table) -> None:
    Console(file=sys.stdout, highlight=False, soft_wrap=True, width=200 if not sys.stdout.isatty() else None).print(
        table
    )
