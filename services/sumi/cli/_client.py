"""The Host API v2 (host-api.md) as the CLI uses it: one client, retries that are safe,
Problems turned into CliErrors with their exit code, Operations waited on."""

import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from sumi.cli._errors import FAILED, UNAVAILABLE, CliError, from_problem

OPERATION_TIMEOUT = 300.0
TERMINAL = ("succeeded", "failed")


class Host:
    def __init__(self, url: str, token: str, space: str | None = None) -> None:
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=90, headers={"Authorization": f"Bearer {token}"})
        self.space = space or ""

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def close(self) -> None:
        self.client.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """One request; a write is retried only with its Idempotency-Key, so a retry is never a second write."""
        headers = {"Idempotency-Key": key} if key else {}
        retry = key is not None or method == "GET"
        for attempt in range(4):
            try:
                response = self.client.request(method, path, json=body, params=params, headers=headers)
            except httpx.HTTPError as exc:
                if attempt == 3 or not retry:
                    raise CliError(f"cannot reach the Host at {self.client.base_url}: {exc}", UNAVAILABLE) from exc
                time.sleep(0.5 * (attempt + 1))
                continue
            if response.status_code == 503 and retry and attempt < 3:
                time.sleep(0.5 * (attempt + 1))
                continue
            return response
        return response

    def expect(self, response: httpx.Response, what: str, *statuses: int) -> Any:
        if response.status_code in statuses:
            return response.json() if response.content else None
        try:
            problem = response.json()
        except ValueError:
            problem = {"status": response.status_code, "detail": response.text[:500]}
        raise from_problem(what, response.status_code, problem if isinstance(problem, dict) else None)

    def ask(self, method: str, path: str, what: str, *statuses: int, **kw: Any) -> Any:
        return self.expect(self.call(method, path, **kw), what, *statuses)

    def write(self, method: str, path: str, body: Any, what: str, *statuses: int, key: str | None = None) -> Any:
        return self.expect(self.call(method, path, body, key=key or str(uuid.uuid4())), what, *statuses)

    # ---- Resources ------------------------------------------------------------------------

    def base(self, space: str | None = None) -> str:
        return f"/v2/spaces/{quote(space or self.space, safe='')}"

    def pages(self, path: str, what: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every item of a paged list (`items`, `nextCursor`), 100 a page."""
        items: list[dict[str, Any]] = []
        params = {"limit": 100, **params}
        while True:
            page = self.ask("GET", path, what, 200, params=params)
            items += page["items"]
            if not page.get("nextCursor"):
                return items
            params["cursor"] = page["nextCursor"]

    def resources(self, form: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        params = {**({"form": form} if form else {}), **({"name": name} if name else {})}
        return self.pages(f"{self.base()}/resources", f"listing the Space {self.space}", params)

    def one(self, form: str | None, name: str) -> dict[str, Any] | None:
        found = [r for r in self.resources(form, name) if r["name"] == name]
        return found[0] if found else None

    def resource(self, ref: str) -> dict[str, Any]:
        """A Resource by UID or by name (a UID always holds an underscore, a name never does)."""
        if "_" in ref:
            return dict(self.ask("GET", f"{self.base()}/resources/{ref}", f"reading {ref}", 200))
        found = self.one(None, ref)
        if found is None:
            raise from_problem(
                f"reading {ref}", 404, {"code": "not_found", "detail": f"no Resource {ref!r} in the Space {self.space}"}
            )
        return found

    def create(self, name: str, form: str, spec: dict[str, Any], what: str, key: str | None = None) -> dict[str, Any]:
        body = {"name": name, "form": form, "spec": spec}
        return self.wait(self.write("POST", f"{self.base()}/resources", body, f"creating {what}", 202, key=key), what)

    def update(self, uid: str, spec: dict[str, Any], what: str, key: str | None = None) -> dict[str, Any]:
        op = self.write("PUT", f"{self.base()}/resources/{uid}", {"spec": spec}, f"updating {what}", 202, key=key)
        return self.wait(op, f"updating {what}")

    def delete(self, uid: str, what: str, key: str | None = None) -> dict[str, Any]:
        op = self.write("DELETE", f"{self.base()}/resources/{uid}", None, f"deleting {what}", 202, key=key)
        return self.wait(op, f"deleting {what}")

    def wait(self, operation: dict[str, Any], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + OPERATION_TIMEOUT
        while operation["state"] not in TERMINAL:
            if time.monotonic() > deadline:
                raise CliError(f"{what}: Operation {operation['id']} is still {operation['state']}", UNAVAILABLE)
            operation = self.ask(
                "GET", f"/v2/operations/{operation['id']}", f"{what} (waiting)", 200, params={"wait": 60}
            )
        if operation["state"] == "failed":
            # Accepted, then failed: exit 1 whatever the Problem, so a script tells it from a refusal.
            raise CliError(f"{what} failed (Operation {operation['id']})", FAILED, operation.get("error"))
        return operation
