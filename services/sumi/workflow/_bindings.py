"""Caller Bindings inside workflow runs: `env.NAME.create/get`, `status()`, `sendEvent()`,
`terminate()` (WF-18..27).

A call to an instance of a partition this replica owns is decided here on its own fold: the
same decision a command would get, committed before it is answered; its `CommandDecided` is
written too, for the audit. A call to another replica's instance goes through the log
(`_remote`) and is answered from its owner's decision, the same way. Rejections are Host
Errors named by the WF codes. A binding names a DurableWorkflow of the calling Version's
`workflowBindings`; any other name is `invalid_request`.
"""

import asyncio
import logging
from typing import Any, Protocol

from sumi.control.rules.state import VersionView
from sumi.core import ids
from sumi.core import records as r
from sumi.core.problems import Problem
from sumi.runtime import HostError
from sumi.wire.topics import instance_key
from sumi.workflow import commands as c
from sumi.workflow._documents import is_name
from sumi.workflow._remote import Remote, answer_of
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._control import WorkflowControl
from sumi.workflow.rules._decide import status_of
from sumi.workflow.rules._state import Instance

__all__ = ["Bindings", "binding_target", "create_command", "event_command"]

log = logging.getLogger("sumi.workflow")


class Decider(Protocol):
    """What a binding call needs of the engine: its fold and tables, and the decisions a
    command gets (so this module never imports the engine)."""

    instances: dict[str, Instance]
    control: WorkflowControl

    def now(self) -> int: ...

    def owns(self, key: str) -> bool: ...

    def decide(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller, now: int) -> d.Decision: ...

    def apply(self, key: str, decision: d.Decision) -> "asyncio.Future[None]": ...

    def terminate(self, key: str, cmd: c.TerminateInstance, caller: d.Caller) -> "asyncio.Future[r.CommandDecided]": ...


class Bindings:
    def __init__(self, engine: Decider, remote: Remote, everywhere: bool = False) -> None:
        self.engine = engine
        self.remote = remote
        self.everywhere = everywhere  # every call through the log (a test setting)

    def _local(self, key: str) -> bool:
        return not self.everywhere and self.engine.owns(key)

    async def call(self, code: VersionView | None, method: str, args: dict[str, Any]) -> Any:
        uid = binding_target(code, args)
        wf = self.engine.control.workflow(uid)
        if code is None or wf is None:
            raise HostError("backend_unavailable", "the bound Workflow is not available")
        caller = d.Caller(ids.new_ulid(), wf.space, f"worker:{code.uid}", method)
        try:
            return await self._call(wf.uid, caller, method, args)
        except Problem as problem:
            raise HostError(problem.code, problem.detail) from None
        except Exception:
            # A Host fault, not an outage: the caller may only retry, so whoever reads the log must see it.
            log.exception("workflow binding %s on instance %s/%s failed", method, wf.uid, args.get("id"))
            raise HostError("backend_unavailable", f"{method} failed in the Host (logged)") from None

    async def _call(self, uid: str, caller: d.Caller, method: str, args: dict[str, Any]) -> Any:
        if method == "workflow.create":
            create = create_command(uid, args)
            key = c.key_of(create)
            if self._local(key):
                await self._decided(key, create, caller)
            else:
                answer_of(await self.remote.decided(key, create, caller))
            return {"id": create.instance_id}
        iid = args.get("id")
        key = instance_key(uid, str(iid))
        if not self._local(key):
            return await self._through_log(uid, iid, key, caller, method, args)
        inst = self.engine.instances.get(key)
        if inst is None or inst.purged:
            raise Problem("unknown_instance", f"no instance {iid}")  # WF-20
        if method == "workflow.get":
            return {"id": inst.instance_id}
        if method == "workflow.status":
            return status_of(inst)
        if method == "workflow.sendEvent":
            return await self._decided(key, event_command(uid, args), caller)
        if method == "workflow.terminate":
            # The engine's own terminate, as for a command: the target's run stopped first (WF-26).
            # Shielded: should this caller's context stop meanwhile, the decision still lands.
            answer = await asyncio.shield(
                self.engine.terminate(key, c.TerminateInstance(uid, inst.instance_id), caller)
            )
            return {"status": answer_of(answer)["status"]}
        raise Problem("invalid_request", f"unknown binding method {method}")

    async def _through_log(
        self, uid: str, iid: Any, key: str, caller: d.Caller, method: str, args: dict[str, Any]
    ) -> Any:
        """The same answers as above, decided by the instance's owner."""
        if method == "workflow.sendEvent":
            return answer_of(await self.remote.decided(key, event_command(uid, args), caller))
        if not isinstance(iid, str) or not is_name(iid):
            raise Problem("unknown_instance", f"no instance {iid}")  # WF-20: no such ID can exist
        if method in ("workflow.get", "workflow.status"):
            status = await self.remote.status(key, uid, iid, caller)
            return {"id": iid} if method == "workflow.get" else status
        if method == "workflow.terminate":
            answer = await self.remote.decided(key, c.TerminateInstance(uid, iid), caller)
            return {"status": answer_of(answer)["status"]}
        raise Problem("invalid_request", f"unknown binding method {method}")

    async def _decided(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller) -> Any:
        decision = self.engine.decide(key, cmd, caller, self.engine.now())
        answer = next(x for x in decision.records if isinstance(x, r.CommandDecided))
        await self.engine.apply(key, decision)
        return answer_of(answer)


def binding_target(code: VersionView | None, args: dict[str, Any]) -> str:
    """The DurableWorkflow UID a binding names (the calling Version's `workflowBindings`)."""
    uid = code.workflow_bindings.get(str(args.get("binding"))) if code else None
    if uid is None:
        raise HostError("backend_unavailable", "the bound Workflow is not available")
    return uid


def create_command(uid: str, args: dict[str, Any]) -> c.CreateInstance:
    """`env.NAME.create({id?, params?})` as a typed command; an omitted ID is issued here (WF-19).

    Built from the parsed value, checked once: `params` may be a 1 MiB document, and each pass
    over it holds the engine's interpreter for tens of milliseconds (issue 21, class 9)."""
    body: dict[str, Any] = {"workflowUid": uid, **{k: v for k, v in args.items() if k in ("id", "params")}}
    if "id" not in body:
        body.update(id=f"wfi_{ids.new_ulid()}", issued=True)
    command = c.convert(c.CreateInstance.kind, body)
    assert isinstance(command, c.CreateInstance)  # the kind decides the type
    return command


def event_command(uid: str, args: dict[str, Any]) -> c.WorkflowCommand:
    body = {"workflowUid": uid, "id": args.get("id"), **{k: v for k, v in args.items() if k in ("type", "payload")}}
    return c.convert(c.SendEvent.kind, body)
