"""Avro single-object encoding of records, through fastavro.

Each value is `C3 01` + the writer schema's CRC-64-AVRO fingerprint (little
endian) + the Avro binary body, so any reader (an auditor's included) can tell
which schema wrote it. Current schemas live in `schemas/`; superseded versions
in `schemas/history/` stay readable and are resolved to the current one.
"""

import dataclasses
import importlib
import io
import json
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
    return _parsed(path, json.loads(path.read_text()))


def _parsed(path: Traversable, raw: Any) -> dict[str, Any]:
    parsed = parse_schema(raw, _write_hint=False)
    if not isinstance(parsed, dict):  # a union or a primitive cannot name a record type
        raise ValueError(f"{path.name}: a record schema must be a JSON object")
    return parsed


def _plain(schema: Any) -> Any:
    """The schema without its logical types: the same bytes on the wire (a timestamp-millis is a
    long), read as the ints our records hold instead of datetimes converted back."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


@dataclasses.dataclass(frozen=True)
class _Schema:
    """One schema, parsed once for fastavro with the names it defines: fastavro's public calls
    parse their schema again on every record, a third of a record's cost."""

    name: str  # the record type it reads as (a superseded version's current name)
    plain: dict[str, Any]
    named: dict[str, Any]

    @classmethod
    def of(cls, raw: dict[str, Any]) -> "_Schema":
        named: dict[str, Any] = {}
        plain: dict[str, Any] = parse_schema(_plain(raw), named, _write_hint=False)  # type: ignore[assignment]
        return cls(_short_name(raw), plain, named)


@dataclasses.dataclass(frozen=True)
class _Registry:
    header: dict[str, bytes]  # type name -> magic + fingerprint of its current schema
    current: dict[str, _Schema]  # type name -> its current schema
    writers: dict[bytes, _Schema]  # fingerprint -> the schema that wrote it (current or history)
    parsed: dict[str, dict[str, Any]]  # type name -> its current schema as fastavro parses it


@cache
def _registry() -> _Registry:
    reg = _Registry({}, {}, {}, {})
    root = schemas_dir()
    for path in _avsc(root):
        raw = json.loads(path.read_text())
        parsed, name = _parsed(path, raw), path.name.removesuffix(".avsc")
        reg.header[name] = MAGIC + _fp(parsed)
        reg.current[name] = reg.writers[reg.header[name][2:]] = _Schema.of(raw)
        reg.parsed[name] = parsed
    for path in _avsc(root / "history"):
        raw = json.loads(path.read_text())
        reg.writers[_fp(_parsed(path, raw))] = _Schema.of(raw)
    return reg


def schema_of(type_name: str) -> dict[str, Any]:
    return _registry().parsed[type_name]


def _short_name(parsed: dict[str, Any]) -> str:
    return str(parsed["name"]).rsplit(".", 1)[-1]


# fastavro's compiled reader and writer under its public calls, given schemas parsed once. They
# are not public: `_fast()` proves them on a record at the first use and otherwise the public
# calls serve (the same bytes, slower).
_READ_DATA: Any = getattr(importlib.import_module("fastavro._read"), "_read_data", None)
_WRITE_DATA: Any = getattr(importlib.import_module("fastavro._write"), "write_data", None)
_OPTIONS = {
    "return_record_name": False,
    "return_record_name_override": False,
    "handle_unicode_errors": "strict",
    "return_named_type": False,
    "return_named_type_override": False,
}


def _read_public(body: io.BytesIO, writer: _Schema, reader: _Schema | None) -> Any:
    return fastavro.schemaless_reader(body, writer.plain, None if reader is None else reader.plain)


def _write_public(out: bytearray, schema: _Schema, values: dict[str, Any]) -> None:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema.plain, values)
    out += buf.getvalue()


def _read_compiled(body: io.BytesIO, writer: _Schema, reader: _Schema | None) -> Any:
    named = {"writer": writer.named, "reader": {} if reader is None else reader.named}
    return _READ_DATA(body, writer.plain, named, None if reader is None else reader.plain, _OPTIONS)


def _write_compiled(out: bytearray, schema: _Schema, values: dict[str, Any]) -> None:
    _WRITE_DATA(out, values, schema.plain, schema.named, "", {})


@cache
def _fast() -> tuple[Any, Any]:
    """The compiled pair when it writes and reads a record as the public calls do, else those."""
    sample = {
        "name": "Probe",
        "type": "record",
        "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "long"}],
    }
    probe = _Schema.of(sample)
    values = {"a": "x", "b": 1 << 40}
    try:
        out = bytearray()
        _write_compiled(out, probe, values)
        public = bytearray()
        _write_public(public, probe, values)
        if out == public and _read_compiled(io.BytesIO(bytes(out)), probe, None) == values:
            return _read_compiled, _write_compiled
    except Exception:  # another fastavro: its public calls
        pass
    return _read_public, _write_public


_FIELDS: dict[type, tuple[str, ...]] = {}  # record type -> its fields, in order


def field_names(record_type: type) -> tuple[str, ...]:
    """A record type's fields, in order: read with getattr, a shallow view of a record (asdict()
    deep-copies every field, bodies included, for nothing: a record's values are immutable)."""
    names = _FIELDS.get(record_type)
    if names is None:
        names = _FIELDS[record_type] = tuple(f.name for f in dataclasses.fields(record_type))
    return names


def encode(record: Record) -> bytes:
    name = type(record).__name__
    reg = _registry()
    schema = reg.current[name]
    out = bytearray(reg.header[name])  # magic + fingerprint, computed once per schema
    values = {f: getattr(record, f) for f in field_names(type(record))}
    _fast()[1](out, schema, _to_avro(values))
    return bytes(out)


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
    reg = _registry()
    writer = reg.writers.get(data[2:10])
    if writer is None:
        raise Undecodable("unknown_schema", f"unknown schema fingerprint {data[2:10].hex()}")
    name = writer.name
    reader = reg.current[name]
    body = io.BytesIO(data)
    body.seek(10)
    try:
        values = _fast()[0](body, writer, None if reader is writer else reader)
    except EOFError as exc:
        raise Undecodable("truncated", f"the {name} body ends early: {exc or 'end of data'}") from exc
    except Exception as exc:  # fastavro's errors for malformed bodies are many and unrelated
        raise Undecodable("malformed", f"the {name} body does not decode: {exc!r}") from exc
    if body.tell() != len(data):
        raise Undecodable("malformed", f"{len(data) - body.tell()} bytes after the {name} body")
    if "grants" in values:
        values["grants"] = tuple(values["grants"])
    try:
        return RECORD_TYPES[name](**values)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise Undecodable("malformed", f"the {name} values do not make a record: {exc}") from exc


def _to_avro(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
