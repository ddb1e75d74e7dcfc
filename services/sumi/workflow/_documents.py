"""Documents as the Host stores them (DOC-1..6), as Problems: the gateway's and the engine's view
of ``sumi.core.canonical.document``, the one check and canonical form of a document.

The runtimes check JavaScript and Python values themselves (runtime/js/document.mjs, the same
module in the Python child); what reaches the engine is plain JSON, judged here again by the
same rules (DOC-1's limits, MAX_DEPTH, numbers as doubles).
"""

from typing import Any

from sumi.core.canonical import MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_ROOT_PROPERTIES, DocumentError, parsed_document
from sumi.core.problems import Problem

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "MAX_NAME_LENGTH", "MAX_ROOT_PROPERTIES", "document_json", "is_name"]

MAX_NAME_LENGTH = 256  # instance IDs, step names, event types: Unicode scalar values (WF-19, WF-23, WF-34)


def document_json(value: Any, what: str) -> str:
    """The canonical JSON of a document, or Problem invalid_params / document_too_large (DOC-6).
    Every value here was parsed from JSON (a request body, a command, a runtime frame)."""
    try:
        return parsed_document(value)
    except DocumentError as e:
        raise Problem(e.code, f"{what}: {e}") from None


def is_name(value: object) -> bool:
    """1..256 Unicode scalar values (no lone surrogates)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_NAME_LENGTH
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    )
