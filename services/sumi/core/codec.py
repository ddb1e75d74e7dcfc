"""Avro single-object encoding of records, through fastavro.

Each value is `C3 01` + the writer schema's CRC-64-AVRO fingerprint (little
endian) + the Avro binary body, so any reader (an auditor's included) can tell
which schema wrote it. Current schemas live in `schemas/`; superseded versions
in `schemas/history/` stay readable and are resolved to the current one.
"""

import dataclasses
import io
import json
from datetime import datetime
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from sumi.core.records import RECORD_TYPES, Record

MAGIC = b"\xc3\x01"


def schemas_dir() -> Traversable:
    # Package data: the wheel carries schemas/ as sumi/schemas (a link to the top-level
    # folder in a checkout), so an installed Host needs no source tree beside it.
    return files("sumi") / "schemas"


def _avsc(folder: Traversable) -> list[Traversable]:
    if not folder.is_dir():  # schemas/history/ exists once a schema has been superseded
        return []
    return sorted((p for p in folder.iterdir() if p.name.endswith(".avsc")), key=lambda p: p.name)


def _fp(parsed: dict[str, Any]) -> bytes:
    return int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16).to_bytes(8, "little")


def _parse(path: Traversable) -> dict[str, Any]:
    parsed = parse_schema(json.loads(path.read_text()), _write_hint=False)
    if not isinstance(parsed, dict):  # a union or a primitive cannot name a record type
        raise ValueError(f"{path.name}: a record schema must be a JSON object")
    return parsed


@cache
def _registry() -> tuple[dict[str, dict[str, Any]], dict[bytes, dict[str, Any]]]:
    current: dict[str, dict[str, Any]] = {}
    by_fp: dict[bytes, dict[str, Any]] = {}
    header: dict[str, bytes] = _HEADERS
    root = schemas_dir()
    for path in _avsc(root):
        parsed = _parse(path)
        current[path.name.removesuffix(".avsc")] = parsed
        by_fp[_fp(parsed)] = parsed
        header[path.name.removesuffix(".avsc")] = MAGIC + _fp(parsed)
    for path in _avsc(root / "history"):
        parsed = _parse(path)
        by_fp[_fp(parsed)] = parsed
    return current, by_fp


_HEADERS: dict[str, bytes] = {}


def schema_of(type_name: str) -> dict[str, Any]:
    return _registry()[0][type_name]


def _short_name(parsed: dict[str, Any]) -> str:
    return str(parsed["name"]).rsplit(".", 1)[-1]


def encode(record: Record) -> bytes:
    name = type(record).__name__
    parsed = schema_of(name)
    out = io.BytesIO()
    out.write(_HEADERS[name])  # magic + fingerprint, computed once per schema
    # A shallow dict: asdict() deep-copies every field, bodies included, for nothing.
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    fastavro.schemaless_writer(out, parsed, _to_avro(values))
    return out.getvalue()


class Undecodable(ValueError):
    """Bytes that are no record of ours; `reason` is one word a dead-letter reader can count by."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def decode(data: bytes) -> Record:
    if not data:
        raise Undecodable("empty", "the record has no value")
    if data[:2] != MAGIC:
        raise Undecodable("not_avro", "not an Avro single-object encoded record")
    if len(data) < 10:
        raise Undecodable("truncated", f"{len(data)} bytes: shorter than the Avro single-object header")
    writer = _registry()[1].get(data[2:10])
    if writer is None:
        raise Undecodable("unknown_schema", f"unknown schema fingerprint {data[2:10].hex()}")
    name = _short_name(writer)
    reader = schema_of(name)
    body = io.BytesIO(data[10:])
    try:
        raw = fastavro.schemaless_reader(body, writer, reader)
    except EOFError as exc:
        raise Undecodable("truncated", f"the {name} body ends early: {exc or 'end of data'}") from exc
    except Exception as exc:  # fastavro's errors for malformed bodies are many and unrelated
        raise Undecodable("malformed", f"the {name} body does not decode: {exc!r}") from exc
    if body.tell() != len(data) - 10:
        raise Undecodable("malformed", f"{len(data) - 10 - body.tell()} bytes after the {name} body")
    cls = RECORD_TYPES[name]
    values = {k: _from_avro(v) for k, v in raw.items()}  # type: ignore[union-attr]
    if "grants" in values:
        values["grants"] = tuple(values["grants"])
    try:
        return cls(**values)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise Undecodable("malformed", f"the {name} values do not make a record: {exc}") from exc


def _to_avro(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _from_avro(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return value
