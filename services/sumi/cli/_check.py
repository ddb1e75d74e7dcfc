"""`sumi deploy DIR --worker W --check`: would the new code replay every live instance?

For each live instance of the worker's workflows, its history is read over HTTP, folded into
what the engine hands a context (the completed steps, the unfinished names and their kinds),
and the new modules run once in a runtime context started here, in the CLI's process, with
the launcher the engine uses. The completed steps replay without their effects; the first
call that would reach the Host (a new step, a sleep, a wait, a binding) is refused and the
run stops there, so nothing is committed and no effect runs. An instance fails the check when
that run ends `errored` before it (`step_definition_mismatch`, WF-35, or `run_threw`)."""

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sumi.cli import deploy as _deploy
from sumi.cli._client import Host as Api
from sumi.cli._errors import CliError
from sumi.control.rules.forms.names import DURABLE_WORKFLOW
from sumi.runtime import EnvSpec, HostError, Module, StepRecord, WorkflowInvocation
from sumi.runtime.types import Runtime

LIVE = ("queued", "running", "sleeping", "waiting")
SCHEDULED_KINDS = {"SleepScheduled": "sleep", "WaitScheduled": "wait", "RetryScheduled": "do"}
CHECK_TIMEOUT = 60.0


@dataclass(frozen=True)
class Finding:
    workflow: str
    instance: str
    outcome: str  # "replays" | "step_definition_mismatch" | "run_threw" | …
    message: str = ""

    @property
    def fails(self) -> bool:
        return self.outcome != "replays"


def invocation(class_name: str, instance_id: str, history: list[dict[str, Any]]) -> WorkflowInvocation:
    """What the engine's fold (sumi.workflow.rules._state) hands a context, from the history's records."""
    params: Any = None
    completed: dict[str, StepRecord] = {}
    pending: dict[str, str] = {}
    for item in history:
        data = item.get("data") or {}
        if item["type"] == "InstanceCreated":
            params = data.get("params")
        elif item["type"] in SCHEDULED_KINDS:
            pending[data["name"]] = SCHEDULED_KINDS[item["type"]]
        elif item["type"] == "StepAttemptCommitted" and not data.get("final"):
            pending[data["name"]] = data["kind"]
        elif item["type"] == "StepAttemptCommitted":
            pending.pop(data["name"], None)
            completed[data["name"]] = StepRecord(
                data["name"],
                data["kind"],
                data["ok"],
                data.get("result"),
                data.get("errorName"),
                data.get("errorMessage"),
            )
    return WorkflowInvocation(class_name, instance_id, params, completed, pending)


async def replay_one(rt: Runtime, modules: list[Module], main: str, env: EnvSpec, inv: WorkflowInvocation) -> Finding:
    """Run INV's replay in a fresh context; stopped at the first call that would reach the Host."""
    reached = asyncio.get_running_loop().create_future()

    async def refuse(context_id: str, method: str, args: dict[str, Any]) -> Any:
        if not reached.done():
            reached.set_result(method)
        raise HostError("fenced", "the pre-deploy check commits nothing")

    ctx = await rt.start_context(modules, main, host_call=refuse)
    run = asyncio.ensure_future(ctx.invoke_workflow(inv, env, refuse))
    try:
        await asyncio.wait([run, reached], timeout=CHECK_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        outcome = run.result() if run.done() else None
        if outcome is not None and outcome.kind in ("errored", "stopped"):
            return Finding("", inv.instance_id, outcome.reason or outcome.kind, outcome.message or "")
        if outcome is None and not reached.done():
            return Finding("", inv.instance_id, "timeout", f"no outcome within {CHECK_TIMEOUT:.0f}s")
        return Finding("", inv.instance_id, "replays")
    finally:
        await ctx.stop()
        run.cancel()


def check(directory: Path, worker_name: str, api: Api, main: str | None = None) -> list[Finding]:
    """One Finding per live instance of WORKER_NAME's workflows, the new code in DIRECTORY replaying it."""
    config = _deploy.read_config(directory)
    modules = _deploy.read_modules(directory)
    if not modules:
        raise CliError(f"{directory} holds no .js, .mjs or .py file", code=2)
    runtime = _deploy.runtime_of(modules)
    main = _deploy.main_module(modules, runtime, main or config.get("mainModule"))
    worker = api.one(None, worker_name)
    if worker is None:
        return []  # a new worker has no instances to break
    lives = [
        (wf, inst)
        for wf in api.resources(DURABLE_WORKFLOW)
        if (wf["spec"].get("worker") or {}).get("resourceUid") == worker["uid"]
        for inst in _live(api, wf["uid"])
    ]
    env = EnvSpec(
        config.get("vars") or {}, list(config.get("queueBindings") or {}), list(config.get("workflowBindings") or {})
    )
    code = [Module(m["name"], m["content"]) for m in modules]
    histories = [(wf, i, _history(api, wf["uid"], i["id"])) for wf, i in lives]
    return asyncio.run(_replay_all(runtime, code, main, env, histories))


async def _replay_all(
    runtime: str,
    code: list[Module],
    main: str,
    env: EnvSpec,
    histories: list[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]],
) -> list[Finding]:
    if not histories:
        return []
    from sumi.core.config import Settings
    from sumi.engines.runtimes import start_runtime

    rt = await start_runtime(runtime, Settings.from_env())  # the walls this machine's engines use
    try:
        out = []
        for wf, inst, history in histories:
            found = await replay_one(rt, code, main, env, invocation(wf["spec"]["className"], inst["id"], history))
            out.append(Finding(wf["name"], found.instance, found.outcome, found.message))
        return out
    finally:
        await rt.close()


def _live(api: Api, workflow_uid: str) -> list[dict[str, Any]]:
    path = f"{api.base()}/workflows/{quote(workflow_uid, safe='')}/instances"
    return [i for status in LIVE for i in api.pages(path, "listing instances", {"status": status})]


def _history(api: Api, workflow_uid: str, instance_id: str) -> list[dict[str, Any]]:
    path = f"{api.base()}/workflows/{quote(workflow_uid, safe='')}/instances/{quote(instance_id, safe='')}/history"
    return list(api.ask("GET", path, "reading the history", 200)["items"])
