"""The DurableWorkflow runtime ABI (contract "Runtime ABI"), shared by both runtimes.

Each test drives one execution directly with a scripted Host (no Kafka): the invocation says which
steps are completed, the Host's replies say what happens to live steps, and the outcome is checked.
"""

from __future__ import annotations

import pytest
from workflow_testkit import (
    REJECT,
    RESOLVE,
    SUSPEND,
    StepHost,
    Workflows,
    done,
    failed,
    invocation,
    js_run,
    py_run,
    wf,
)

from sumi.runtime import HostError, WorkflowInvocation

__all__ = ["wf"]  # the fixture, parametrized over javascript and python

DEFAULT_CONFIG = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200}


async def test_run_gets_instance_id_and_params_and_returns_its_output(wf: Workflows) -> None:  # WF-29, WF-30
    run = await wf.run(
        js_run("return { id: event.instanceId, params: event.params, keys: Object.keys(event).sort() };"),
        py_run('return {"id": event["instanceId"], "params": event["params"], "keys": sorted(event)}'),
        invocation({"a": [1, "x", None]}),
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {"id": "inst-1", "params": {"a": [1, "x", None]}, "keys": ["instanceId", "params"]}


async def test_absent_params_are_absent_and_undefined_output_is_none(wf: Workflows) -> None:  # WF-29, WF-30, DOC-5
    run = await wf.run(
        js_run("if ('params' in event) throw new Error('params present'); return undefined;"),
        py_run('if "params" in event:\n    raise ValueError("params present")\nreturn None'),
    )
    assert run.outcome.kind == "complete" and run.outcome.output is None, run.outcome


@pytest.mark.parametrize(
    ("js", "py"),
    [("return 5;", "return 5"), ("return [1];", "return [1]"), ("return null;", "return float('nan')")],
)
async def test_run_returning_a_non_document_is_run_threw(wf: Workflows, js: str, py: str) -> None:  # WF-30, DOC-1
    run = await wf.run(js_run(js), py_run(py))
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


async def test_a_live_do_runs_its_effect_once_and_commits_the_attempt(wf: Workflows) -> None:  # WF-39, WF-40, WF-41
    run = await wf.run(
        js_run("""
          let n = 0;
          const r = await step.do('load', async () => { n++; return { rows: 3 }; });
          return { r, n };"""),
        py_run("""
n = []
async def effect():
    n.append(1)
    return {"rows": 3}
r = await step.do("load", effect)
return {"r": r, "n": len(n)}"""),
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {"r": {"rows": 3}, "n": 1}
    assert run.host.calls == [
        ("step.do", {"name": "load", "config": DEFAULT_CONFIG, "ok": True, "result": {"rows": 3}})
    ]


async def test_retry_policy_is_sent_with_defaults_filled(wf: Workflows) -> None:  # WF-40
    run = await wf.run(
        js_run("await step.do('a', () => undefined, { maxAttempts: 5, backoff: 'exponential' });"),
        py_run('await step.do("a", lambda: None, {"max_attempts": 5, "backoff": "exponential"})'),
    )
    assert run.outcome.kind == "complete", run.outcome
    config = {**DEFAULT_CONFIG, "maxAttempts": 5, "backoff": "exponential"}
    assert run.host.calls == [("step.do", {"name": "a", "config": config, "ok": True})]


async def test_completed_steps_replay_without_effect_or_host_call(wf: Workflows) -> None:  # WF-36, WF-39
    inv = invocation(completed=(done("a", result={"x": 1}), done("nap", "sleep"), done("ev", "wait", {"by": "bo"})))
    run = await wf.run(
        js_run("""
          let effects = 0;
          const a = await step.do('a', () => { effects++; return { x: 2 }; });
          const again = await step.do('a', 'ignored: arguments of a completed name are not used');
          const slept = await step.sleep('nap', 'ignored');
          const ev = await step.waitForEvent('ev', 42);
          return { a, again, slept: slept === undefined, ev, effects };"""),
        py_run("""
effects = []
a = await step.do("a", lambda: effects.append(1) or {"x": 2})
again = await step.do("a", "ignored: arguments of a completed name are not used")
slept = await step.sleep("nap", "ignored")
ev = await step.wait_for_event("ev", 42)
return {"a": a, "again": again, "slept": slept is None, "ev": ev, "effects": len(effects)}"""),
        inv,
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {"a": {"x": 1}, "again": {"x": 1}, "slept": True, "ev": {"by": "bo"}, "effects": 0}
    assert run.host.calls == []


async def test_a_live_step_completed_in_this_context_replays_on_reuse(wf: Workflows) -> None:  # WF-36
    run = await wf.run(
        js_run("""
          const a = await step.do('a', () => ({ v: 1 }));
          const b = await step.do('a', () => ({ v: 2 }));
          return { a, b };"""),
        py_run("""
a = await step.do("a", lambda: {"v": 1})
b = await step.do("a", lambda: {"v": 2})
return {"a": a, "b": b}"""),
    )
    assert run.outcome.output == {"a": {"v": 1}, "b": {"v": 1}}, run.outcome
    assert run.host.steps_called() == [("step.do", "a")]


async def test_a_completed_failure_replays_as_a_genuine_step_failed(wf: Workflows) -> None:  # WF-36, WF-45
    inv = invocation(completed=(failed("a", message="it broke"),))
    caught = await wf.run(
        js_run("""
          try { await step.do('a', () => ({})); } catch (e) { return { name: e.name, message: e.message }; }"""),
        py_run("""
try:
    await step.do("a", lambda: {})
except Exception as e:
    return {"name": e.name, "message": e.message}"""),
        inv,
    )
    assert caught.outcome.output == {"name": "step_failed", "message": "it broke"}, caught.outcome
    uncaught = await wf.run(js_run("await step.do('a', () => ({}));"), py_run('await step.do("a", lambda: {})'), inv)
    assert (uncaught.outcome.kind, uncaught.outcome.reason) == ("errored", "step_failed"), uncaught.outcome
    assert uncaught.outcome.message == "it broke"
    assert caught.host.calls == uncaught.host.calls == []


async def test_a_failed_attempt_is_committed_and_the_final_failure_rejects(wf: Workflows) -> None:  # WF-41, WF-45
    host = StepHost(steps={"a": {"action": "reject", "message": "bad input"}})
    run = await wf.run(
        js_run("await step.do('a', () => { throw new RangeError('bad input'); });"),
        py_run('def effect():\n    raise ValueError("bad input")\nawait step.do("a", effect)'),
        host=host,
    )
    assert (run.outcome.kind, run.outcome.reason, run.outcome.message) == ("errored", "step_failed", "bad input")
    name = "RangeError" if wf.lang == "js" else "ValueError"
    assert host.calls == [
        (
            "step.do",
            {"name": "a", "config": DEFAULT_CONFIG, "ok": False, "error": {"name": name, "message": "bad input"}},
        )
    ]


async def test_a_handled_step_failure_can_still_complete(wf: Workflows) -> None:  # WF-45
    run = await wf.run(
        js_run("""
          try { await step.do('a', () => { throw new Error('x'); }); } catch (e) { return { handled: e.name }; }"""),
        py_run("""
def effect():
    raise RuntimeError("x")
try:
    await step.do("a", effect)
except Exception as e:
    return {"handled": e.name}"""),
        host=StepHost(steps={"a": REJECT}),
    )
    assert run.outcome.kind == "complete" and run.outcome.output == {"handled": "step_failed"}, run.outcome


async def test_a_copied_step_failed_name_is_run_threw(wf: Workflows) -> None:  # WF-44, WF-45
    run = await wf.run(
        js_run("const e = new Error('fake'); Object.defineProperty(e, 'name', { value: 'step_failed' }); throw e;"),
        py_run('raise HostError("step_failed", "fake")', prelude="from sumi.runtime import HostError\n"),
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


async def test_rethrowing_the_same_step_error_keeps_its_provenance(wf: Workflows) -> None:  # WF-44
    run = await wf.run(
        js_run("""
          let saved;
          try { await step.do('a', () => { throw new Error('x'); }); } catch (e) { saved = e; }
          await step.do('b', () => ({}));
          throw saved;"""),
        py_run("""
saved = None
def effect():
    raise RuntimeError("x")
try:
    await step.do("a", effect)
except Exception as e:
    saved = e
await step.do("b", lambda: {})
raise saved"""),
        host=StepHost(steps={"a": REJECT}),
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "step_failed"), run.outcome


async def test_an_uncaught_wait_timeout_is_run_threw(wf: Workflows) -> None:  # WF-43, WF-45
    run = await wf.run(
        js_run("await step.waitForEvent('w', { type: 'approved', timeoutSeconds: 60 });"),
        py_run('await step.wait_for_event("w", {"type": "approved", "timeout_seconds": 60})'),
        host=StepHost(steps={"w": REJECT}),
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome
    assert "wait_timeout" in (run.outcome.message or "")
    assert run.host.calls == [("step.waitForEvent", {"name": "w", "type": "approved", "timeoutSeconds": 60})]


async def test_wait_resolves_to_the_payload_itself(wf: Workflows) -> None:  # WF-39, WF-43
    host = StepHost(steps={"w1": {"action": "resolve", "payload": {"by": "ann"}}, "w2": RESOLVE})
    run = await wf.run(
        js_run("""
          const p = await step.waitForEvent('w1', { type: 't', timeoutSeconds: 1 });
          const q = await step.waitForEvent('w2', { type: 't', timeoutSeconds: 31536000 });
          return { p, none: q === undefined };"""),
        py_run("""
p = await step.wait_for_event("w1", {"type": "t", "timeoutSeconds": 1})
q = await step.waitForEvent("w2", {"type": "t", "timeout_seconds": 31536000})
return {"p": p, "none": q is None}"""),
        host=host,
    )
    assert run.outcome.output == {"p": {"by": "ann"}, "none": True}, run.outcome


async def test_sleep_zero_and_sleep_resolve_to_nothing(wf: Workflows) -> None:  # WF-39, WF-42
    run = await wf.run(
        js_run("""
          const a = await step.sleep('now', 0);
          const b = await step.sleep('max', 31536000);
          return { u: a === undefined && b === undefined };"""),
        py_run("""
a = await step.sleep("now", 0)
b = await step.sleep("max", 31536000)
return {"u": a is None and b is None}"""),
    )
    assert run.outcome.output == {"u": True}, run.outcome
    assert run.host.calls == [
        ("step.sleep", {"name": "now", "seconds": 0}),
        ("step.sleep", {"name": "max", "seconds": 31536000}),
    ]


@pytest.mark.parametrize("method", ["sleep", "wait", "do-retry", "host-rejects"])
async def test_suspend_leaves_the_step_pending_and_the_context_stoppable(
    wf: Workflows, method: str
) -> None:  # WF-41..43, WF-38, WF-46
    js_call = {
        "sleep": "await step.sleep('s', 60);",
        "wait": "await step.waitForEvent('s', { type: 't', timeoutSeconds: 60 });",
        "do-retry": "await step.do('s', () => { throw new Error('again'); }, { maxAttempts: 3 });",
        "host-rejects": "await step.do('s', () => ({}));",
    }[method]
    py_call = {
        "sleep": 'await step.sleep("s", 60)',
        "wait": 'await step.wait_for_event("s", {"type": "t", "timeout_seconds": 60})',
        "do-retry": 'def effect():\n    raise RuntimeError("again")\nawait step.do("s", effect, {"max_attempts": 3})',
        "host-rejects": 'await step.do("s", lambda: {})',
    }[method]
    reply = HostError("step_limit_exceeded", "1024 steps") if method == "host-rejects" else SUSPEND
    host = StepHost(steps={"s": reply})
    run = await wf.run(
        js_run("try {\n" + js_call + "\n} catch (e) { return { caught: String(e) }; }\nreturn { after: true };"),
        py_run(
            "try:\n"
            + "\n".join("    " + line for line in py_call.splitlines())
            + '\nexcept BaseException as e:\n    return {"caught": repr(e)}\nreturn {"after": True}'
        ),
        host=host,
        keep=True,
    )
    assert run.outcome.kind == "suspended", run.outcome
    ctx = wf.last_context
    assert getattr(ctx, "stop_reason", None) is None  # still running, its Promise pending
    await ctx.stop()
    assert getattr(ctx, "stop_reason", None) is not None
    assert len(host.calls) == 1


async def test_module_state_is_fresh_in_every_context(wf: Workflows) -> None:  # WF-32
    js = js_run("counter.n++; return { n: counter.n };", prelude="const counter = { n: 0 };")
    py = py_run('COUNTER.append(1)\nreturn {"n": len(COUNTER)}', prelude="COUNTER = []\n")
    outputs = [(await wf.run(js, py)).outcome.output for _ in range(2)]
    assert outputs == [{"n": 1}, {"n": 1}]


async def test_load_error_and_missing_class_are_run_threw(wf: Workflows) -> None:  # WF-28, WF-29
    broken = await wf.run("export class W { run( }", "class W(:\n")
    assert (broken.outcome.kind, broken.outcome.reason) == ("errored", "run_threw"), broken.outcome
    missing = await wf.run(
        js_run("return {};"), py_run("return {}"), WorkflowInvocation("Nope", "inst-1", None, {}, {})
    )
    assert (missing.outcome.kind, missing.outcome.reason) == ("errored", "run_threw"), missing.outcome
