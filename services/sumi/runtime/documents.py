"""DOC-1..6 for Python values: is it a document, and what is its RFC 8785 canonical JSON.

The Python twin of ``js/document.mjs``: a document root is a ``dict`` with ``str`` keys (at most
1024 of them, the limit is on the root only); inside are ``None``, ``bool``, ``int``, finite
``float``, well-formed ``str``, ``list`` and such ``dict``s; shared acyclic sub-objects are
allowed, cycles are not; the canonical UTF-8 form is at most 1,048,576 bytes. Anything else
(tuples, sets, bytes, objects) is not a document. Canonicalization is the ``rfc8785`` package's.
"""

from __future__ import annotations

import math
from typing import Any

import rfc8785

MAX_DOCUMENT_BYTES = 1_048_576
MAX_ROOT_PROPERTIES = 1024


class DocumentError(ValueError):
    """``code`` is ``invalid_params`` or ``document_too_large`` (the Host's codes for it)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(path: str, what: str) -> DocumentError:
    return DocumentError("invalid_params", f"{path or 'document'}: {what}")


def _well_formed(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(path, "string is not well-formed Unicode") from None


def _walk(value: Any, path: str, active: set[int], done: set[int]) -> None:
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(path, "number is not finite")
        return
    if isinstance(value, str):
        _well_formed(value, path)
        return
    if not isinstance(value, dict | list):
        raise _invalid(path, f"{type(value).__name__} is not a document value")
    if id(value) in done:
        return  # a shared, already judged sub-object (DOC-3)
    if id(value) in active:
        raise _invalid(path, "cycle")
    active.add(id(value))
    if isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", active, done)
    else:
        for key, item in value.items():
            if not isinstance(key, str):
                raise _invalid(path, f"key {key!r} is not a str")
            sub = f"{path}.{key}" if path else key
            _well_formed(key, sub)
            _walk(item, sub, active, done)
    active.discard(id(value))
    done.add(id(value))


def canonical_document(value: Any) -> str:
    """The canonical JSON of a document; raises DocumentError when ``value`` is not one."""
    if not isinstance(value, dict):
        raise _invalid("", "a document is a dict")
    if len(value) > MAX_ROOT_PROPERTIES:
        raise DocumentError("document_too_large", f"more than {MAX_ROOT_PROPERTIES} root properties")
    try:
        _walk(value, "", set(), set())
    except RecursionError:
        raise _invalid("", "document nested too deeply") from None
    try:
        text = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError, RecursionError) as exc:
        raise _invalid("", str(exc)) from None  # e.g. an int outside the exactly representable range
    if len(text) > MAX_DOCUMENT_BYTES:
        raise DocumentError("document_too_large", f"canonical JSON exceeds {MAX_DOCUMENT_BYTES} bytes")
    return text.decode("utf-8")
