"""The one canonical JSON form (RFC 8785, JCS) and the document rules (DOC-1..6).

Every document the Host writes to a record (specs, observations, Problems, command
payloads, params, step results, outputs) and every comparison of two documents uses
this form, so that equal documents are equal strings everywhere: the gateway, the
engines, the projections and both runtimes (the Python child imports this module;
``runtime/js/document.mjs`` is its JavaScript twin, held byte for byte to it by
``tests/unit/runtime/test_canonical_agreement.py``).

Numbers are IEEE doubles, as JSON numbers are to JavaScript and to RFC 8785: a Python
``int`` within ±2**53 is exact and written as its digits; any other ``int`` is read as
the nearest double (what ``JSON.parse`` does with the same literal), and one beyond the
double range is refused like an infinity. We chose rounding over refusing integers that
are not exactly representable so that one literal means one value whoever wrote it: an
HTTP client, a JavaScript worker or a Python worker (docs/decisions.md).

The walk is iterative, bounded in depth (``MAX_DEPTH``, a DOC limit) and stops as soon
as the output passes the size bound, so a hostile value costs at most the bound.
Numbers and strings are formatted by the ``rfc8785`` package (ES6 Number::toString);
its whole-value ``dumps`` is not used: it refuses integers of 2**53 and beyond, recurses,
and cannot stop early.

Only the standard library and ``rfc8785`` are imported: the Python runtime's sandbox
holds nothing else.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import rfc8785

# A JSON document as Python holds it (what `json.loads` returns, tuples allowed).
JSON = None | bool | int | float | str | Sequence["JSON"] | Mapping[str, "JSON"]

MAX_DOCUMENT_BYTES = 1_048_576  # DOC-1: canonical UTF-8 bytes
MAX_ROOT_PROPERTIES = 1024  # DOC-1: on the root only
# DOC limit (docs/decisions.md): objects and arrays nested in a document, the root counted.
# Every reader of a document (the Host's frame reader, the gateway's JSON parser, both
# runtimes) reads this depth with room to spare, so whatever a runtime accepts the Host reads.
MAX_DEPTH = 128
_SAFE = 2**53  # every integer up to here is a double, exactly


class DocumentError(ValueError):
    """Not JSON, or not a document; ``code`` is ``invalid_params`` or ``document_too_large`` (DOC-6)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def canonical(value: Any, *, max_depth: int | None = None) -> str:
    """`value` in RFC 8785 form; raises DocumentError (a ValueError) if it is not JSON."""
    return _Writer((list, tuple), None, max_depth).run(value)


def document(value: Any) -> str:
    """The canonical JSON of a document (DOC-1..3) within DOC-1's limits and MAX_DEPTH, or DocumentError."""
    if not isinstance(value, dict):
        raise DocumentError("invalid_params", "a document is an object (null, arrays and scalars are not)")
    if len(value) > MAX_ROOT_PROPERTIES:
        raise DocumentError("document_too_large", f"more than {MAX_ROOT_PROPERTIES} root properties")
    return _Writer((list,), MAX_DOCUMENT_BYTES, MAX_DEPTH).run(value)


def json_int(literal: str) -> int | float:
    """An integer literal read as JavaScript reads it: exact within ±2**53, else the nearest double.

    For ``json.loads(parse_int=...)``; a literal beyond the double range is an infinity, which
    no document accepts. Long literals go straight to ``float`` (correctly rounded), so Python's
    limit on int digits never applies."""
    if len(literal) <= 17:
        n = int(literal)
        if -_SAFE <= n <= _SAFE:
            return n
    return float(literal)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> Any:
    """JSON with numbers as doubles (``json_int``); NaN and Infinity literals are refused."""
    return json.loads(text, parse_int=json_int, parse_constant=_no_constant)


class _Open:
    __slots__ = ("items", "close", "ident", "count", "key")

    def __init__(self, items: Iterator[Any], close: bytes, ident: int) -> None:
        self.items, self.close, self.ident = items, close, ident
        self.count = 0
        self.key: str | int | None = None


_END = object()


class _Writer:
    """One canonical serialization: an explicit stack instead of recursion."""

    def __init__(
        self, lists: tuple[type[list[Any]] | type[tuple[Any, ...]], ...], max_bytes: int | None, max_depth: int | None
    ) -> None:
        self.lists, self.max_bytes, self.max_depth = lists, max_bytes, max_depth
        self.parts: list[bytes] = []
        self.size = 0
        self.stack: list[_Open] = []
        self.active: set[int] = set()

    def run(self, value: Any) -> str:
        self._value(value)
        while self.stack:
            self._step(self.stack[-1])
        return b"".join(self.parts).decode("utf-8")

    def _step(self, top: _Open) -> None:
        """The next member of the innermost open object or array, or its end."""
        item: Any = next(top.items, _END)
        if item is _END:
            self._put(top.close)
            self.active.discard(top.ident)
            self.stack.pop()
            return
        if top.count:
            self._put(b",")
        top.count += 1
        if top.close == b"}":
            key, item = item
            top.key = key
            self._put(self._string(key) + b":")
        else:
            top.key = top.count - 1
        self._value(item)

    def _value(self, v: Any) -> None:
        if v is None:
            self._put(b"null")
        elif v is True or v is False:
            self._put(b"true" if v else b"false")
        elif isinstance(v, int | float):
            self._put(self._number(v))
        elif isinstance(v, str):
            self._put(self._string(v))
        elif isinstance(v, dict):
            self._open(v, iter(self._sorted(v)), b"{", b"}")
        elif isinstance(v, self.lists):
            self._open(v, iter(v), b"[", b"]")
        else:
            raise self._invalid(f"{type(v).__name__} is not a JSON value")

    def _open(self, v: Any, items: Iterator[Any], start: bytes, close: bytes) -> None:
        if id(v) in self.active:
            raise self._invalid("cycle")
        if self.max_depth is not None and len(self.stack) >= self.max_depth:
            raise self._invalid(f"nested deeper than {self.max_depth} objects and arrays")
        self._put(start)
        self.active.add(id(v))
        self.stack.append(_Open(items, close, id(v)))

    def _sorted(self, obj: dict[Any, Any]) -> list[tuple[str, Any]]:
        for key in obj:
            if not isinstance(key, str):
                raise self._invalid(f"key {key!r} is not a string")
        # RFC 8785 3.2.3: UTF-16 code units; lone surrogates sort here and are refused when written.
        return sorted(obj.items(), key=lambda kv: kv[0].encode("utf-16-be", "surrogatepass"))

    def _number(self, n: int | float) -> bytes:
        if isinstance(n, int):
            if -_SAFE <= n <= _SAFE:
                return int.__repr__(n).encode()
            try:
                n = float(n)  # the nearest double, as JSON.parse reads the literal
            except OverflowError:
                raise self._invalid("integer beyond the range of a double") from None
        if not math.isfinite(n):
            raise self._invalid("number is not finite")
        return rfc8785.dumps(float(n))

    def _string(self, s: str) -> bytes:
        if self.max_bytes is not None and len(s) > self.max_bytes:
            self._too_large()  # a character is at least one byte: no need to encode it first
        try:
            return rfc8785.dumps(str.__str__(s))
        except rfc8785.CanonicalizationError:
            raise self._invalid("string is not well-formed Unicode") from None

    def _put(self, b: bytes) -> None:
        self.size += len(b)
        if self.max_bytes is not None and self.size > self.max_bytes:
            self._too_large()
        self.parts.append(b)

    def _too_large(self) -> None:
        raise DocumentError("document_too_large", f"canonical JSON exceeds {self.max_bytes} bytes")

    def _invalid(self, what: str) -> DocumentError:
        path = ""
        for frame in self.stack:
            if isinstance(frame.key, int):
                path += f"[{frame.key}]"
            elif frame.key is not None:
                path += f".{frame.key}" if path else frame.key
        return DocumentError("invalid_params", f"{path or 'document'}: {what}")


# ---- the fast path -------------------------------------------------------------------------
#
# The walk above costs Python calls per value: ~190 ms for a 1 MiB document of small values,
# paid on a Host's event loop by every check of a step result, params or payload (one Space's
# large documents then stall every other Space's work). The standard library's C encoder and
# the guards below take ~45 ms for the same document (measured here), and write the same bytes
# except where RFC 8785 differs from Python:
# floats Python writes another way (integral ones, exponents 16..20, padded small exponents),
# integers past 2**53, keys whose UTF-16 order differs from their code point order, depth,
# lone surrogates. Each of these shows in the encoder's output, outside its strings, and is
# found there by a C-speed pattern: then, and on any error, the exact walk decides. So the
# fast path only ever answers what the walk would (tests/unit/core/test_canonical_fast.py).

_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=True, sort_keys=True, separators=(",", ":")
).encode
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# Outside strings: a float Python writes unlike ES6 Number::toString (integral, exponent 16..20,
# a padded small exponent), or an integer past 2**53 (16 digits or more).
_FLOAT_UNLIKE_ES6 = re.compile(r"\.0(?![0-9])|e\+(?:1[6-9]|20)(?![0-9])|e-0")
_LONG_INT = re.compile(r"(?<![0-9.])-?[0-9]{16,}(?![0-9.eE])")
# A key holding a character whose UTF-16 order is not its code point order (U+E000 and up).
_HIGH = re.compile(r"[\ue000-\U0010ffff]")
_KEY = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"(?=:)')
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?[0-9][0-9.eE+-]*')
_BRACKETS = {ord(c): None for c in ',:0123456789-+.eEtrufalsn"\\'}
_DEPTH_STEP = {ord("{"): 1, ord("["): 1, ord("}"): -1, ord("]"): -1}


def _es6_token(match: re.Match[str]) -> str:
    token = match.group()
    if token[0] == '"' or (len(token) < 16 and token.lstrip("-").isdigit()):
        return token
    return rfc8785.dumps(float(token)).decode()


def _fast(value: Any, max_bytes: int | None, max_depth: int | None) -> str | None:
    """The canonical text by the C encoder, or None where only the walk can tell."""
    try:
        text = _ENCODE(value)
    except (ValueError, TypeError, RecursionError):
        return None
    bare = _STRING.sub('""', text)
    if _HIGH.search(text) and any(_HIGH.search(key) for key in _KEY.findall(text)):
        return None
    if (("." in bare or "e" in bare) and _FLOAT_UNLIKE_ES6.search(bare)) or _LONG_INT.search(bare):
        try:  # rare: rewrite those numbers, strings left as they are
            text = _TOKEN.sub(_es6_token, text)
        except (ValueError, OverflowError):  # beyond the doubles: the walk says so
            return None
        bare = _STRING.sub('""', text)
    if max_depth is not None:
        brackets = bare.translate(_BRACKETS)
        if (
            set(brackets) - set("{}[]")
            or max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, map(ord, brackets))), default=0) > max_depth
        ):
            return None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return None
    if max_bytes is not None and size > max_bytes:
        return None
    return text


def parsed_document(value: Any) -> str:
    """``document(value)`` for a value ``json.loads`` (or ``loads``) produced: no tuples, no
    cycles, only the standard types. The same answer, in a fraction of the time."""
    if type(value) is dict and len(value) <= MAX_ROOT_PROPERTIES:
        text = _fast(value, MAX_DOCUMENT_BYTES, MAX_DEPTH)
        if text is not None:
            return text
    return document(value)


def parsed_canonical(value: Any) -> str:
    """``canonical(value)`` for a value parsed from JSON or built from typed records (every key
    a ``str``: the C encoder would write an ``int`` key as a string instead of refusing it)."""
    if type(value) is dict or type(value) is list:
        text = _fast(value, None, None)
        if text is not None:
            return text
    return canonical(value)
