"""Exit codes scripts can trust, and the one error type every command raises.

A Problem from the gateway maps to an exit code by its HTTP status, so a script can tell
"not there" from "in the way" from "try again later" without parsing text; the line printed
holds the Problem's `code` for a human (and the whole Problem with `--output json`)."""

from typing import Any

OK = 0
FAILED = 1  # an Operation failed, a replay differed, a check found mismatches
USAGE = 2  # bad flags, a bad manifest, no token (Click's own usage errors use 2 as well)
NOT_FOUND = 3  # 404: not_found, unknown_instance
CONFLICT = 4  # 409 and 422: name_conflict, dependency_conflict, instance_exists, idempotency_key_reused…
UNAVAILABLE = 5  # 503 backend_unavailable, 429 event_queue_full, the gateway unreachable: retry later
UNAUTHENTICATED = 6  # 401
FORBIDDEN = 7  # 403
INVALID = 8  # 400, 413, 428: the request itself was refused before side effects

BY_STATUS = {
    400: INVALID,
    401: UNAUTHENTICATED,
    403: FORBIDDEN,
    404: NOT_FOUND,
    409: CONFLICT,
    413: INVALID,
    422: CONFLICT,
    428: INVALID,
    429: UNAVAILABLE,
    503: UNAVAILABLE,
}


class CliError(Exception):
    """What a command could not do; `problem` is the gateway's Problem when there was one."""

    def __init__(self, message: str, code: int = FAILED, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.problem = problem

    def line(self) -> str:
        """One readable line: `<code>: <detail>` for a Problem, the message otherwise."""
        if not self.problem:
            return str(self)
        code = self.problem.get("code") or "error"
        detail = self.problem.get("detail") or self.problem.get("title") or ""
        errors = "; ".join(f"{e.get('path')}: {e.get('message')}" for e in self.problem.get("errors") or [])
        return f"{self}: {code}: {detail}" + (f" ({errors})" if errors else "")

    def as_json(self) -> dict[str, Any]:
        return {"error": str(self), "exitCode": self.code, "problem": self.problem}


def from_problem(what: str, status: int, problem: dict[str, Any] | None) -> CliError:
    return CliError(what, BY_STATUS.get(status, FAILED), problem)
