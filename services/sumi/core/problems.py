"""RFC 9457 Problem Details with the contract's codes (host-api.md section 6)."""

from dataclasses import dataclass, field
from typing import Any

STATUS = {
    "invalid_request": 400,
    "invalid_spec": 400,
    "unsupported_form": 400,
    "invalid_params": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "unknown_instance": 404,
    "name_conflict": 409,
    "dependency_conflict": 409,
    "resource_busy": 409,
    "instance_exists": 409,
    "instance_terminal": 409,
    "workflow_not_ready": 409,
    "payload_too_large": 413,
    "message_too_large": 413,
    "document_too_large": 413,
    "idempotency_key_reused": 422,
    "idempotency_key_required": 428,
    "event_queue_full": 429,
    "backend_unavailable": 503,
}

TITLES = {code: code.replace("_", " ").capitalize() for code in STATUS}


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


@dataclass
class Problem(Exception):
    code: str
    detail: str
    errors: list[FieldError] = field(default_factory=list)

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def to_json(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"urn:sumi:problem:{self.code}",
            "title": TITLES[self.code],
            "status": self.status,
            "code": self.code,
            "detail": self.detail,
        }
        if instance:
            body["instance"] = instance
        if self.errors:
            body["errors"] = [{"path": e.path, "message": e.message} for e in self.errors]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "Problem":
        return cls(
            body["code"], body.get("detail", ""), [FieldError(e["path"], e["message"]) for e in body.get("errors", [])]
        )
