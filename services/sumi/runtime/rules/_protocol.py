"""What a frame from a runtime child may say: pure checks, no I/O.

The child runs code uploaded by any editor of a Space, so every frame it writes
is untrusted input, however well the sandbox behaves: a worker that escaped the
``vm`` (or a Python worker, which owns its child process) can write any bytes.
These checks are the trust boundary. Each returns the frame's fields, typed, or
raises :class:`ProtocolError` naming the context to stop when the frame can be
pinned on one; the channel then stops that context only.

Host calls are checked here field by field, after the sandbox checked them, so
that arguments changed after the sandbox's check (a patched prototype, a forged
frame) never reach the Host. A new host method is one entry in ``HOST_METHODS``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sumi.core.canonical import DocumentError, parsed_document
from sumi.runtime.types import STOP_REASONS

MAX_TEXT = 16 * 1024  # one log line, in characters; the sandbox truncates before this
MAX_ERROR_TEXT = 4 * 1024  # an error's name or message; likewise
MAX_NAMES = 1024  # handlers / workflow classes a Version may export
MAX_IN_FLIGHT = 256  # host calls of one context awaiting the Host at once
MAX_DELAY_SECONDS = 43_200
# Shape bounds, not the ABI's limits: a body over the queue's 127,000 bytes is the Host's
# to refuse (HostError message_too_large); these only keep a frame's size sane, at the
# sandbox's own cap on one call's arguments (4 MiB).
MAX_SEND_MESSAGES = 10_000
MAX_BODY_B64 = 4 * 1024 * 1024
LOG_LEVELS = frozenset({"debug", "info", "warn", "error"})
WORKFLOW_REASONS = frozenset({"run_threw", "step_failed", "step_definition_mismatch"})
MAX_NAME = 256  # step names, event types, instance IDs: Unicode scalar values (WF-34, WF-19)
MAX_SLEEP_SECONDS = 31_536_000
# Which reply ops answer which request op ("error" answers any).
REPLIES = {
    "start_context": "started",
    "load_info": "load_info_result",
    "invoke_queue": "invoke_result",
    "invoke_workflow": "invoke_result",
    "stop_context": "stopped",
    "debug_eval": "debug_eval_result",  # test hooks only (JsRuntime(test_hooks=True))
}


class Refused(Exception):
    """A well-formed host call the runtime answers with a Host error itself, without the Host:
    honest code can make it (a batch object kept from an earlier invocation)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


class ProtocolError(ValueError):
    def __init__(self, message: str, context_id: str | None = None) -> None:
        super().__init__(message)
        self.context_id = context_id


@dataclass(frozen=True)
class Invocation:
    """What a context may touch while one invocation runs: its batch (queue) or its steps (workflow run),
    and its env's bindings."""

    batch_id: str | None
    bindings: frozenset[str]  # queue bindings
    workflow_bindings: frozenset[str] = frozenset()
    workflow_run: bool = False  # step.* calls allowed

    @classmethod
    def of(cls, frame: Mapping[str, Any]) -> Invocation:
        """The window an invoke_queue / invoke_workflow request opens."""
        env = frame.get("env") or {}
        queues = frozenset(map(str, env.get("queueBindings") or ()))
        workflows = frozenset(map(str, env.get("workflowBindings") or ()))
        if frame.get("op") == "invoke_workflow":
            return cls(None, queues, workflows, workflow_run=True)
        return cls(str(frame["batch"]["id"]), queues, workflows)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _str(value: Any, what: str, limit: int, ctx: str | None) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"{what} must be a string of at most {limit} characters", ctx)
    return value


def _text(value: Any, what: str, limit: int, ctx: str | None) -> str:
    """An error's name or message, made well-formed: a JS string may hold lone surrogates (or a
    cut pair), which no record can carry; each becomes U+FFFD, as `String.prototype.toWellFormed`."""
    return _LONE_SURROGATE.sub("\ufffd", _str(value, what, limit, ctx))


def _int(value: Any, what: str, low: int, high: int, ctx: str | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProtocolError(f"{what} must be an integer {low}..{high}", ctx)
    return value


def _exact(args: Any, required: set[str], optional: set[str], method: str, ctx: str) -> Mapping[str, Any]:
    if not isinstance(args, dict) or not required <= args.keys() <= required | optional:
        raise ProtocolError(f"{method}: arguments must be {sorted(required)} plus optional {sorted(optional)}", ctx)
    return args


def context_of(frame: Mapping[str, Any]) -> str | None:
    value = frame.get("contextId")
    return value if isinstance(value, str) and 0 < len(value) <= 128 else None


def check_log(frame: Mapping[str, Any]) -> tuple[str, str, int, str | None]:
    """(level, text, dropped, step): a `dropped` > 0 frame counts lines the runtime refused, not a
    line; `step` names the step whose effect printed it (as the context says: a tag, not a fact)."""
    ctx = context_of(frame)
    level = frame.get("level")
    if level not in LOG_LEVELS:
        raise ProtocolError("log level must be one of debug, info, warn, error", ctx)
    dropped = _int(frame.get("dropped", 0), "log dropped", 0, 2**31 - 1, ctx)
    step = frame.get("step")
    if step is not None:
        step = _text(step, "log step", 1024, ctx)
    # Well-formed: a line goes on a record, which cannot carry a lone surrogate.
    return str(level), _text(frame.get("text"), "log text", MAX_TEXT, ctx), dropped, step


def check_stopped(frame: Mapping[str, Any]) -> str:
    reason = frame.get("reason")
    if reason not in STOP_REASONS:
        raise ProtocolError("context_stopped needs a known reason", context_of(frame))
    return str(reason)


# ---- host calls -----------------------------------------------------------------


def _batch_call(required: set[str], optional: set[str]) -> Callable[[str, Any, Invocation, str], dict[str, Any]]:
    def check(method: str, args: Any, inv: Invocation, ctx: str) -> dict[str, Any]:
        args = _exact(args, required, optional, method, ctx)
        _str(args["batchId"], f"{method}: batchId", 1024, ctx)
        if "messageId" in required:
            _str(args["messageId"], f"{method}: messageId", 1024, ctx)
        if "delaySeconds" in args:
            _int(args["delaySeconds"], f"{method}: delaySeconds", 0, MAX_DELAY_SECONDS, ctx)
        if args["batchId"] != inv.batch_id:  # also in a workflow run, which handles no batch
            raise Refused("unknown_batch", f"{method}: not the batch being handled")
        return dict(args)

    return check


def _base64(value: Any, what: str, ctx: str) -> str:
    text = _str(value, what, MAX_BODY_B64, ctx)
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{what} is not base64", ctx) from None
    return text


def _queue_send(method: str, args: Any, inv: Invocation, ctx: str) -> dict[str, Any]:
    args = _exact(args, {"binding", "messages"}, set(), method, ctx)
    if args["binding"] not in inv.bindings:
        raise ProtocolError(f"{method}: {args['binding']!r} is not a queue binding of this env", ctx)
    messages = args["messages"]
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_SEND_MESSAGES:
        raise ProtocolError(f"{method}: messages must be a list of 1..{MAX_SEND_MESSAGES}", ctx)
    for m in messages:
        m = _exact(m, {"body"}, {"delaySeconds"}, method, ctx)
        _base64(m["body"], f"{method}: body", ctx)
        if "delaySeconds" in m:
            _int(m["delaySeconds"], f"{method}: delaySeconds", 0, MAX_DELAY_SECONDS, ctx)
    return {"binding": args["binding"], "messages": [dict(m) for m in messages]}


def _name(value: Any, what: str, ctx: str) -> str:
    """1..256 Unicode scalar values: a str without lone surrogates."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME:
        raise ProtocolError(f"{what} must be a string of 1..{MAX_NAME} Unicode scalar values", ctx)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{what} is not well-formed Unicode", ctx) from None
    return value


def _document(value: Any, what: str, ctx: str) -> Any:
    try:
        parsed_document(value)  # frames are parsed JSON
    except DocumentError as e:
        raise ProtocolError(f"{what}: {e}", ctx) from None
    return value


def _step(required: set[str], optional: set[str]) -> Callable[[str, Any, Invocation, str], dict[str, Any]]:
    """step.* of a workflow run (contract "Runtime ABI"); the runtime validated them for the worker."""

    def check(method: str, args: Any, inv: Invocation, ctx: str) -> dict[str, Any]:
        if not inv.workflow_run:
            raise ProtocolError(f"{method} outside a workflow run", ctx)
        checked: dict[str, Any] = dict(_exact(args, required, optional, method, ctx))
        args = checked
        _name(args["name"], f"{method}: name", ctx)
        if method == "step.begin":
            pass  # a name alone: the runtime asks before an effect whether the Host's limits allow it
        elif method == "step.sleep":
            _int(args["seconds"], f"{method}: seconds", 0, MAX_SLEEP_SECONDS, ctx)
        elif method == "step.waitForEvent":
            _name(args["type"], f"{method}: type", ctx)
            _int(args["timeoutSeconds"], f"{method}: timeoutSeconds", 1, MAX_SLEEP_SECONDS, ctx)
        else:
            _retry_config(args["config"], ctx)
            if args["ok"] is True and "error" not in args:
                if "result" in args:
                    _document(args["result"], f"{method}: result", ctx)
            elif args["ok"] is False and "result" not in args and "error" in args:
                error = _exact(args["error"], {"name", "message"}, set(), f"{method}: error", ctx)
                checked["error"] = {
                    "name": _text(error["name"], f"{method}: error.name", MAX_ERROR_TEXT, ctx),
                    "message": _text(error["message"], f"{method}: error.message", MAX_ERROR_TEXT, ctx),
                }
            else:
                raise ProtocolError(f"{method}: ok with a result, or not ok with an error", ctx)
        return checked

    return check


def _retry_config(config: Any, ctx: str) -> None:
    keys = {"maxAttempts", "initialDelaySeconds", "backoff", "maxDelaySeconds"}
    config = _exact(config, keys, set(), "step.do: config", ctx)
    _int(config["maxAttempts"], "step.do: maxAttempts", 1, 100, ctx)
    _int(config["initialDelaySeconds"], "step.do: initialDelaySeconds", 0, MAX_DELAY_SECONDS, ctx)
    _int(config["maxDelaySeconds"], "step.do: maxDelaySeconds", 0, MAX_DELAY_SECONDS, ctx)
    if config["backoff"] not in ("constant", "exponential"):
        raise ProtocolError("step.do: backoff must be constant or exponential", ctx)


def _binding(required: set[str], optional: set[str]) -> Callable[[str, Any, Invocation, str], dict[str, Any]]:
    """workflow.* of a Caller Binding (WF-18..27), from queue handlers and workflow runs alike."""

    def check(method: str, args: Any, inv: Invocation, ctx: str) -> dict[str, Any]:
        checked: dict[str, Any] = dict(_exact(args, {"binding", *required}, optional, method, ctx))
        args = checked
        if args["binding"] not in inv.workflow_bindings:
            raise ProtocolError(f"{method}: {args['binding']!r} is not a workflow binding of this env", ctx)
        for key in ("id", "type"):
            if key in args:
                _name(args[key], f"{method}: {key}", ctx)
        for key in ("params", "payload"):
            if key in args:
                _document(args[key], f"{method}: {key}", ctx)
        return checked

    return check


HostMethodCheck = Callable[[str, Any, Invocation, str], dict[str, Any]]
HOST_METHODS: dict[str, HostMethodCheck] = {
    "batch.acknowledge": _batch_call({"batchId", "messageId"}, set()),
    "batch.retry": _batch_call({"batchId", "messageId"}, {"delaySeconds"}),
    "batch.acknowledgeAll": _batch_call({"batchId"}, set()),
    "batch.retryAll": _batch_call({"batchId"}, {"delaySeconds"}),
    "queue.send": _queue_send,
    "step.do": _step({"name", "config", "ok"}, {"result", "error"}),
    "step.begin": _step({"name"}, set()),
    "step.sleep": _step({"name", "seconds"}, set()),
    "step.waitForEvent": _step({"name", "type", "timeoutSeconds"}, set()),
    "workflow.create": _binding(set(), {"id", "params"}),
    "workflow.get": _binding({"id"}, set()),
    "workflow.status": _binding({"id"}, set()),
    "workflow.sendEvent": _binding({"id", "type"}, {"payload"}),
    "workflow.terminate": _binding({"id"}, set()),
}


@dataclass(frozen=True)
class HostCallFrame:
    context_id: str
    call_id: int
    method: str
    args: dict[str, Any]


def check_host_call(frame: Mapping[str, Any], invocations: Mapping[int, Invocation], in_flight: int) -> HostCallFrame:
    """A host call of a context that is handling an invocation, with arguments the ABI allows.

    Raises ProtocolError (stop the context) or Refused (answer it with that Host error)."""
    ctx = context_of(frame)
    if ctx is None:
        raise ProtocolError("host_call without a context")
    call_id = _int(frame.get("callId"), "callId", 1, 2**53, ctx)
    method = frame.get("method")
    check = HOST_METHODS.get(method) if isinstance(method, str) else None
    if check is None or not isinstance(method, str):
        raise ProtocolError(f"unknown host method {method!r}", ctx)
    if not invocations:
        raise ProtocolError(f"{method} called while no invocation runs (after the handler returned)", ctx)
    if in_flight >= MAX_IN_FLIGHT:
        raise ProtocolError(f"more than {MAX_IN_FLIGHT} host calls in flight", ctx)
    errors: list[Exception] = []
    for inv in invocations.values():  # one in practice; any running invocation may own the call
        try:
            return HostCallFrame(ctx, call_id, method, check(method, frame.get("args"), inv, ctx))
        except (ProtocolError, Refused) as e:
            errors.append(e)
    raise next((e for e in errors if isinstance(e, ProtocolError)), errors[0])


# ---- replies --------------------------------------------------------------------


def _names(value: Any, what: str, ctx: str | None) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise ProtocolError(f"{what} must be a list of at most {MAX_NAMES} names", ctx)
    return [_str(v, what, 256, ctx) for v in value]


def _error(value: Any, ctx: str | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError("error must be an object", ctx)
    host_error = value.get("hostError", False)
    if not isinstance(host_error, bool):
        raise ProtocolError("error.hostError must be a boolean", ctx)
    return {
        "name": _text(value.get("name"), "error.name", MAX_ERROR_TEXT, ctx),
        "message": _text(value.get("message", ""), "error.message", MAX_ERROR_TEXT, ctx),
        "hostError": host_error,
    }


def _load_error(value: Any, ctx: str | None) -> str | None:
    return None if value is None else _text(value, "loadError", MAX_ERROR_TEXT * 2, ctx)


def _workflow_outcome(frame: Mapping[str, Any], ctx: str | None) -> dict[str, Any]:
    """complete {output?} | errored {reason, message} | suspended (see WorkflowOutcome)."""
    kind = frame.get("kind")
    if kind == "suspended":
        return {"op": "invoke_result", "kind": kind}
    if kind == "complete":
        if "output" not in frame:
            return {"op": "invoke_result", "kind": kind}
        try:
            parsed_document(frame["output"])
        except DocumentError as e:
            raise ProtocolError(f"workflow output: {e}", ctx) from None
        return {"op": "invoke_result", "kind": kind, "output": frame["output"]}
    if kind == "errored" and frame.get("reason") in WORKFLOW_REASONS:
        message = _text(frame.get("message", ""), "message", MAX_ERROR_TEXT, ctx)
        return {"op": "invoke_result", "kind": kind, "reason": frame["reason"], "message": message}
    raise ProtocolError("a workflow outcome needs a known kind (and reason)", ctx)


def check_reply(request_op: str, request_ctx: str | None, frame: Mapping[str, Any]) -> dict[str, Any]:
    """The reply to one of our requests, rebuilt from the fields its op allows."""
    op = frame.get("op")
    if op != "error" and op != REPLIES.get(request_op):
        raise ProtocolError(f"{op!r} does not answer {request_op}", request_ctx)
    if request_ctx is not None and frame.get("contextId") not in (request_ctx, None):
        raise ProtocolError("reply names another context than its request", request_ctx)
    if op == "error":
        return {"op": "error", "error": _error(frame.get("error"), request_ctx)}
    if op == "started":
        return {"op": op, "loadError": _load_error(frame.get("loadError"), request_ctx)}
    if op == "load_info_result":
        if frame.get("loadError") is not None:
            return {"op": op, "loadError": _load_error(frame.get("loadError"), request_ctx)}
        return {
            "op": op,
            "handlers": _names(frame.get("handlers"), "handlers", request_ctx),
            "workflowClasses": _names(frame.get("workflowClasses"), "workflowClasses", request_ctx),
        }
    if op == "invoke_result" and request_op == "invoke_workflow" and "kind" in frame:
        return _workflow_outcome(frame, request_ctx)
    if op == "invoke_result":
        ok = frame.get("ok")
        if ok is True:
            return {"op": op, "ok": True}
        if ok is not False or frame.get("reason") not in STOP_REASONS:
            raise ProtocolError("invoke_result needs ok, or a known reason", request_ctx)
        return {"op": op, "ok": False, "reason": frame["reason"], "error": _error(frame.get("error"), request_ctx)}
    if op == "debug_eval_result":
        return {"op": op, "value": frame.get("value")}
    return {"op": op}  # stopped
