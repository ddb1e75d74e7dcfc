"""`sumi deploy DIR --worker NAME --space S`: upload a directory as a new WorkerVersion and
move the worker's Deployment to 100 % on it.

Steps, each through the Host API v2 (host-api.md) with its own Idempotency-Key:
1. read every `.js`/`.mjs`/`.py` file under DIR (relative names) and the optional
   `DIR/sumi.json` (`mainModule`, `vars`, `handlers`, `queueBindings`, `workflowBindings`;
   a binding may name its queue or workflow by Resource name);
2. create the ModuleWorker NAME when it does not exist (runtime from the file
   extensions; handlers from sumi.json, else `["queue"]` when the main module mentions
   `queue`, else `[]`);
3. create the WorkerVersion `NAME-v<N>` (N: the next free number) and wait until the
   Host has verified it;
4. create (`NAME-deployment`) or PUT the worker's Deployment to `[{version, 100}]`, wait;
5. print the Version's UID on stdout (progress goes to stderr).

Exit 0 on success, 1 when the Host refuses or an Operation fails (the Problem's
detail and errors are printed), 2 on a usage error.
"""

import argparse
import json
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from sumi.control.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)

EXTENSIONS = {".js": "javascript", ".mjs": "javascript", ".py": "python"}
SKIP_DIRS = {"node_modules", "__pycache__"}
CONFIG_KEYS = {"mainModule", "vars", "handlers", "queueBindings", "workflowBindings"}
DEFAULT_MAINS = {
    "javascript": ("worker.js", "worker.mjs", "index.js", "index.mjs"),
    "python": ("worker.py", "main.py"),
}
OPERATION_TIMEOUT = 300.0


class DeployError(Exception):
    def __init__(self, message: str, problem: dict[str, Any] | None = None, code: int = 1) -> None:
        super().__init__(message)
        self.problem = problem
        self.code = code

    def render(self) -> str:
        lines = [f"sumi deploy: {self}"]
        if self.problem:
            detail = self.problem.get("detail")
            code = self.problem.get("code")
            if detail or code:
                lines.append(f"  {code or 'error'}: {detail or self.problem.get('title', '')}")
            for err in self.problem.get("errors") or []:
                lines.append(f"    {err.get('path')}: {err.get('message')}")
        return "\n".join(lines)


def _say(message: str) -> None:
    print(f"sumi deploy: {message}", file=sys.stderr, flush=True)


# ---- the directory ------------------------------------------------------------------------


def read_modules(directory: Path) -> list[dict[str, str]]:
    modules = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") or part in SKIP_DIRS for part in rel.parts[:-1]):
            continue
        if path.is_file() and path.suffix in EXTENSIONS and not rel.name.startswith("."):
            try:
                content = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise DeployError(f"{rel.as_posix()} is not UTF-8 text: {exc}", code=2) from exc
            modules.append({"name": rel.as_posix(), "content": content})
    return modules


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "sumi.json"
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DeployError(f"{path} is not valid JSON: {exc}", code=2) from exc
    if not isinstance(config, dict):
        raise DeployError(f"{path} must hold a JSON object", code=2)
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise DeployError(
            f"{path}: unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(CONFIG_KEYS))})",
            code=2,
        )
    return config


def runtime_of(modules: list[dict[str, str]]) -> str:
    runtimes = {EXTENSIONS[Path(m["name"]).suffix] for m in modules}
    if len(runtimes) != 1:
        raise DeployError("the directory mixes JavaScript and Python modules; a worker has one runtime", code=2)
    return runtimes.pop()


def main_module(modules: list[dict[str, str]], runtime: str, explicit: str | None) -> str:
    names = [m["name"] for m in modules]
    if explicit:
        if explicit not in names:
            raise DeployError(f"the main module {explicit} is not among the modules: {', '.join(names)}", code=2)
        return explicit
    if len(names) == 1:
        return names[0]
    for candidate in DEFAULT_MAINS[runtime]:
        if candidate in names:
            return candidate
    raise DeployError(
        f"cannot tell the main module among {', '.join(names)}; name it with --main or sumi.json's mainModule",
        code=2,
    )


# ---- the Host API ---------------------------------------------------------------------------


class Api:
    def __init__(self, url: str, token: str, space: str) -> None:
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=90, headers={"Authorization": f"Bearer {token}"})
        self.space = space

    def close(self) -> None:
        self.client.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        write: bool = False,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        headers = {"Idempotency-Key": str(uuid.uuid4())} if write else {}
        for attempt in range(4):
            try:
                response = self.client.request(method, path, json=body, params=params, headers=headers)
            except httpx.HTTPError as exc:
                if attempt == 3 or not write:
                    raise DeployError(f"cannot reach the Host at {self.client.base_url}: {exc}") from exc
                time.sleep(0.5 * (attempt + 1))
                continue  # same Idempotency-Key: the same Operation, never a second one
            if response.status_code == 503 and attempt < 3:
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
            problem = {"detail": response.text[:500]}
        raise DeployError(
            f"{what} was refused ({response.status_code})",
            problem if isinstance(problem, dict) else None,
        )

    def resources(self, form: str, name: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"form": form, "limit": 100}
        if name:
            params["name"] = name
        while True:
            page = self.expect(
                self.call("GET", f"/v2/spaces/{self.space}/resources", params=params),
                f"listing the Space {self.space}",
                200,
            )
            items += page["items"]
            if not page.get("nextCursor"):
                return items
            params["cursor"] = page["nextCursor"]

    def one(self, form: str, name: str) -> dict[str, Any] | None:
        found = [r for r in self.resources(form, name) if r["name"] == name]
        return found[0] if found else None

    def create(self, name: str, form: str, spec: dict[str, Any], what: str) -> dict[str, Any]:
        response = self.call(
            "POST",
            f"/v2/spaces/{self.space}/resources",
            {"name": name, "form": form, "spec": spec},
            write=True,
        )
        return self.wait(self.expect(response, f"creating {what}", 202), f"creating {what}")

    def update(self, uid: str, spec: dict[str, Any], what: str) -> dict[str, Any]:
        response = self.call("PUT", f"/v2/spaces/{self.space}/resources/{uid}", {"spec": spec}, write=True)
        return self.wait(self.expect(response, f"updating {what}", 202), f"updating {what}")

    def wait(self, operation: dict[str, Any], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + OPERATION_TIMEOUT
        while operation["state"] not in ("succeeded", "failed"):
            if time.monotonic() > deadline:
                raise DeployError(
                    f"{what}: Operation {operation['id']} is still {operation['state']} after {OPERATION_TIMEOUT:.0f}s"
                )
            operation = self.expect(
                self.call("GET", f"/v2/operations/{operation['id']}", params={"wait": 60}),
                f"{what} (waiting)",
                200,
            )
        if operation["state"] == "failed":
            raise DeployError(f"{what} failed (Operation {operation['id']})", operation.get("error"))
        return operation


def resolve_bindings(api: Api, config: dict[str, Any]) -> dict[str, Any]:
    """queueBindings / workflowBindings whose target may be a Resource name or UID."""
    out: dict[str, Any] = {}
    for key, target, form in (
        ("queueBindings", "queue", QUEUE),
        ("workflowBindings", "resource", DURABLE_WORKFLOW),
    ):
        if key not in config:
            continue
        if not isinstance(config[key], list):
            raise DeployError(f"sumi.json: {key} must be an array", code=2)
        resolved = []
        for i, binding in enumerate(config[key]):
            if not isinstance(binding, dict):
                raise DeployError(f"sumi.json: {key}[{i}] must be an object", code=2)
            ref = binding.get(target)
            if isinstance(ref, str):
                if "_" in ref:  # a UID always holds an underscore, a name never does
                    ref = {"resourceUid": ref}
                else:
                    found = api.one(form, ref)
                    if found is None:
                        raise DeployError(
                            f"sumi.json: {key}[{i}] names {target} {ref!r}, which is not in the Space {api.space}"
                        )
                    ref = {"resourceUid": found["uid"]}
            resolved.append({**binding, target: ref})
        out[key] = resolved
    return out


def next_version_number(api: Api, worker: str) -> int:
    pattern = re.compile(rf"^{re.escape(worker)}-v(\d+)$")
    numbers = [int(m.group(1)) for r in api.resources(WORKER_VERSION) if (m := pattern.match(r["name"]))]
    return max(numbers, default=0) + 1


# ---- the command ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> str:
    token = args.token  # --token, else SUMI_TOKEN (Settings.deploy_token, the option's default)
    if not token:
        raise DeployError("no token: pass --token or set SUMI_TOKEN", code=2)
    directory = Path(args.directory)
    if not directory.is_dir():
        raise DeployError(f"{directory} is not a directory", code=2)
    config = read_config(directory)
    modules = read_modules(directory)
    if not modules:
        raise DeployError(f"{directory} holds no .js, .mjs or .py file", code=2)
    runtime = runtime_of(modules)
    main = main_module(modules, runtime, getattr(args, "main", None) or config.get("mainModule"))
    if "handlers" in config:
        handlers = config["handlers"]
    else:
        source = next(m["content"] for m in modules if m["name"] == main)
        handlers = ["queue"] if "queue" in source else []

    api = Api(args.url, token, args.space)
    try:
        bindings = resolve_bindings(api, config)
        worker = api.one(MODULE_WORKER, args.worker)
        if worker is None:
            _say(f"creating the {runtime} worker {args.worker} (handlers {handlers})")
            api.create(
                args.worker,
                MODULE_WORKER,
                {"runtime": runtime, "handlers": handlers},
                f"the worker {args.worker}",
            )
            worker = api.one(MODULE_WORKER, args.worker)
            if worker is None:
                raise DeployError(f"the worker {args.worker} was created but cannot be read back")
        elif worker["spec"].get("runtime") != runtime:
            raise DeployError(
                f"the worker {args.worker} runs {worker['spec'].get('runtime')}, "
                f"but {directory} holds {runtime} modules"
            )

        spec: dict[str, Any] = {
            "worker": {"resourceUid": worker["uid"]},
            "mainModule": main,
            "modules": modules,
        }
        if "vars" in config:
            spec["vars"] = config["vars"]
        spec.update(bindings)

        number = next_version_number(api, args.worker)
        for _ in range(5):
            name = f"{args.worker}-v{number}"
            _say(f"uploading {len(modules)} module(s) as {name} (main module {main}); verifying…")
            response = api.call(
                "POST",
                f"/v2/spaces/{args.space}/resources",
                {"name": name, "form": WORKER_VERSION, "spec": spec},
                write=True,
            )
            if response.status_code == 409 and _code(response) == "name_conflict":
                number += 1  # someone else deployed meanwhile
                continue
            operation = api.expect(response, f"creating the Version {name}", 202)
            api.wait(operation, f"verifying the Version {name}")
            break
        else:
            raise DeployError("could not find a free Version name")
        version = api.one(WORKER_VERSION, name)
        if version is None:
            raise DeployError(f"the Version {name} was created but cannot be read back")
        observed = version.get("observed") or {}
        _say(
            f"{name} verified: handlers {observed.get('handlers')}, workflow classes {observed.get('workflowClasses')}"
        )

        allocation = {
            "worker": {"resourceUid": worker["uid"]},
            "versions": [{"version": {"resourceUid": version["uid"]}, "percentage": 100}],
        }
        deployment = next(
            (
                d
                for d in api.resources(WORKER_DEPLOYMENT)
                if (d["spec"].get("worker") or {}).get("resourceUid") == worker["uid"]
            ),
            None,
        )
        if deployment is None:
            _say(f"creating the Deployment {args.worker}-deployment: 100% on {name}")
            api.create(
                f"{args.worker}-deployment",
                WORKER_DEPLOYMENT,
                allocation,
                f"the Deployment {args.worker}-deployment",
            )
        else:
            _say(f"moving the Deployment {deployment['name']} to 100% on {name}")
            api.update(deployment["uid"], allocation, f"the Deployment {deployment['name']}")
        return str(version["uid"])
    finally:
        api.close()


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def deploy(args: argparse.Namespace) -> int:
    try:
        uid = run(args)
    except DeployError as exc:
        print(exc.render(), file=sys.stderr, flush=True)
        return exc.code
    print(uid, flush=True)
    return 0
