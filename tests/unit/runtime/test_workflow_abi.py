"""The DurableWorkflow runtime ABI (contract "Runtime ABI"), shared by both runtimes.

Each test drives one execution directly with a scripted Host (no Kafka): the invocation says which
steps are completed, the Host's replies say what happens to live steps, and the outcome is checked.
"""

from __future__ import annotations

import asyncio

import pytest

from sumi.runtime import EnvSpec, HostError, Limits, WorkflowInvocation
from tests.unit.runtime.runtime_testkit import batch, js_queue, py_queue
from tests.unit.runtime.workflow_testkit import (
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
    slow,
    wf,
)

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


async def test_replay_reruns_the_code_outside_steps_and_only_that(wf: Workflows) -> None:  # WF-31, WF-36
    # The Host replays by running module evaluation, the constructor and run() again from the
    # top in a fresh context, feeding completed steps their recorded results: code outside steps
    # sees the same history every time (so deterministic code computes the same), effects do not rerun.
    inv = invocation(completed=(done("a", result={"x": 20}),))
    js = js_run(
        """
          const a = await step.do('a', () => { ran.effect++; return { x: 0 }; });
          return { doubled: a.x * 2, module: ran.module, effect: ran.effect };""",
        prelude="const ran = { module: 1, effect: 0 };",
    )
    py = py_run(
        """
a = await step.do("a", lambda: RAN.append("effect") or {"x": 0})
return {"doubled": a["x"] * 2, "module": RAN.count("module"), "effect": RAN.count("effect")}""",
        prelude='RAN = ["module"]\n',
    )
    runs = [await wf.run(js, py, inv) for _ in range(3)]
    assert [run.outcome.output for run in runs] == [{"doubled": 40, "module": 1, "effect": 0}] * 3
    assert all(run.host.calls == [] for run in runs)


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


# ---- argument validation: TypeError before any Host call (WF-34, WF-37, WF-40, WF-42, WF-43) ----

JS_BAD_CALLS = [
    "step.do('', () => ({}))",
    "step.do('x'.repeat(257), () => ({}))",
    "step.do('\\ud800', () => ({}))",
    "step.do(7, () => ({}))",
    "step.do('a', 'not a function')",
    "step.do('a', () => ({}), 3)",
    "step.do('a', () => ({}), {})",
    "step.do('a', () => ({}), { maxAttempts: 0 })",
    "step.do('a', () => ({}), { maxAttempts: 101 })",
    "step.do('a', () => ({}), { maxAttempts: 1.5 })",
    "step.do('a', () => ({}), { maxAttempts: 2, backoff: 'linear' })",
    "step.do('a', () => ({}), { maxAttempts: 2, initialDelaySeconds: 43201 })",
    "step.do('a', () => ({}), { maxAttempts: 2, maxDelaySeconds: -1 })",
    "step.do('a', () => ({}), { maxAttempts: 2, retries: 1 })",
    "step.sleep('s', -1)",
    "step.sleep('s', 1.5)",
    "step.sleep('s', 31536001)",
    "step.sleep('s', '10')",
    "step.waitForEvent('w')",
    "step.waitForEvent('w', { type: 't' })",
    "step.waitForEvent('w', { type: 't', timeoutSeconds: 0 })",
    "step.waitForEvent('w', { type: 't', timeoutSeconds: 31536001 })",
    "step.waitForEvent('w', { type: '', timeoutSeconds: 5 })",
    "step.waitForEvent('w', { type: 't', timeoutSeconds: 5, extra: 1 })",
]
PY_BAD_CALLS = [
    'step.do("", lambda: {})',
    'step.do("x" * 257, lambda: {})',
    'step.do("\\ud800", lambda: {})',
    "step.do(7, lambda: {})",
    'step.do("a", "not a function")',
    'step.do("a", lambda: {}, 3)',
    'step.do("a", lambda: {}, {})',
    'step.do("a", lambda: {}, {"max_attempts": 0})',
    'step.do("a", lambda: {}, {"max_attempts": 101})',
    'step.do("a", lambda: {}, {"max_attempts": 1.5})',
    'step.do("a", lambda: {}, {"max_attempts": 2, "backoff": "linear"})',
    'step.do("a", lambda: {}, {"max_attempts": 2, "initial_delay_seconds": 43201})',
    'step.do("a", lambda: {}, {"max_attempts": 2, "maxDelaySeconds": -1})',
    'step.do("a", lambda: {}, {"max_attempts": 2, "retries": 1})',
    'step.sleep("s", -1)',
    'step.sleep("s", 1.5)',
    'step.sleep("s", 31536001)',
    'step.sleep("s", "10")',
    'step.wait_for_event("w", None)',
    'step.wait_for_event("w", {"type": "t"})',
    'step.wait_for_event("w", {"type": "t", "timeout_seconds": 0})',
    'step.wait_for_event("w", {"type": "t", "timeout_seconds": 31536001})',
    'step.wait_for_event("w", {"type": "", "timeout_seconds": 5})',
    'step.wait_for_event("w", {"type": "t", "timeout_seconds": 5, "extra": 1})',
]


@pytest.mark.parametrize("case", range(len(JS_BAD_CALLS)))
async def test_bad_arguments_of_unfinished_names_are_type_errors(wf: Workflows, case: int) -> None:  # WF-37, WF-40..43
    run = await wf.run(
        js_run(f"try {{ await {JS_BAD_CALLS[case]}; }} catch (e) {{ return {{ name: e.name }}; }} return {{}};"),
        py_run(
            f"try:\n    await {PY_BAD_CALLS[case]}\n"
            'except Exception as e:\n    return {"name": type(e).__name__}\nreturn {}'
        ),
    )
    assert run.outcome.kind == "complete" and run.outcome.output == {"name": "TypeError"}, run.outcome
    assert run.host.calls == []


async def test_names_count_unicode_scalar_values(wf: Workflows) -> None:  # WF-34
    run = await wf.run(
        js_run("""
          await step.do('\\u{1F600}'.repeat(256), () => ({}));
          await step.sleep('x'.repeat(256), 0);
          return {};"""),
        py_run("""
await step.do("\\U0001F600" * 256, lambda: {})
await step.sleep("x" * 256, 0)
return {}"""),
    )
    assert run.outcome.kind == "complete", run.outcome
    assert [name for _, name in run.host.steps_called()] == ["\U0001f600" * 256, "x" * 256]


async def test_a_completed_name_is_still_validated_first(wf: Workflows) -> None:  # WF-36
    # The record under "" can never exist, but a bad name must be a TypeError even if it did.
    inv = invocation(completed=(done(""),))
    run = await wf.run(
        js_run("try { await step.do('', () => ({})); } catch (e) { return { name: e.name }; }"),
        py_run(
            'try:\n    await step.do("", lambda: {})\nexcept Exception as e:\n    return {"name": type(e).__name__}'
        ),
        inv,
    )
    assert run.outcome.output == {"name": "TypeError"}, run.outcome


# ---- step_definition_mismatch: uncatchable (WF-35) ----


@pytest.mark.parametrize("case", ["overlap", "inside-effect", "run-settles", "kind-reuse"])
async def test_step_definition_mismatch_is_uncatchable(wf: Workflows, case: str) -> None:  # WF-35
    js = {
        "overlap": "await Promise.all([step.do('a', () => ({})), step.do('b', () => ({}))]);",
        "inside-effect": "await step.do('a', async () => { await step.sleep('inner', 0); return {}; });",
        "run-settles": "step.sleep('s', 10); return {};",
        "kind-reuse": "await step.do('p', () => ({}));",
    }[case]
    py = {
        "overlap": 'await asyncio.gather(step.do("a", lambda: {}), step.do("b", lambda: {}))',
        "inside-effect": (
            'async def effect():\n    await step.sleep("inner", 0)\n    return {}\nawait step.do("a", effect)'
        ),
        "run-settles": 'asyncio.ensure_future(step.sleep("s", 10))\nawait asyncio.sleep(0)\nreturn {}',
        "kind-reuse": 'await step.do("p", lambda: {})',
    }[case]
    py_body = "try:\n" + "\n".join("    " + line for line in py.splitlines())
    py_body += '\nexcept BaseException as e:\n    return {"caught": repr(e)}\nreturn {"after": True}'
    run = await wf.run(
        js_run("try {\n" + js + "\n} catch (e) { return { caught: String(e) }; }\nreturn { after: true };"),
        py_run(py_body, prelude="import asyncio\n"),
        invocation(pending={"p": "sleep"}),
        host=StepHost(steps={"s": slow(SUSPEND)}),
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "step_definition_mismatch"), run.outcome
    why = {
        "overlap": 'step "b" started while step "a" is unsettled',
        "inside-effect": 'step "inner" started while step "a" is unsettled',
        "run-settles": 'run settled while step "s" is unsettled',
        "kind-reuse": 'step "p" was a sleep step and is now used as do',
    }[case]
    assert run.outcome.message == why


async def test_an_unfinished_name_of_the_same_kind_runs(wf: Workflows) -> None:  # WF-35, WF-37
    run = await wf.run(
        js_run("await step.do('p', () => ({ ok: 1 }), { maxAttempts: 3 }); return {};"),
        py_run('await step.do("p", lambda: {"ok": 1}, {"maxAttempts": 3})\nreturn {}'),
        invocation(pending={"p": "do"}),
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.host.steps_called() == [("step.do", "p")]


# ---- the effect's result (forms.md "Decisions where the Forms leave room", DOC-1..6) ----


@pytest.mark.parametrize(
    ("js", "py", "error"),
    [
        ("return 5;", "return 5", "TypeError"),
        ("return [1, 2];", "return [1, 2]", "TypeError"),
        ("return { f() {} };", "return {'f': print}", "TypeError"),
        ("return { big: 1n };", "return {'t': (1, 2)}", "TypeError"),
        ("return { s: 'x'.repeat(1048576) };", "return {'s': 'x' * 1048576}", "document_too_large"),
    ],
)
async def test_an_effect_result_that_is_not_a_document_fails_the_attempt(
    wf: Workflows, js: str, py: str, error: str
) -> None:  # DOC-1..3, WF-40
    run = await wf.run(
        js_run(f"await step.do('a', () => {{ {js} }}); return {{}};"),
        py_run(f"def effect():\n    {py}\nawait step.do('a', effect)\nreturn {{}}"),
        host=StepHost(steps={"a": REJECT}),
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "step_failed"), run.outcome
    (method, args), *_ = run.host.calls
    assert method == "step.do" and args["ok"] is False and args["error"]["name"] == error, args


# ---- the Caller Binding env.NAME (WF-18..27) ----

WF_ENV = EnvSpec({"MODE": "test"}, (), ("REPORTS",))


async def test_binding_calls_reach_the_host_as_the_contract_says(wf: Workflows) -> None:  # WF-18, WF-19, WF-21, WF-23
    run = await wf.run(
        js_run("""
          const env = this.env;
          return await step.do('drive', async () => {
            const a = await env.REPORTS.create({ id: 'r-1', params: { q: 1 } });
            const b = await env.REPORTS.create();
            const c = await env.REPORTS.get('r-1');
            const st = await c.status();
            const sent = await c.sendEvent({ type: 'approved', payload: { by: 'ann' } });
            await c.sendEvent({ type: 'ping' });
            const t = await c.terminate();
            return { ids: [a.id, b.id, c.id], st, sent: sent === undefined, t: t === undefined, mode: env.MODE };
          });"""),
        py_run("""
env = self.env
async def drive():
    a = await env.REPORTS.create({"id": "r-1", "params": {"q": 1}})
    b = await env.REPORTS.create()
    c = await env.REPORTS.get("r-1")
    st = await c.status()
    sent = await c.send_event({"type": "approved", "payload": {"by": "ann"}})
    await c.sendEvent({"type": "ping"})
    t = await c.terminate()
    return {"ids": [a.id, b.id, c.id], "st": st, "sent": sent is None, "t": t is None, "mode": env.MODE}
return await step.do("drive", drive)"""),
        env=WF_ENV,
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {
        "ids": ["generated-1", "generated-1", "r-1"],
        "st": {"status": "complete", "output": {"n": 1}},
        "sent": True,
        "t": True,
        "mode": "test",
    }
    b = {"binding": "REPORTS"}
    assert run.host.calls[:-1] == [
        ("workflow.create", {**b, "id": "r-1", "params": {"q": 1}}),
        ("workflow.create", b),
        ("workflow.get", {**b, "id": "r-1"}),
        ("workflow.status", {**b, "id": "r-1"}),
        ("workflow.sendEvent", {**b, "id": "r-1", "type": "approved", "payload": {"by": "ann"}}),
        ("workflow.sendEvent", {**b, "id": "r-1", "type": "ping"}),
        ("workflow.terminate", {**b, "id": "r-1"}),
    ]


async def test_binding_rejections_are_errors_named_by_the_code(wf: Workflows) -> None:  # WF-19, WF-20, WF-27
    host = StepHost(
        methods={
            "workflow.create": HostError("instance_exists", "r-1 exists"),
            "workflow.get": HostError("unknown_instance", "no r-9"),
            "workflow.status": {"status": "errored", "error": {"reason": "step_failed", "message": "x"}},
            "workflow.sendEvent": HostError("backend_unavailable", "down"),
        }
    )
    run = await wf.run(
        js_run("""
          const names = [];
          for (const f of [() => this.env.REPORTS.create({ id: 'r-1' }), () => this.env.REPORTS.get('r-9')]) {
            try { await f(); } catch (e) { names.push(e.name); }
          }
          return { names };"""),
        py_run("""
names = []
for f in (lambda: self.env.REPORTS.create({"id": "r-1"}), lambda: self.env.REPORTS.get("r-9")):
    try:
        await f()
    except Exception as e:
        names.append(e.name)
return {"names": names}"""),
        env=WF_ENV,
        host=host,
    )
    assert run.outcome.output == {"names": ["instance_exists", "unknown_instance"]}, run.outcome


@pytest.mark.parametrize(
    ("js", "py", "error"),
    [
        ("env.REPORTS.create({ params: [1] })", 'env.REPORTS.create({"params": [1]})', "invalid_params"),
        (
            "env.REPORTS.create({ params: { s: 'x'.repeat(1048576) } })",
            'env.REPORTS.create({"params": {"s": "x" * 1048576}})',
            "document_too_large",
        ),
        ("env.REPORTS.create({ id: '' })", 'env.REPORTS.create({"id": ""})', "TypeError"),
        ("env.REPORTS.create({ idd: 'x' })", 'env.REPORTS.create({"idd": "x"})', "TypeError"),
        ("env.REPORTS.get(5)", "env.REPORTS.get(5)", "TypeError"),
        (
            "(await env.REPORTS.get('a')).sendEvent({ type: 'x'.repeat(257) })",
            '(await env.REPORTS.get("a")).send_event({"type": "x" * 257})',
            "TypeError",
        ),
        (
            "(await env.REPORTS.get('a')).sendEvent({ type: 't', payload: 'text' })",
            '(await env.REPORTS.get("a")).send_event({"type": "t", "payload": "text"})',
            "invalid_params",
        ),
    ],
)
async def test_bad_binding_arguments_never_reach_the_host(
    wf: Workflows, js: str, py: str, error: str
) -> None:  # WF-19, WF-23, DOC-1
    run = await wf.run(
        js_run(f"const env = this.env; try {{ await {js}; }} catch (e) {{ return {{ name: e.name }}; }} return {{}};"),
        py_run(
            f"env = self.env\ntry:\n    await {py}\n"
            'except Exception as e:\n    return {"name": getattr(e, "name", type(e).__name__)}\nreturn {}'
        ),
        env=WF_ENV,
    )
    assert run.outcome.output == {"name": error}, run.outcome
    assert [m for m, _ in run.host.calls if m != "workflow.get"] == []


async def test_status_reports_errors_and_omits_absent_parts(wf: Workflows) -> None:  # WF-21, WF-22
    host = StepHost(methods={"workflow.status": {"status": "errored", "error": {"reason": "step_failed"}}})
    run = await wf.run(
        js_run("return await (await this.env.REPORTS.get('a')).status();"),
        py_run('return await (await self.env.REPORTS.get("a")).status()'),
        env=WF_ENV,
        host=host,
    )
    assert run.outcome.output == {"status": "errored", "error": {"reason": "step_failed"}}, run.outcome


async def test_nothing_reaches_the_host_after_the_outcome(wf: Workflows) -> None:  # WF-46
    run = await wf.run(
        js_run(
            "setTimeout(() => { step.do('late', () => ({})); this.env.REPORTS.create(); }, 50);"
            "await step.sleep('s', 60);"
        ),
        py_run(
            """
async def late():
    await asyncio.sleep(0.05)
    asyncio.ensure_future(step.do("late", lambda: {}))
    await self.env.REPORTS.create()
asyncio.ensure_future(late())
await step.sleep("s", 60)""",
            prelude="import asyncio\n",
        ),
        env=WF_ENV,
        host=StepHost(steps={"s": SUSPEND}),
        keep=True,
    )
    assert run.outcome.kind == "suspended", run.outcome
    await asyncio.sleep(0.3)
    await wf.last_context.stop()
    assert run.host.calls == [("step.sleep", {"name": "s", "seconds": 60})]


async def test_workflow_bindings_are_available_to_queue_handlers(wf: Workflows) -> None:  # WF-18
    host = StepHost()
    body = {
        "js": "const i = await env.REPORTS.create({ params: { n: batch.messages.length } }); await i.status();",
        "py": 'i = await env.REPORTS.create({"params": {"n": len(batch.messages)}})\nawait i.status()',
    }[wf.lang]
    source = js_queue(body) if wf.lang == "js" else py_queue(body)
    ctx = await wf.runtime.start_context(wf.modules(source, source), wf.main, Limits(cpu_ms=2000), host)
    result = await ctx.invoke_queue(batch(), WF_ENV, host)
    await ctx.stop()
    assert result.ok, result
    assert host.calls == [
        ("workflow.create", {"binding": "REPORTS", "params": {"n": 2}}),
        ("workflow.status", {"binding": "REPORTS", "id": "generated-1"}),
    ]


async def test_cpu_limit_in_a_run_stops_the_context(wf: Workflows) -> None:  # forms.md limits, WF-46
    host = StepHost()
    modules = wf.modules(js_run("for (;;) {}"), py_run("while True:\n    pass"))
    ctx = await wf.runtime.start_context(modules, wf.main, Limits(cpu_ms=300), host)
    outcome = await asyncio.wait_for(ctx.invoke_workflow(invocation(), EnvSpec(), host), 30)
    assert (outcome.kind, outcome.reason) == ("stopped", "cpu_limit"), outcome
    assert ctx.stop_reason == "cpu_limit"


async def test_a_replay_in_the_same_context_is_unaffected_by_mutations(wf: Workflows) -> None:  # WF-36
    run = await wf.run(
        js_run("""
          const a = await step.do('a', () => ({ v: [1] }));
          a.v.push(2);
          const w = await step.waitForEvent('w', { type: 't', timeoutSeconds: 5 });
          w.by = 'changed';
          return { again: await step.do('a', () => ({})), w: await step.waitForEvent('w', 1) };"""),
        py_run("""
a = await step.do("a", lambda: {"v": [1]})
a["v"].append(2)
w = await step.wait_for_event("w", {"type": "t", "timeout_seconds": 5})
w["by"] = "changed"
return {"again": await step.do("a", lambda: {}), "w": await step.wait_for_event("w", 1)}"""),
        host=StepHost(steps={"w": {"action": "resolve", "payload": {"by": "ann"}}}),
    )
    assert run.outcome.output == {"again": {"v": [1]}, "w": {"by": "ann"}}, run.outcome


async def test_a_final_failure_without_a_message_still_rejects(wf: Workflows) -> None:  # WF-41, WF-45
    run = await wf.run(
        js_run("await step.do('a', () => { throw new Error(''); });"),
        py_run('def effect():\n    raise RuntimeError("")\nawait step.do("a", effect)'),
        host=StepHost(steps={"a": REJECT}),
    )
    assert (run.outcome.kind, run.outcome.reason, run.outcome.message) == ("errored", "step_failed", ""), run.outcome


# Three effects, each leaving its name in `ran` (returned when the run completes).
LIMITED = (
    js_run("""
      const ran = [];
      for (const name of ['a', 'b', 'c']) await step.do(name, async () => { ran.push(name); });
      return { ran };"""),
    py_run("""
ran = []
for name in ["a", "b", "c"]:
    await step.do(name, lambda name=name: ran.append(name))
return {"ran": ran}"""),
)


async def test_no_effect_starts_past_the_step_limit_without_the_host(wf: Workflows) -> None:  # WF-38
    # One new name left, and "b" already begun (a retry): "c" would be the step past the limit.
    host = StepHost(methods={"step.begin": HostError("step_limit_exceeded", "a Host limit ended the instance")})
    run = await wf.run(*LIMITED, invocation(pending={"b": "do"}, steps_left=1), host)
    assert run.outcome.kind == "suspended", run.outcome
    assert host.steps_called() == [("step.do", "a"), ("step.do", "b"), ("step.begin", "c")]


async def test_an_effect_past_the_limits_runs_once_the_host_allows_it(wf: Workflows) -> None:  # WF-38
    run = await wf.run(*LIMITED, invocation(steps_left=2))
    assert run.outcome.kind == "complete" and run.outcome.output == {"ran": ["a", "b", "c"]}, run.outcome
    assert run.host.steps_called() == [("step.do", "a"), ("step.do", "b"), ("step.begin", "c"), ("step.do", "c")]


async def test_no_effect_starts_past_the_lifetime_without_the_host(wf: Workflows) -> None:  # WF-38
    # Even an attempt of a name already begun: the lifetime ended before the context started.
    host = StepHost(methods={"step.begin": HostError("lifetime_exceeded", "a Host limit ended the instance")})
    run = await wf.run(*LIMITED, invocation(pending={"a": "do"}, lifetime_ends_at=1), host)
    assert run.outcome.kind == "suspended", run.outcome
    assert host.steps_called() == [("step.begin", "a")]
