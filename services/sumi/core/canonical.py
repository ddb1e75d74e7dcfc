"""The one canonical JSON form (RFC 8785, JCS): what goes on the log, into fingerprints and comparisons.

Every document the Host writes to a record (specs, observations, Problems, command
payloads) and every comparison of two documents uses this form, so that equal
documents are equal strings everywhere, in every service, across versions.
"""

from collections.abc import Mapping, Sequence

import rfc8785

# A JSON document as Python holds it (what `json.loads` returns, tuples allowed).
JSON = None | bool | int | float | str | Sequence["JSON"] | Mapping[str, "JSON"]

# A value RFC 8785 cannot represent: NaN or an infinity, an integer beyond 2**53,
# a non-string key, a lone surrogate, a type that is not JSON.
CanonicalizationError = rfc8785.CanonicalizationError


def canonical(value: JSON) -> str:
    """`value` in RFC 8785 form; raises CanonicalizationError (a ValueError) if it is not JSON."""
    return rfc8785.dumps(value).decode("utf-8")
