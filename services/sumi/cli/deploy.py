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

Exit 0 on success, 1 when an Operation fails or a binding names nothing, 2 on a usage error,
and the CLI's codes (sumi.cli._errors) for a refusal (the Problem's code and detail are printed).
"""

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from sumi.cli._client import Host as Api
from sumi.cli._errors import CliError
from sumi.control.rules.forms.names import (
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
                raise CliError(f"{rel.as_posix()} is not UTF-8 text: {exc}", code=2) from exc
            modules.append({"name": rel.as_posix(), "content": content})
    return modules


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "sumi.json"
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(f"{path} is not valid JSON: {exc}", code=2) from exc
    if not isinstance(config, dict):
        raise CliError(f"{path} must hold a JSON object", code=2)
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise CliError(
            f"{path}: unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(CONFIG_KEYS))})",
            code=2,
        )
    return config


def runtime_of(modules: list[dict[str, str]]) -> str:
    runtimes = {EXTENSIONS[Path(m["name"]).suffix] for m in modules}
    if len(runtimes) != 1:
        raise CliError("the directory mixes JavaScript and Python modules; a worker has one runtime", code=2)
    return runtimes.pop()


def main_module(modules: list[dict[str, str]], runtime: str, explicit: str | None) -> str:
    names = [m["name"] for m in modules]
    if explicit:
        if explicit not in names:
            raise CliError(f"the main module {explicit} is not among the modules: {', '.join(names)}", code=2)
        return explicit
    if len(names) == 1:
        return names[0]
    for candidate in DEFAULT_MAINS[runtime]:
        if candidate in names:
            return candidate
    raise CliError(
        f"cannot tell the main module among {', '.join(names)}; name it with --main or sumi.json's mainModule",
        code=2,
    )


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
            raise CliError(f"sumi.json: {key} must be an array", code=2)
        resolved = []
        for i, binding in enumerate(config[key]):
            if not isinstance(binding, dict):
                raise CliError(f"sumi.json: {key}[{i}] must be an object", code=2)
            ref = binding.get(target)
            if isinstance(ref, str):
                if "_" in ref:  # a UID always holds an underscore, a name never does
                    ref = {"resourceUid": ref}
                else:
                    found = api.one(form, ref)
                    if found is None:
                        raise CliError(
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


def run(directory: Path, worker_name: str, api: Api, main: str | None = None) -> str:
    """Deploy DIRECTORY as the next Version of WORKER_NAME; the Version's UID."""
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory", code=2)
    config = read_config(directory)
    modules = read_modules(directory)
    if not modules:
        raise CliError(f"{directory} holds no .js, .mjs or .py file", code=2)
    runtime = runtime_of(modules)
    main = main_module(modules, runtime, main or config.get("mainModule"))
    handlers = config["handlers"] if "handlers" in config else default_handlers(modules, main)
    bindings = resolve_bindings(api, config)
    worker = ensure_worker(api, worker_name, runtime, handlers, directory)
    spec: dict[str, Any] = {"worker": {"resourceUid": worker["uid"]}, "mainModule": main, "modules": modules}
    if "vars" in config:
        spec["vars"] = config["vars"]
    spec.update(bindings)
    version = create_version(api, worker_name, spec, len(modules))
    move_deployment(api, worker, version)
    return str(version["uid"])


def default_handlers(modules: list[dict[str, str]], main: str) -> list[str]:
    source = next(m["content"] for m in modules if m["name"] == main)
    return ["queue"] if "queue" in source else []


def ensure_worker(api: Api, name: str, runtime: str, handlers: list[str], directory: Path) -> dict[str, Any]:
    worker = api.one(MODULE_WORKER, name)
    if worker is None:
        _say(f"creating the {runtime} worker {name} (handlers {handlers})")
        api.create(name, MODULE_WORKER, {"runtime": runtime, "handlers": handlers}, f"the worker {name}")
        worker = api.one(MODULE_WORKER, name)
        if worker is None:
            raise CliError(f"the worker {name} was created but cannot be read back")
    elif worker["spec"].get("runtime") != runtime:
        raise CliError(
            f"the worker {name} runs {worker['spec'].get('runtime')}, but {directory} holds {runtime} modules"
        )
    return worker


def create_version(api: Api, worker: str, spec: dict[str, Any], count: int) -> dict[str, Any]:
    number = next_version_number(api, worker)
    for _ in range(5):
        name = f"{worker}-v{number}"
        _say(f"uploading {count} module(s) as {name} (main module {spec['mainModule']}); verifying…")
        body = {"name": name, "form": WORKER_VERSION, "spec": spec}
        response = api.call("POST", f"{api.base()}/resources", body, key=str(uuid.uuid4()))
        if response.status_code == 409 and _code(response) == "name_conflict":
            number += 1  # someone else deployed meanwhile
            continue
        api.wait(api.expect(response, f"creating the Version {name}", 202), f"verifying the Version {name}")
        break
    else:
        raise CliError("could not find a free Version name")
    version = api.one(WORKER_VERSION, name)
    if version is None:
        raise CliError(f"the Version {name} was created but cannot be read back")
    observed = version.get("observed") or {}
    _say(f"{name} verified: handlers {observed.get('handlers')}, workflow classes {observed.get('workflowClasses')}")
    return version


def deployment_of(api: Api, worker_uid: str) -> dict[str, Any] | None:
    return next(
        (
            d
            for d in api.resources(WORKER_DEPLOYMENT)
            if (d["spec"].get("worker") or {}).get("resourceUid") == worker_uid
        ),
        None,
    )


def move_deployment(api: Api, worker: dict[str, Any], version: dict[str, Any]) -> None:
    allocation = {
        "worker": {"resourceUid": worker["uid"]},
        "versions": [{"version": {"resourceUid": version["uid"]}, "percentage": 100}],
    }
    deployment = deployment_of(api, worker["uid"])
    if deployment is None:
        name = f"{worker['name']}-deployment"
        _say(f"creating the Deployment {name}: 100% on {version['name']}")
        api.create(name, WORKER_DEPLOYMENT, allocation, f"the Deployment {name}")
    else:
        _say(f"moving the Deployment {deployment['name']} to 100% on {version['name']}")
        api.update(deployment["uid"], allocation, f"the Deployment {deployment['name']}")


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None
