"""`sumi apply -f` and `sumi delete -f`: make the Space hold what the manifests say.

Idempotency-Keys come from the manifest, never from chance: a create's key is a hash of
(Space, kind, name, spec), an update's of (UID, generation, spec), a delete's of the UID.
A re-apply first reads what is there and changes nothing that already matches; a retry
after an unseen outcome sends the same key and gets the same Operation (host-api.md §2).
A create key whose Operation made a Resource that has since been deleted is chained
(hashed with that Operation's id), so applying again after a delete creates it again,
still deterministically."""

import hashlib
import json
from pathlib import Path
from typing import Any

from sumi.cli import deploy
from sumi.cli._client import Host
from sumi.cli._errors import CliError, from_problem
from sumi.cli._output import note
from sumi.cli._state import Globals
from sumi.cli.rules import _manifest
from sumi.cli.rules._manifest import Item
from sumi.control.rules.forms.names import WORKER_VERSION


def key(*parts: Any) -> str:
    return "apply-" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:48]


def apply_files(g: Globals, paths: list[Path]) -> list[dict[str, Any]]:
    target = g.target()
    out = []
    for item in _manifest.load(paths):
        with Host(target.url, target.need_token(), item.space or target.need_space()) as host:
            outcome = apply_worker(host, item) if item.source else apply_one(host, item)
        note(f"{item.kind}/{item.name} {outcome['outcome']}")
        out.append(outcome)
    return out


def _uid_of(host: Host) -> Any:
    def uid_of(name: str) -> str:
        found = host.one(None, name)
        if found is None:
            raise from_problem(
                "resolving a reference", 404, {"code": "not_found", "detail": f"no Resource {name!r} in {host.space}"}
            )
        return str(found["uid"])

    return uid_of


def apply_one(host: Host, item: Item) -> dict[str, Any]:
    spec = _manifest.resolve(item.spec, _uid_of(host))
    current = host.one(item.form, item.name)
    if current is not None and current["spec"] == spec:
        return _outcome(item, "unchanged", current["uid"])
    if current is not None:
        k = key("update", current["uid"], current["generation"], spec)
        op = host.update(current["uid"], spec, f"{item.kind} {item.name}", key=k)
        return _outcome(item, "updated", current["uid"], op)
    op = create(host, item, spec)
    return _outcome(item, "created", op["resourceUid"], op)


def create(host: Host, item: Item, spec: dict[str, Any]) -> dict[str, Any]:
    k = key("create", host.space, item.form, item.name, spec)
    for _ in range(100):
        op = host.create(item.name, item.form, spec, f"{item.kind} {item.name}", key=k)
        if _exists(host, op["resourceUid"]):
            return op
        k = key(k, op["id"])  # that key's Resource was deleted since: the next link of the chain
    raise CliError(f"{item.kind} {item.name}: too many earlier lives to replay")


def _exists(host: Host, uid: str) -> bool:
    response = host.call("GET", f"{host.base()}/resources/{uid}")
    if response.status_code == 404:
        return False
    host.expect(response, f"reading {uid}", 200)
    return True


def apply_worker(host: Host, item: Item) -> dict[str, Any]:
    """A worker with its code: the ModuleWorker, then a new Version and Deployment only if the code changed."""
    assert item.source is not None
    config = deploy.read_config(item.source)
    modules = deploy.read_modules(item.source)
    if not modules:
        raise CliError(f"{item.where}: {item.source} holds no .js, .mjs or .py file", 2)
    runtime = deploy.runtime_of(modules)
    main = deploy.main_module(modules, runtime, config.get("mainModule"))
    handlers = config["handlers"] if "handlers" in config else deploy.default_handlers(modules, main)
    worker_spec = {"runtime": runtime, "handlers": handlers, **item.spec}
    worker = apply_one(host, Item("worker", item.name, worker_spec, item.space, None, item.where))
    worker_uid = worker["uid"]
    version_spec: dict[str, Any] = {"worker": {"resourceUid": worker_uid}, "mainModule": main, "modules": modules}
    if "vars" in config:
        version_spec["vars"] = config["vars"]
    version_spec.update(deploy.resolve_bindings(host, config))
    if _deployed_spec(host, worker_uid) == version_spec:
        return worker
    version = deploy.create_version(host, item.name, version_spec, len(modules))
    deploy.move_deployment(host, {"uid": worker_uid, "name": item.name}, version)
    return _outcome(item, "deployed" if worker["outcome"] == "unchanged" else worker["outcome"], worker_uid)


def _deployed_spec(host: Host, worker_uid: str) -> dict[str, Any] | None:
    deployment = deploy.deployment_of(host, worker_uid)
    versions = (deployment or {}).get("spec", {}).get("versions") or []
    if len(versions) != 1:
        return None
    uid = versions[0]["version"]["resourceUid"]
    return dict(host.ask("GET", f"{host.base()}/resources/{uid}", "reading the deployed Version", 200)["spec"])


def delete_files(g: Globals, paths: list[Path]) -> list[dict[str, Any]]:
    target = g.target()
    out = []
    for item in reversed(_manifest.load(paths)):
        with Host(target.url, target.need_token(), item.space or target.need_space()) as host:
            current = host.one(item.form, item.name)
            if current is None:
                out.append(_outcome(item, "absent", None))
                continue
            if item.source:
                _delete_code(host, current["uid"])
            op = host.delete(current["uid"], f"{item.kind} {item.name}", key=key("delete", current["uid"]))
        note(f"{item.kind}/{item.name} deleted")
        out.append(_outcome(item, "deleted", current["uid"], op))
    return out


def _delete_code(host: Host, worker_uid: str) -> None:
    """A worker's Deployment, then its Versions: what blocks the worker's own delete."""
    deployment = deploy.deployment_of(host, worker_uid)
    if deployment is not None:
        host.delete(deployment["uid"], deployment["name"], key=key("delete", deployment["uid"]))
    for version in host.resources(WORKER_VERSION):
        if (version["spec"].get("worker") or {}).get("resourceUid") == worker_uid:
            host.delete(version["uid"], version["name"], key=key("delete", version["uid"]))


def _outcome(item: Item, outcome: str, uid: str | None, op: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "name": item.name,
        "outcome": outcome,
        "uid": uid,
        "operation": f"{op['id']} {op['state']}" if op else None,
    }


__all__ = ["apply_files", "delete_files", "key"]
