"""The DurableWorkflow side of the worker ABI for Python workers: ``step``, the run driver, ``env.NAME``.

The same rules as ``js/workflow.js`` (read its header for the decisions where the texts leave room),
the Python way::

    class ReportWorkflow:
        def __init__(self, env): self.env = env
        async def run(self, event, step):             # event: {"instanceId": ..., "params"?: ...}
            data = await step.do("load", lambda: {"rows": 3}, {"max_attempts": 5})
            await step.sleep("cool-down", 10)
            ev = await step.wait_for_event("approval", {"type": "approved", "timeout_seconds": 3600})

Option keys take the Python spelling or the JavaScript one (``maxAttempts``, ``timeoutSeconds``);
``waitForEvent`` is an alias of ``wait_for_event``. Bad arguments raise ``TypeError`` from the
awaited step. An uncatchable ``step_definition_mismatch`` (WF-35) cannot be an exception in
Python (``except BaseException`` catches everything), so it is what it is in JavaScript too: the
outcome is reported and the offending call never returns; the Host then stops the process.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import math
import weakref
from collections.abc import Callable
from time import time as _wall_clock  # bound before worker code runs
from typing import Any, Protocol

from sumi.core.canonical import DocumentError, document, loads

from .types import HostError


class Abi(Protocol):
    """What a workflow run needs of the child's ABI (`_pyabi.Abi`): its host calls, the step
    its printed lines name, and the switch that ends them."""

    halted: bool

    def watch_step(self, step: Callable[[], str | None]) -> None: ...

    async def call(self, method: str, args: dict[str, Any]) -> Any: ...


MAX_NAME = 256
MAX_SLEEP_SECONDS = 31_536_000
MAX_DELAY_SECONDS = 43_200
_RETRY_KEYS = {
    "max_attempts": "maxAttempts",
    "initial_delay_seconds": "initialDelaySeconds",
    "backoff": "backoff",
    "max_delay_seconds": "maxDelaySeconds",
}
_WAIT_KEYS = {"type": "type", "timeout_seconds": "timeoutSeconds"}


def valid_name(value: Any) -> bool:
    """1..256 Unicode scalar values (WF-34, WF-19): a str without lone surrogates."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int_in(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _options(value: Any, keys: dict[str, str], fn: str) -> dict[str, Any]:
    """Options by their wire (JavaScript) name; either spelling accepted, unknown keys refused."""
    if not isinstance(value, dict):
        raise TypeError(f"{fn}: options must be a dict")
    wire_names = set(keys.values())
    out: dict[str, Any] = {}
    for key, item in value.items():
        wire = keys.get(key, key if key in wire_names else None)
        if wire is None:
            raise TypeError(f"{fn}: unknown option {key!r}")
        if wire in out:
            raise TypeError(f"{fn}: option {wire!r} given twice")
        out[wire] = item
    return out


def retry_config(policy: Any) -> dict[str, Any]:
    """WF-40, with the defaults filled in as the Host saves them."""
    config: dict[str, Any] = {
        "maxAttempts": 1,
        "initialDelaySeconds": 0,
        "backoff": "constant",
        "maxDelaySeconds": MAX_DELAY_SECONDS,
    }
    if policy is None:
        return config
    given = _options(policy, _RETRY_KEYS, "step.do retry_policy")
    if "maxAttempts" not in given:
        raise TypeError("step.do: retry_policy needs max_attempts")
    config.update(given)
    if not _int_in(config["maxAttempts"], 1, 100):
        raise TypeError("step.do: max_attempts must be an int 1..100")
    for key in ("initialDelaySeconds", "maxDelaySeconds"):
        if not _int_in(config[key], 0, MAX_DELAY_SECONDS):
            raise TypeError(f"step.do: {key} must be an int 0..43200")
    if config["backoff"] not in ("constant", "exponential"):
        raise TypeError('step.do: backoff must be "constant" or "exponential"')
    return config


def _document(value: Any, what: str) -> Any:
    """A checked copy of a document argument, or the Host Error the Host would answer."""
    try:
        return loads(document(value))
    except DocumentError as e:
        raise HostError(e.code, f"{what}: {e}") from None


# The slots of `type` itself: a metaclass may override `__mro__`/`__dict__` lookups, not these.
_MRO_OF: Any = type.__dict__["__mro__"]
_DICT_OF: Any = type.__dict__["__dict__"]


def is_workflow_class(value: Any) -> bool:
    """WF-28 as the Form states it, without running worker code: a class (by its real type, not a
    ``__class__`` it may claim) whose instances' ``run``, found in its MRO's own namespaces (no
    descriptor invoked, no metaclass consulted), is callable. A property is not; neither is a
    ``run`` only the metaclass has (the class's, not its instances')."""
    if not issubclass(type(value), type):
        return False
    for klass in _MRO_OF.__get__(value):
        namespace = _DICT_OF.__get__(klass)
        if "run" in namespace:
            run = namespace["run"]
            return callable(run) or isinstance(run, classmethod | staticmethod)
    return False


async def _never() -> Any:
    await asyncio.get_running_loop().create_future()


class WorkflowInstance:
    def __init__(self, abi: Abi, binding: str, instance_id: str) -> None:
        self._abi, self._binding = abi, binding
        self.id = instance_id

    def _args(self, **extra: Any) -> dict[str, Any]:
        return {"binding": self._binding, "id": self.id, **extra}

    async def status(self) -> dict[str, Any]:
        reply = await self._abi.call("workflow.status", self._args()) or {}
        out: dict[str, Any] = {"status": str(reply.get("status"))}
        if reply.get("output") is not None:
            out["output"] = reply["output"]
        if isinstance(reply.get("error"), dict):
            error = {"reason": str(reply["error"].get("reason"))}
            if reply["error"].get("message") is not None:
                error["message"] = str(reply["error"]["message"])
            out["error"] = error
        return out

    async def send_event(self, event: dict[str, Any]) -> None:
        if not isinstance(event, dict) or not set(event) <= {"type", "payload"}:
            raise TypeError("send_event: expects a dict {'type', 'payload'?}")
        if not valid_name(event.get("type")):
            raise TypeError("send_event: type must be a str of 1..256 Unicode scalar values")
        args = self._args(type=event["type"])
        if event.get("payload") is not None:
            args["payload"] = _document(event["payload"], "send_event payload")
        await self._abi.call("workflow.sendEvent", args)

    async def terminate(self) -> None:
        await self._abi.call("workflow.terminate", self._args())

    sendEvent = send_event  # noqa: N815 - the JavaScript spelling


class WorkflowBinding:
    """``env.NAME`` of a workflowBinding (WF-18..27)."""

    def __init__(self, abi: Abi, name: str) -> None:
        self._abi, self._name = abi, name

    async def create(self, options: dict[str, Any] | None = None) -> WorkflowInstance:
        opts = options if options is not None else {}
        if not isinstance(opts, dict) or not set(opts) <= {"id", "params"}:
            raise TypeError("create: expects a dict {'id'?, 'params'?}")
        args: dict[str, Any] = {"binding": self._name}
        if opts.get("id") is not None:
            if not valid_name(opts["id"]):
                raise TypeError("create: id must be a str of 1..256 Unicode scalar values")
            args["id"] = opts["id"]
        if opts.get("params") is not None:
            args["params"] = _document(opts["params"], "create params")
        reply = await self._abi.call("workflow.create", args) or {}
        return WorkflowInstance(self._abi, self._name, str(reply.get("id")))

    async def get(self, instance_id: str) -> WorkflowInstance:
        if not valid_name(instance_id):
            raise TypeError("get: id must be a str of 1..256 Unicode scalar values")
        reply = await self._abi.call("workflow.get", {"binding": self._name, "id": instance_id}) or {}
        return WorkflowInstance(self._abi, self._name, str(reply.get("id")))


class Step:
    """The machinery behind ``step`` of one execution; all state is this object's, so nothing
    outlives the context. Run never gets it: it gets a :class:`StepApi` in front of it."""

    def __init__(self, abi: Abi, invocation: dict[str, Any], finish: Callable[[dict[str, Any]], None]) -> None:
        self._abi = abi
        self._finish = finish
        self._finished = False
        self._completed: dict[str, dict[str, Any]] = dict(invocation.get("completed") or {})
        self._pending_kinds: dict[str, str] = dict(invocation.get("pendingKinds") or {})
        self._active: str | None = None  # the one unsettled live step (WF-35)
        # WF-38: the Host's limits as of the context start; an effect beyond them waits for the Host.
        self._steps_left = _number(invocation.get("stepsLeft"))
        self._lifetime_ends_at = _number(invocation.get("lifetimeEndsAt"))
        self._begun = 0  # new step names begun in this context
        # WF-44/45: only errors raised here count as a genuine step_failed.
        self._issued: weakref.WeakSet[BaseException] = weakref.WeakSet()

    def _report(self, outcome: dict[str, Any]) -> None:
        if not self._finished:
            self._finished = True
            self._finish(outcome)

    async def _mismatch(self, message: str) -> Any:
        self._report({"kind": "errored", "reason": "step_definition_mismatch", "message": message})
        return await _never()

    def _error(self, name: str, message: str) -> HostError:
        exc = HostError(name, message)
        self._issued.add(exc)
        return exc

    def _replay(self, record: dict[str, Any]) -> Any:
        if record.get("ok"):
            return copy.deepcopy(record.get("result"))
        error = record.get("error") or {}
        raise self._error(str(error.get("name") or "step_failed"), str(error.get("message") or ""))

    async def _enter(self, kind: str, name: Any, fn: str) -> tuple[bool, Any]:
        """WF-34..37 in order; (True, value) when the call is answered without running the step."""
        if self._finished:
            return True, await _never()
        if not valid_name(name):
            raise TypeError(f"{fn}: name must be a str of 1..256 Unicode scalar values")
        if self._active is not None:
            return True, await self._mismatch(f'step "{name}" started while step "{self._active}" is unsettled')
        if name in self._completed:
            return True, self._replay(self._completed[name])
        prior = self._pending_kinds.get(name)
        if prior is not None and prior != kind:
            return True, await self._mismatch(f'step "{name}" was a {prior} step and is now used as {kind}')
        if prior is None:
            self._begun += 1
        return False, None

    async def _cleared(self, name: str) -> bool:
        """WF-38: no effect starts for a step the Host would refuse. Past the limits the context
        started with, the Host is asked first (`step.begin`); it decides, and past a limit it ends
        the instance and stops this context."""
        new = name not in self._pending_kinds
        if not (new and self._begun > self._steps_left) and _wall_clock() * 1000 < self._lifetime_ends_at:
            return True
        try:
            reply = await self._abi.call("step.begin", {"name": name})
        except HostError:
            reply = None
        if isinstance(reply, dict) and reply.get("action") == "resolve" and not self._finished:
            return True
        self._report({"kind": "suspended"})
        return False

    async def _live(self, kind: str, method: str, args: dict[str, Any], rejected: tuple[str, str] | None) -> Any:
        name = args["name"]
        self._active = name
        try:
            reply = await self._abi.call(method, args)
        except HostError:
            reply = None  # a limit or a fenced owner: the step stays pending, the Host stops us
        action = reply.get("action") if isinstance(reply, dict) else None
        if self._finished:
            return await _never()
        if action == "resolve":
            assert isinstance(reply, dict)
            doc = (
                (reply["result"] if "result" in reply else args.get("result")) if kind == "do" else reply.get("payload")
            )
            value = None if kind == "sleep" else doc
            self._completed[name] = {"ok": True, "result": value}
            self._active = None
            return copy.deepcopy(value)
        if action == "reject" and rejected is not None:
            assert isinstance(reply, dict)
            error_name, message = rejected[0], str(reply.get("message") or rejected[1])
            self._completed[name] = {"ok": False, "error": {"name": error_name, "message": message}}
            self._active = None
            raise self._error(error_name, message)
        self._report({"kind": "suspended"})
        return await _never()

    async def do(self, name: str, effect: Callable[[], Any], retry_policy: dict[str, Any] | None = None) -> Any:
        answered, value = await self._enter("do", name, "step.do")
        if answered:
            return value
        if not callable(effect):
            raise TypeError("step.do: effect must be a zero-argument callable")
        config = retry_config(retry_policy)
        self._active = name  # a step started inside the effect overlaps this one
        if not await self._cleared(name):
            return await _never()
        args: dict[str, Any] = {"name": name, "config": config}
        try:
            result = effect()
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                args["ok"] = True
            else:
                args.update(ok=True, result=loads(document(result)))
        except DocumentError as e:
            error = "document_too_large" if e.code == "document_too_large" else "TypeError"
            args.update(ok=False, error={"name": error, "message": f"step.do effect result: {e}"})
        except Exception as e:  # noqa: BLE001 - a failed attempt is data (WF-41)
            error_name = e.name if isinstance(e, HostError) else type(e).__name__
            args.update(ok=False, error={"name": error_name, "message": str(e)})
        if self._finished:
            return await _never()
        message = args["error"]["message"] if not args["ok"] else ""
        return await self._live("do", "step.do", args, ("step_failed", message))

    async def sleep(self, name: str, seconds: int) -> None:
        answered, value = await self._enter("sleep", name, "step.sleep")
        if answered:
            return None
        if not _int_in(seconds, 0, MAX_SLEEP_SECONDS):
            raise TypeError("step.sleep: seconds must be an int 0..31536000")
        await self._live("sleep", "step.sleep", {"name": name, "seconds": seconds}, None)

    async def wait_for_event(self, name: str, options: dict[str, Any]) -> Any:
        answered, value = await self._enter("wait", name, "step.wait_for_event")
        if answered:
            return value
        opts = _options(options, _WAIT_KEYS, "step.wait_for_event")
        if not valid_name(opts.get("type")):
            raise TypeError("step.wait_for_event: type must be a str of 1..256 Unicode scalar values")
        if not _int_in(opts.get("timeoutSeconds"), 1, MAX_SLEEP_SECONDS):
            raise TypeError("step.wait_for_event: timeout_seconds must be an int 1..31536000")
        args = {"name": name, "type": opts["type"], "timeoutSeconds": opts["timeoutSeconds"]}
        timeout = f'no "{opts["type"]}" event within {opts["timeoutSeconds"]} s'
        return await self._live("wait", "step.waitForEvent", args, ("wait_timeout", timeout))


# Behind each StepApi its Step, kept out of the object run gets.
_BEHIND: weakref.WeakKeyDictionary[StepApi, Step] = weakref.WeakKeyDictionary()


class StepApi:
    """``step`` as run gets it (WF-34): the Form's three operations by their Python names (and
    ``waitForEvent``), nothing else: no attribute, no ``__dict__``, no method that reports an
    outcome. It is the Form's surface, not a wall: Python has no language sandbox, and a worker
    walking ``gc`` or frames can reach the machinery, so what the outcome is worth is judged by the
    Host, against the step failures it committed (``sumi.workflow.rules._decide``)."""

    __slots__ = ("__weakref__",)

    async def do(self, name: str, effect: Callable[[], Any], retry_policy: dict[str, Any] | None = None) -> Any:
        return await _BEHIND[self].do(name, effect, retry_policy)

    async def sleep(self, name: str, seconds: int) -> None:
        await _BEHIND[self].sleep(name, seconds)

    async def wait_for_event(self, name: str, options: dict[str, Any]) -> Any:
        return await _BEHIND[self].wait_for_event(name, options)

    waitForEvent = wait_for_event  # noqa: N815 - the JavaScript spelling


def _api(step: Step) -> StepApi:
    api = StepApi()
    _BEHIND[api] = step
    return api


async def run_workflow(abi: Abi, main: Any, invocation: dict[str, Any], env: Any) -> dict[str, Any]:
    """One execution: ``cls(env).run(event, step)`` once; the outcome as the wire wants it (WF-29..45)."""
    outcome: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    step = Step(abi, invocation, outcome.set_result)
    abi.watch_step(lambda: step._active)

    async def run() -> Any:
        cls: Any = getattr(main, str(invocation.get("className")), None)
        if not is_workflow_class(cls):
            raise TypeError(f"main module has no workflow class {invocation.get('className')!r} with a run method")
        event: dict[str, Any] = {"instanceId": str(invocation.get("instanceId"))}
        if invocation.get("params") is not None:
            event["params"] = invocation["params"]
        workflow: Any = cls  # narrowed to type[object] by isclass; it is the Version's class
        result = workflow(env).run(event, _api(step))
        return await result if inspect.isawaitable(result) else result

    task = asyncio.create_task(run())
    await asyncio.wait({task, outcome}, return_when=asyncio.FIRST_COMPLETED)
    if not outcome.done():
        step._report(_judge(step, task))
    abi.halted = True  # nothing more of this context reaches the Host
    return outcome.result()


def _judge(step: Step, task: asyncio.Task[Any]) -> dict[str, Any]:
    if step._active is not None:
        return {
            "kind": "errored",
            "reason": "step_definition_mismatch",
            "message": f'run settled while step "{step._active}" is unsettled',
        }
    exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
    if exc is None:
        value = task.result()
        if value is None:
            return {"kind": "complete"}
        try:
            return {"kind": "complete", "output": loads(document(value))}
        except DocumentError as e:
            return {"kind": "errored", "reason": "run_threw", "message": f"run must return a document or None: {e}"}
    if isinstance(exc, HostError) and exc in step._issued and exc.name == "step_failed":
        return {"kind": "errored", "reason": "step_failed", "message": exc.message}
    name = exc.name if isinstance(exc, HostError) else type(exc).__name__
    return {"kind": "errored", "reason": "run_threw", "message": f"{name}: {exc}"}


def _number(value: Any) -> float:
    """A limit from the invocation; none (an older Host) is no limit here: the Host still judges."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.inf
