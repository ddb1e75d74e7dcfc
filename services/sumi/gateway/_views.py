"""Read-model rows as the contract's JSON (host-api.md sections 2 and 3)."""

from typing import Any

from sumi.core.times import rfc3339
from sumi.gateway._backend import Row

# An Operation in one of these has not reached its outcome yet (`?wait=` holds for them).
UNFINISHED = frozenset({"pending", "running", "reconciling"})


def resource_json(row: Row) -> dict[str, Any]:
    return {
        "uid": row["uid"],
        "space": row["space"],
        "name": row["name"],
        "form": row["form"],
        "generation": row["generation"],
        "state": row["state"],
        "spec": row["spec"],
        "observed": row["observed"],
        "output": row["output"],
        "createdAt": rfc3339(row["created_at"]),
        "updatedAt": rfc3339(row["updated_at"]),
    }


def operation_json(row: Row) -> dict[str, Any]:
    body = {
        "id": row["id"],
        "kind": row["kind"],
        "space": row["space"],
        "resourceUid": row["resource_uid"],
        "generation": row["generation"],
        "state": row["state"],
        "effect": row["effect"],
        "createdAt": rfc3339(row["created_at"]),
        "updatedAt": rfc3339(row["updated_at"]),
    }
    if row["error"] is not None:
        body["error"] = row["error"]
    return body


def with_rfc3339(result: dict[str, Any]) -> dict[str, Any]:
    """A decided result with any epoch-ms timestamps (`…At`) turned into RFC 3339."""
    return {k: rfc3339(v) if k.endswith("At") and isinstance(v, int) else v for k, v in result.items()}
