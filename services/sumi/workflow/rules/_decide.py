"""Pure decisions of the workflow engine: (instance, input, now, limits) -> records (+ a reply).

No I/O. Inputs are a typed command (create, event, terminate), a runtime call of a
running context (step.do, step.sleep, step.waitForEvent), the outcome of a context
that has stopped, a context start, and the clock reaching a due time. The engine
commits the returned `records` in one transaction before it answers the context or
the caller; `after_stop` records only once the context is confirmed stopped, so a
later status is never shown before the code has stopped (WF-46).

Fencing: a runtime call carrying any token but the instance's latest owner token is
refused with no record (WF-14, WF-46); every context start records a new token, and
a terminal transition clears it.
"""

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.canonical import canonical, parsed_canonical
from sumi.core.problems import Problem
from sumi.workflow.commands import UNSET, CreateInstance, QueryInstance, SendEvent, TerminateInstance
from sumi.workflow.rules._state import TERMINAL, Instance, LogRecord, Step, Timer

DAY_MS = 86_400_000


@dataclass(frozen=True)
class Limits:
    max_steps: int = 1024  # WF-38
    lifetime_ms: int = 31_536_000_000  # WF-38
    max_events: int = 1024  # WF-24
    max_event_bytes: int = 1_048_576  # WF-24
    retention_ms: int = 30 * DAY_MS  # WF-47: at least 2,592,000 s; a setting so tests can shorten it
    always_replay: bool = False  # end the context after every committed step


Records = list[LogRecord]


@dataclass
class Decision:
    records: Records = field(default_factory=list)
    reply: dict[str, Any] | None = None  # to a runtime call
    error: tuple[str, str] | None = None  # a HostError (name, message) to a runtime call instead of a reply
    stop: bool = False  # the engine stops the context before anything in after_stop
    after_stop: Records = field(default_factory=list)
    runnable: bool = False  # the instance needs a (new) context now


@dataclass(frozen=True)
class Caller:
    """Who submitted a command: the decision's CommandDecided names them."""

    command_id: str
    space: str
    principal: str
    kind: str


@dataclass(frozen=True)
class WorkflowView:
    """What the control fold says about the Workflow Resource a command names."""

    exists: bool
    space: str = ""
    ready: bool = False
    closed: bool = False  # being deleted: intake closed (WF-13)


class SealedDocument(RuntimeError):
    """A document reached a decision still as the log holds it: a Host fault (the reader did not
    open it with its key), never to be read as JSON (a JSON decode error of ciphertext or of
    nothing says nothing of where the fault is)."""


def doc(text: str | None, what: str = "a document") -> Any:
    """An instance's document (canonical JSON, opened), or None for undefined."""
    if text is None:
        return None
    if not text or sealing.is_sealed(text):
        raise SealedDocument(f"{what} is {'sealed' if text else 'empty'}: it was never opened")
    return json.loads(text)


# ---- commands --------------------------------------------------------------------------------


def decided(caller: Caller, now: int, status: int, result: Any) -> r.CommandDecided:
    result_json = parsed_canonical(result)
    return r.CommandDecided(
        caller.command_id, caller.space, caller.principal, caller.kind, True, status, now, result=result_json
    )


def rejected(caller: Caller, now: int, problem: Problem) -> r.CommandDecided:
    return r.CommandDecided(
        caller.command_id,
        caller.space,
        caller.principal,
        caller.kind,
        False,
        problem.status,
        now,
        problem=canonical(problem.to_json()),
    )


def create(inst: Instance | None, cmd: CreateInstance, wf: WorkflowView, caller: Caller, now: int) -> Decision:
    """WF-10, WF-19: a retained ID is never a second run."""
    if not wf.exists or wf.closed or wf.space != caller.space:
        return Decision([rejected(caller, now, Problem("not_found", "no such Workflow"))])
    if not wf.ready:
        return Decision([rejected(caller, now, Problem("workflow_not_ready", "the Workflow cannot accept instances"))])
    if inst is not None and not inst.purged:
        return Decision([rejected(caller, now, Problem("instance_exists", f"instance {cmd.instance_id} exists"))])
    params = None if cmd.params is UNSET else parsed_canonical(cmd.params)
    created = r.InstanceCreated(cmd.workflow_uid, cmd.instance_id, caller.space, now, params, caller.principal)
    body = {"id": cmd.instance_id, "status": "queued"}
    return Decision([created, decided(caller, now, 201, body)], runnable=True)


def event(inst: Instance | None, cmd: SendEvent, caller: Caller, now: int, limits: Limits, alive: bool) -> Decision:
    """WF-23, WF-24: accepted with the next per-instance sequence, or consumed at once by a matching wait."""
    if inst is None or inst.purged:
        return Decision([rejected(caller, now, Problem("unknown_instance", f"no instance {cmd.instance_id}"))])
    # The tie rule (WF-43): a wait whose timeout instant has passed times out before this event.
    fired = due(inst, now, limits, alive) if _wait_overdue(inst, now) and not alive else Decision()
    if inst.terminal or any(isinstance(x, r.InstanceStatusChanged) and x.status in TERMINAL for x in fired.records):
        return Decision([*fired.records, rejected(caller, now, Problem("instance_terminal", "the instance ended"))])
    stored: dict[str, Any] = {"type": cmd.type} if cmd.payload is UNSET else {"type": cmd.type, "payload": cmd.payload}
    size = len(parsed_canonical(stored).encode("utf-8"))
    payload = None if cmd.payload is UNSET else parsed_canonical(cmd.payload)
    accepted = r.EventAccepted(inst.workflow_uid, inst.instance_id, inst.next_sequence, cmd.type, size, now, payload)
    answer = decided(caller, now, 202, {"sequence": inst.next_sequence})
    t = inst.timer if not fired.records else None
    if t is not None and t.kind == "wait" and t.event_type == cmd.type and not alive:
        # Handed straight to the waiting wait: never queued, so never counted (WF-24's exception).
        woke = _step_done(inst, t.name, "wait", now, result=payload, sequence=accepted.sequence)
        return Decision([accepted, woke, *_status(inst, "running", now), answer], runnable=True)
    if len(inst.events) >= limits.max_events or inst.events_bytes + size > limits.max_event_bytes:
        problem = Problem("event_queue_full", "the instance holds 1024 events or 1 MiB of unconsumed events")
        return Decision([*fired.records, rejected(caller, now, problem)])
    return Decision([*fired.records, accepted, answer], runnable=fired.runnable)


def terminate(inst: Instance | None, cmd: TerminateInstance, caller: Caller, now: int, alive: bool) -> Decision:
    """WF-26: decided only once the context has physically stopped; `stop` asks the engine for that first."""
    if inst is None or inst.purged:
        return Decision([rejected(caller, now, Problem("unknown_instance", f"no instance {cmd.instance_id}"))])
    if inst.terminal:
        return Decision([decided(caller, now, 200, {"id": inst.instance_id, "status": inst.status})])
    if alive:
        return Decision(stop=True)
    ended = r.InstanceStatusChanged(inst.workflow_uid, inst.instance_id, "terminated", now)
    return Decision([ended, decided(caller, now, 200, {"id": inst.instance_id, "status": "terminated"})])


def query(inst: Instance | None, cmd: QueryInstance, caller: Caller, now: int) -> Decision:
    """WF-20, WF-21: another replica's binding asks for the status (`get`, `status()`). The
    document goes to the log sealed under the asker's key: the output and error it holds are
    sealed there everywhere else too (`_keys`)."""
    if inst is None or inst.purged:
        return Decision([rejected(caller, now, Problem("unknown_instance", f"no instance {cmd.instance_id}"))])
    key = r.DataKey(
        caller.command_id, inst.workflow_uid, inst.instance_id, base64.urlsafe_b64decode(cmd.reply_key), now
    )
    return Decision([decided(caller, now, 200, sealing.seal(key, canonical(status_of(inst))))])


def status_of(inst: Instance) -> dict[str, Any]:
    """WF-21: `output` only when complete, `error` only when errored."""
    out: dict[str, Any] = {"status": inst.status}
    if inst.status == "complete" and inst.output is not None:
        out["output"] = doc(inst.output, f"the output of {inst.instance_id}")
    if inst.status == "errored" and inst.error is not None:
        reason, message = inst.error
        if sealing.is_sealed(message):
            raise SealedDocument(f"the error message of {inst.instance_id} is sealed: it was never opened")
        out["error"] = {"reason": reason, **({"message": message} if message else {})}
    return out


# ---- contexts --------------------------------------------------------------------------------


def needs_context(inst: Instance, now: int) -> bool:
    """A live run without a live context: queued, woken, or a retry that is due."""
    if inst.purged or inst.terminal:
        return False
    return inst.timer is None or (inst.timer.kind == "retry" and inst.timer.due <= now)


def start(inst: Instance, token: str, version_uid: str, now: int, limits: Limits) -> Decision:
    """A new context: a new owner token fences every earlier one (WF-14); the Version is kept for it (WF-33)."""
    if now >= inst.created_at + limits.lifetime_ms:
        return Decision(_errored(inst, "lifetime_exceeded", "the instance outlived 31,536,000 s", now))
    began = r.InstanceContextStarted(inst.workflow_uid, inst.instance_id, token, version_uid, inst.contexts + 1, now)
    return Decision([began, *_status(inst, "running", now)])


def outcome(
    inst: Instance, kind: str, now: int, output: Any = None, reason: str | None = None, message: str | None = None
) -> Decision:
    """The context has stopped (invoke_workflow returned): publish what it ended in (WF-46)."""
    if inst.terminal or inst.purged:
        return Decision()
    if kind == "complete":
        out = None if output is None else parsed_canonical(output)
        return Decision([r.InstanceStatusChanged(inst.workflow_uid, inst.instance_id, "complete", now, out)])
    if kind == "errored":
        if reason == "step_failed" and not _failed_finally(inst, message):
            reason, message = "run_threw", f"step_failed: {message}" if message else "step_failed"
        return Decision(_errored(inst, reason or "run_threw", message, now))
    t = inst.timer
    if t is not None and t.kind == "wait":
        e = inst.oldest_event(t.event_type)  # accepted while the context was still stopping
        if e is not None:
            return Decision(
                [_step_done(inst, t.name, "wait", now, result=e.payload, sequence=e.sequence)], runnable=True
            )
        return Decision(_status(inst, "waiting", now))
    if t is not None and t.kind == "sleep":
        return Decision(_status(inst, "sleeping", now))
    return Decision(runnable=True)  # a retry (stays running) or always-replay: the next context follows


def _failed_finally(inst: Instance, message: str | None) -> bool:
    """WF-45 decided on this side of the process boundary: the context's word that run ended on an
    uncaught step_failed stands only for a final step failure the Host committed, with its message.
    A Python worker owns its process and can report anything; a JavaScript one that escaped its
    realm as well."""
    return any(
        not s.ok and s.error_name == "step_failed" and (s.error_message or "") == (message or "")
        for s in inst.completed.values()
    )


def due(inst: Instance, now: int, limits: Limits, alive: bool) -> Decision:
    """The clock reached the instance's next due time: retention purge, lifetime, sleep end, wait timeout."""
    if inst.purged:
        return Decision()
    if inst.terminal_at is not None:
        if now >= inst.terminal_at + limits.retention_ms:
            return Decision([r.InstancePurged(inst.workflow_uid, inst.instance_id, now)])
        return Decision()
    if now >= inst.created_at + limits.lifetime_ms:
        ended = _errored(inst, "lifetime_exceeded", "the instance outlived 31,536,000 s", now)
        return Decision(stop=True, after_stop=ended) if alive else Decision(ended)
    t = inst.timer
    if t is None or now < t.due:
        return Decision()
    if t.kind == "sleep":
        return Decision([_step_done(inst, t.name, "sleep", now), *_status(inst, "running", now)], runnable=True)
    if t.kind == "wait":
        timeout = _step_done(inst, t.name, "wait", now, ok=False, error=("wait_timeout", "no matching event in time"))
        return Decision([timeout, *_status(inst, "running", now)], runnable=True)
    return Decision(runnable=True)  # a retry: the next attempt runs in a new context (WF-41)


def next_due(inst: Instance, limits: Limits) -> int | None:
    d = inst.next_due(limits.retention_ms)
    if inst.terminal or inst.purged:
        return d
    lifetime = inst.created_at + limits.lifetime_ms
    return lifetime if d is None else min(d, lifetime)


# ---- runtime calls (the step API, WF-34..43) -----------------------------------------------------


def call(inst: Instance, token: str, method: str, args: dict[str, Any], now: int, limits: Limits) -> Decision:
    """A host call of the context holding `token`. Argument validation is the runtime's (WF-37);
    here: fencing, replay of completed names, the Host's limits, and what gets committed."""
    if inst.purged or inst.terminal or token != inst.owner:
        return Decision(error=("fenced", "this execution context no longer owns the instance"), stop=True)
    handler = _CALLS.get(method)
    if handler is None:
        return Decision(error=("invalid_request", f"unknown host method {method}"))
    name = args.get("name")
    if not isinstance(name, str):
        return Decision(error=("invalid_request", "a step needs a name"))
    done = inst.completed.get(name)
    if done is not None:
        return _replayed(done)
    kind = _KIND[method]
    seen = inst.pending.get(name)
    if seen is not None and seen != kind:
        return Decision(error=("step_definition_mismatch", f"step {name} was begun as {seen}"), stop=True)
    if seen is None or method == "step.begin":  # an attempt's effect may not start past the lifetime
        limit = _limit(inst, now, limits, new=seen is None)
        if limit is not None:
            return limit
    result: Decision = handler(inst, token, name, args, now, limits)
    return result


def _limit(inst: Instance, now: int, limits: Limits, new: bool = True) -> Decision | None:
    if new and inst.steps_used >= limits.max_steps:
        ended = _errored(inst, "step_limit_exceeded", f"more than {limits.max_steps} steps", now)
    elif now >= inst.created_at + limits.lifetime_ms:
        ended = _errored(inst, "lifetime_exceeded", "the instance outlived 31,536,000 s", now)
    else:
        return None
    reason = ended[0].errorReason if isinstance(ended[0], r.InstanceStatusChanged) else "limit"
    return Decision(error=(reason or "limit", "a Host limit ended the instance"), stop=True, after_stop=ended)


def _replayed(done: Step) -> Decision:
    # Normally the runtime replays completed names itself from the invocation; a name completed
    # during this context (e.g. a wait woken while it ran) is answered from the fold the same way.
    if done.ok:
        key = "payload" if done.kind == "wait" else "result"
        return Decision(reply=_resolve(key, done.result))
    return Decision(reply={"action": "reject", "message": done.error_message or ""})


def _resolve(key: str, text: str | None) -> dict[str, Any]:
    return {"action": "resolve"} if text is None else {"action": "resolve", key: doc(text, f"a step's {key}")}


def _committed(inst: Instance, rec: r.StepAttemptCommitted, limits: Limits, reply: dict[str, Any]) -> Decision:
    if limits.always_replay:  # the next step is reached by replay in a new context
        return Decision([rec], reply={"action": "suspend"}, stop=True, runnable=True)
    return Decision([rec], reply=reply)


def _do(inst: Instance, token: str, name: str, args: dict[str, Any], now: int, limits: Limits) -> Decision:
    """WF-40, WF-41: each attempt committed; a failure with attempts left retries in a fresh context."""
    config = inst.configs.get(name) or canonical(args.get("config") or {"maxAttempts": 1})
    saved = json.loads(config)
    attempt = inst.attempts.get(name, 0) + 1
    first = name not in inst.configs
    keep = config if first else None
    if args.get("ok"):
        result = None if args.get("result") is None else parsed_canonical(args["result"])
        rec = _attempt(inst, name, "do", attempt, now, token, ok=True, final=True, result=result, config=keep)
        return _committed(inst, rec, limits, _resolve("result", result))
    err = args.get("error") or {}
    err_name, err_message = str(err.get("name", "Error")), str(err.get("message", ""))
    if attempt < int(saved.get("maxAttempts", 1)):
        failed = _attempt(
            inst, name, "do", attempt, now, token, ok=False, final=False, config=keep, error=(err_name, err_message)
        )
        retry = r.RetryScheduled(
            inst.workflow_uid, inst.instance_id, name, attempt + 1, now + retry_delay_ms(saved, attempt), token, now
        )
        return Decision([failed, retry], reply={"action": "suspend"}, stop=True)
    final = _attempt(
        inst,
        name,
        "do",
        attempt,
        now,
        token,
        ok=False,
        final=True,
        config=keep,
        error=("step_failed", f"{err_name}: {err_message}" if err_message else err_name),
    )
    return _committed(inst, final, limits, {"action": "reject", "message": final.errorMessage or ""})


def retry_delay_ms(config: dict[str, Any], attempt: int) -> int:
    """WF-40: the delay after failed attempt k (1-based)."""
    initial = int(config.get("initialDelaySeconds", 0))
    cap = int(config.get("maxDelaySeconds", 43200))
    if config.get("backoff", "constant") == "exponential":
        return min(cap, initial << (attempt - 1)) * 1000
    return min(cap, initial) * 1000


def _sleep(inst: Instance, token: str, name: str, args: dict[str, Any], now: int, limits: Limits) -> Decision:
    """WF-42: the deadline is fixed at the first call; 0 s completes in this context."""
    t = inst.timer if inst.timer is not None and inst.timer.name == name else None
    deadline = t.due if t is not None else now + int(args.get("seconds", 0)) * 1000
    if deadline <= now:
        return _committed(inst, _step_done(inst, name, "sleep", now, token=token), limits, {"action": "resolve"})
    if t is not None:
        return Decision(reply={"action": "suspend"}, stop=True)
    scheduled = r.SleepScheduled(inst.workflow_uid, inst.instance_id, name, deadline, token, now)
    return Decision([scheduled], reply={"action": "suspend"}, stop=True)


def _wait(inst: Instance, token: str, name: str, args: dict[str, Any], now: int, limits: Limits) -> Decision:
    """WF-43: the oldest matching event is consumed atomically with the step's commit."""
    t = inst.timer if inst.timer is not None and inst.timer.name == name else None
    type_ = t.event_type if t is not None else str(args.get("type", ""))
    e = inst.oldest_event(type_)
    if e is not None:
        rec = _step_done(inst, name, "wait", now, result=e.payload, sequence=e.sequence, token=token)
        return _committed(inst, rec, limits, _resolve("payload", e.payload))
    if t is not None:
        return Decision(reply={"action": "suspend"}, stop=True)
    deadline = now + int(args.get("timeoutSeconds", 1)) * 1000
    scheduled = r.WaitScheduled(inst.workflow_uid, inst.instance_id, name, type_, deadline, token, now)
    return Decision([scheduled], reply={"action": "suspend"}, stop=True)


def _begin(inst: Instance, token: str, name: str, args: dict[str, Any], now: int, limits: Limits) -> Decision:
    """WF-38: asked before an effect the runtime could not clear from its invocation's limits;
    past a limit `call` has already refused it, so no effect runs for a step the Host refuses."""
    return Decision(reply={"action": "resolve"})


_CALLS = {"step.do": _do, "step.begin": _begin, "step.sleep": _sleep, "step.waitForEvent": _wait}
_KIND = {"step.do": "do", "step.begin": "do", "step.sleep": "sleep", "step.waitForEvent": "wait"}


# ---- record builders ---------------------------------------------------------------------------


def _attempt(
    inst: Instance,
    name: str,
    kind: str,
    attempt: int,
    now: int,
    token: str | None,
    *,
    ok: bool,
    final: bool,
    result: str | None = None,
    error: tuple[str, str] | None = None,
    config: str | None = None,
    sequence: int | None = None,
) -> r.StepAttemptCommitted:
    return r.StepAttemptCommitted(
        inst.workflow_uid,
        inst.instance_id,
        name,
        kind,
        attempt,
        ok,
        final,
        now,
        result,
        error[0] if error else None,
        error[1] if error else None,
        config,
        sequence,
        token,
    )


def _step_done(
    inst: Instance,
    name: str,
    kind: str,
    now: int,
    *,
    ok: bool = True,
    result: str | None = None,
    error: tuple[str, str] | None = None,
    sequence: int | None = None,
    token: str | None = None,
) -> r.StepAttemptCommitted:
    return _attempt(inst, name, kind, 1, now, token, ok=ok, final=True, result=result, error=error, sequence=sequence)


def _status(inst: Instance, status: str, now: int) -> Records:
    if inst.status == status:
        return []
    return [r.InstanceStatusChanged(inst.workflow_uid, inst.instance_id, status, now)]


def _errored(inst: Instance, reason: str, message: str | None, now: int) -> Records:
    return [r.InstanceStatusChanged(inst.workflow_uid, inst.instance_id, "errored", now, None, reason, message)]


def _wait_overdue(inst: Instance, now: int) -> bool:
    t: Timer | None = inst.timer
    return t is not None and t.kind == "wait" and now >= t.due
