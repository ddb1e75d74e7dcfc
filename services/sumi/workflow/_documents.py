"""Documents as the Host stores them (DOC-1..6): the checks a Python-side value needs
before it goes on the log as canonical JSON.

The runtimes check JavaScript values property by property (runtime/js/document.mjs);
what reaches the engine is already plain JSON, so here only the root shape and the
limits remain: a root object (DOC-1), at most 1024 own properties on the root, at most
1 MiB of RFC 8785 canonical UTF-8.
"""

from typing import Any

from sumi.core.canonical import CanonicalizationError, canonical
from sumi.core.problems import Problem

MAX_DOCUMENT_BYTES = 1_048_576
MAX_ROOT_PROPERTIES = 1024
MAX_NAME_LENGTH = 256  # instance IDs, step names, event types: Unicode scalar values (WF-19, WF-23, WF-34)


def document_json(value: Any, what: str) -> str:
    """The canonical JSON of a document, or Problem invalid_params / document_too_large (DOC-6)."""
    if not isinstance(value, dict):
        raise Problem("invalid_params", f"{what} must be an object (null, arrays and scalars are not documents)")
    if len(value) > MAX_ROOT_PROPERTIES:
        raise Problem("document_too_large", f"{what} has more than {MAX_ROOT_PROPERTIES} properties")
    try:
        text = canonical(value)
    except (CanonicalizationError, TypeError, ValueError) as exc:
        raise Problem("invalid_params", f"{what} is not a document: {exc}") from None
    if len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise Problem("document_too_large", f"{what} exceeds {MAX_DOCUMENT_BYTES} bytes as canonical JSON")
    return text


def is_name(value: object) -> bool:
    """1..256 Unicode scalar values (no lone surrogates)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_NAME_LENGTH
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    )
