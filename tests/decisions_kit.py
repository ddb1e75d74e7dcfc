"""Driving the control processor's pure decisions in unit tests, as the runner does."""

import itertools
import json
from typing import Any

from sumi.control import ControlState, decide, evolve
from sumi.control.rules.forms.names import MODULE_WORKER, WORKER_DEPLOYMENT, WORKER_VERSION
from sumi.core import records as r

NOW = 1_700_000_000_000
_ids = itertools.count()
GOOD_JS = "export default { async queue(batch, env, ctx) {} };\n"
LOG: list[Any] = []  # every record `run` decided since a test last cleared it, in order


def command(
    kind: str,
    payload: dict[str, Any],
    *,
    space: str = "demo",
    cid: str | None = None,
    key: str | None = None,
    fp: str | None = None,
    principal: str = "alice",
) -> r.CommandSubmitted:
    return r.CommandSubmitted(cid or f"c{next(_ids)}", kind, space, principal, False, json.dumps(payload), NOW, key, fp)


def run(
    state: ControlState, cmd: r.CommandSubmitted, followups: bool = True, log: list[Any] | None = None
) -> list[Any]:
    """Decide, fold, and carry out follow-ups; returns every record decided."""
    out: list[Any] = []
    todo = [cmd]
    while todo:
        d = decide(state, todo.pop(0), NOW)
        for e in d.events:
            evolve(state, e)
        out += d.events
        LOG.extend(d.events)
        if log is not None:
            log.extend(d.events)
        if followups:
            todo += d.followups
    return out


def reply(events: list[Any]) -> r.CommandDecided:
    return next(e for e in events if isinstance(e, r.CommandDecided))


def problem(events: list[Any]) -> dict[str, Any]:
    d = reply(events)
    assert not d.accepted, d
    return json.loads(d.problem or "{}")  # type: ignore[no-any-return]


# ---- a Space with workers, Versions and Deployments ---------------------------------------------


def cmd(kind: str, payload: dict[str, Any], cid: str | None = None) -> r.CommandSubmitted:
    return command(kind, payload, cid=cid)


def code(events: list[Any]) -> str:
    return str(problem(events)["code"])


def paths(events: list[Any]) -> set[str]:
    return {e["path"] for e in problem(events).get("errors", [])}


def new_state() -> ControlState:
    s = ControlState()
    run(s, cmd("space.create", {"name": "demo"}))
    return s


def res(s: ControlState, ref: str) -> Any:
    return s.space("demo").by_ref(ref)


def op_state(s: ControlState, events: list[Any]) -> str:
    return s.space("demo").operations[str(reply(events).operationId)].state


def create(s: ControlState, name: str, form: str, spec: dict[str, Any], **kw: Any) -> list[Any]:
    return run(s, cmd("resource.create", {"name": name, "form": form, "spec": spec}), **kw)


def worker(s: ControlState, name: str = "w", runtime: str = "javascript", handlers: list[str] | None = None) -> str:
    events = create(
        s,
        name,
        MODULE_WORKER,
        {"runtime": runtime, "handlers": ["queue"] if handlers is None else handlers},
    )
    assert reply(events).accepted
    return str(res(s, name).uid)


def version_spec(worker_uid: str, **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "worker": {"resourceUid": worker_uid},
        "mainModule": "worker.js",
        "modules": [{"name": "worker.js", "content": GOOD_JS}],
    }
    spec.update(over)
    return spec


def version(s: ControlState, worker_uid: str, name: str = "v1", **over: Any) -> tuple[str, str]:
    """A Version whose create is accepted and still verifying: (uid, create operation id)."""
    events = create(s, name, WORKER_VERSION, version_spec(worker_uid, **over))
    assert reply(events).accepted, problem(events)
    return str(res(s, name).uid), str(reply(events).operationId)


def report(
    s: ControlState,
    op_id: str,
    ok: bool = True,
    handlers: tuple[str, ...] = ("queue",),
    classes: tuple[str, ...] = (),
    load_error: str | None = None,
) -> list[Any]:
    if load_error is not None:
        observed: dict[str, Any] = {"verified": True, "loadError": load_error}
    else:
        observed = {"verified": True, "handlers": list(handlers), "workflowClasses": list(classes)}
    payload: dict[str, Any] = {
        "operationId": op_id,
        "outcome": "succeeded" if ok else "failed",
        "observed": observed,
    }
    if not ok:
        payload["error"] = {"code": "invalid_spec", "status": 400, "detail": "does not load"}
    return run(s, cmd("operation.report", payload))


def verified(s: ControlState, worker_uid: str, name: str = "v1", **kw: Any) -> str:
    uid, op_id = version(s, worker_uid, name)
    report(s, op_id, **kw)
    assert res(s, uid).state == "active"
    return uid


def deployment_spec(worker_uid: str, *weights: tuple[str, int]) -> dict[str, Any]:
    return {
        "worker": {"resourceUid": worker_uid},
        "versions": [{"version": {"resourceUid": v}, "percentage": p} for v, p in weights],
    }


def deploy(s: ControlState, worker_uid: str, *weights: tuple[str, int], name: str = "d", **kw: Any) -> list[Any]:
    return create(s, name, WORKER_DEPLOYMENT, deployment_spec(worker_uid, *weights), **kw)


def put(s: ControlState, ref: str, spec: dict[str, Any]) -> list[Any]:
    return run(s, cmd("resource.update", {"ref": ref, "spec": spec}))


def delete(s: ControlState, ref: str) -> list[Any]:
    return run(s, cmd("resource.delete", {"ref": ref}))


def observed(s: ControlState, ref: str) -> dict[str, Any]:
    return dict(res(s, ref).observed)
