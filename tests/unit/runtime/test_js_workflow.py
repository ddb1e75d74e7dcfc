"""What only JavaScript can get wrong in a workflow run: realms, descriptors, getters, Promises."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sumi.runtime import EnvSpec, JsRuntime
from tests.unit.runtime.workflow_testkit import REJECT, StepHost, Workflows, done, failed, invocation, js_run


@pytest.fixture(scope="module")
async def wf() -> AsyncIterator[Workflows]:
    runtime = JsRuntime()
    await runtime.start()
    yield Workflows("js", runtime)
    await runtime.close()


async def test_step_errors_have_a_read_only_hidden_name_and_this_realms_prototype(wf: Workflows) -> None:  # WF-44
    run = await wf.run(
        js_run("""
          const out = {};
          for (const [key, call] of [['replayed', () => step.do('old', () => ({}))],
                                     ['live', () => step.do('new', () => { throw new Error('x'); })]]) {
            try { await call(); } catch (e) {
              const d = Object.getOwnPropertyDescriptor(e, 'name');
              let assigned = true;
              try { e.name = 'other'; } catch { assigned = false; }
              out[key] = { own: d !== undefined, writable: d.writable, enumerable: d.enumerable,
                           configurable: d.configurable, name: e.name, assigned,
                           isError: e instanceof Error, proto: Object.getPrototypeOf(e) === Error.prototype };
            }
          }
          return out;"""),
        "",
        invocation(completed=(failed("old"),)),
        host=StepHost(steps={"new": REJECT}),
    )
    expected = {
        "own": True,
        "writable": False,
        "enumerable": False,
        "configurable": False,
        "name": "step_failed",
        "assigned": False,
        "isError": True,
        "proto": True,
    }
    assert run.outcome.output == {"replayed": expected, "live": expected}, run.outcome


async def test_values_handed_to_run_belong_to_the_worker_realm(wf: Workflows) -> None:  # WF-29, WF-32
    run = await wf.run(
        js_run("""
          const a = await step.do('a', () => ({}));
          const b = await step.do('b', () => ({ v: [1] }));
          const isPlain = (v) => Object.getPrototypeOf(v) === Object.prototype;
          return { event: isPlain(event), params: isPlain(event.params), a: isPlain(a), b: isPlain(b),
                   arr: Array.isArray(b.v) && Object.getPrototypeOf(b.v) === Array.prototype,
                   frozenStep: Object.isFrozen(step), env: Object.isFrozen(this.env) };"""),
        "",
        invocation({"p": 1}, completed=(done("a", result={"x": 1}),)),
    )
    assert run.outcome.output == {
        "event": True,
        "params": True,
        "a": True,
        "b": True,
        "arr": True,
        "frozenStep": True,
        "env": True,
    }, run.outcome


async def test_effect_results_and_run_output_never_run_getters_or_to_json(wf: Workflows) -> None:  # DOC-4
    host = StepHost(steps={"getter": REJECT})
    run = await wf.run(
        js_run(
            """
          try {
            await step.do('getter', () => ({ get g() { counts.getter++; return 1; } }));
          } catch {}
          const v = await step.do('tojson', () => ({ a: { toJSON() { counts.toJSON++; return 'x'; } }.toJSON && 1 }));
          return { counts, v, out: { toJSON() { counts.toJSON++; return {}; } } && 2 };""",
            prelude="const counts = { getter: 0, toJSON: 0 };",
        ),
        "",
        host=host,
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {"counts": {"getter": 0, "toJSON": 0}, "v": {"a": 1}, "out": 2}
    assert host.calls[0][1]["error"]["name"] == "TypeError"


async def test_run_output_with_to_json_is_not_a_document(wf: Workflows) -> None:  # DOC-3, DOC-4, WF-30
    run = await wf.run(js_run("return { toJSON() { return {}; } };"), "")
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


async def test_patched_intrinsics_do_not_change_provenance(wf: Workflows) -> None:  # WF-44, WF-45
    run = await wf.run(
        js_run("""
          WeakSet.prototype.has = () => true;
          Promise.prototype.then = function () { throw new Error('patched'); };
          throw Object.assign(new Error('fake'), { name: 'step_failed' });"""),
        "",
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


@pytest.mark.parametrize(
    "output",
    [
        # a Proxy root: 1 key when counted, 5,000 when serialised (issue 10)
        "new Proxy({}, { ownKeys() { n++; return n === 1 ? ['a']"
        " : Array.from({length: 5000}, (_, i) => 'k' + i); },"
        " getOwnPropertyDescriptor() { return { value: 1, enumerable: true, configurable: true }; } })",
        "({ a: new Proxy({}, {}) })",
    ],
)
async def test_proxies_are_not_documents_in_the_sandbox(wf: Workflows, output: str) -> None:  # DOC-1, DOC-4
    run = await wf.run(js_run(f"let n = 0; return {output};"), "")
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


async def test_patched_intrinsics_do_not_fool_the_document_size_check(wf: Workflows) -> None:  # DOC-1, DOC-6
    run = await wf.run(
        js_run("""
          const big = 'é'.repeat(600000);  // 1.2 MB in UTF-8: over the 1 MiB limit
          String.prototype.charCodeAt = () => 65; JSON.stringify = () => '{}';
          return { big };"""),
        "",
    )
    assert (run.outcome.kind, run.outcome.reason) == ("errored", "run_threw"), run.outcome


async def test_patched_prototypes_do_not_change_what_is_committed_or_returned(wf: Workflows) -> None:  # DOC-4, WF-36
    # Setters, getters and toJSON on the shared prototypes, and a broken array iterator: the runtime
    # builds its objects as literals, reads own data properties and serialises without toJSON.
    host = StepHost(steps={"w": {"action": "resolve", "payload": {"by": "ann"}}})
    run = await wf.run(
        js_run(
            """
          Object.defineProperty(Object.prototype, 'result', { set(v) { hits.push('set result'); }, configurable: true });
          Object.defineProperty(Object.prototype, 'payload', { get() { hits.push('get payload'); return { forged: 1 }; }, configurable: true });
          Object.prototype.toJSON = function () { hits.push('toJSON'); return 'forged'; };
          Array.prototype[Symbol.iterator] = function () { throw new Error('iterator'); };
          const a = await step.do('a', () => ({ n: 1 }), { maxAttempts: 2 });
          const w = await step.waitForEvent('w', { type: 't', timeoutSeconds: 5 });
          const r = await step.do('r', () => ({ n: 2 }));
          return { a: a.n, w: w.by, r: r.n, hits: hits.length };""",
            prelude="const hits = [];",
        ),
        "",
        invocation(completed=(done("r", result={"n": 3}),)),
        host=host,
    )
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output == {"a": 1, "w": "ann", "r": 3, "hits": 0}
    assert host.calls[0] == (
        "step.do",
        {
            "name": "a",
            "config": {"maxAttempts": 2, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200},
            "ok": True,
            "result": {"n": 1},
        },
    )


# WF-28: shapes that are functions with something like a `run`, and are not constructible classes.
NOT_WORKFLOW_CLASSES = """
  export function* Generator() {}
  Generator.prototype.run = function () {};
  export async function* AsyncGenerator() {}
  AsyncGenerator.prototype.run = function () {};
  export async function AsyncFn() {}
  AsyncFn.prototype = { run() {} };
  export const Arrow = () => {};
  Arrow.prototype = { run() {} };
  export const Method = { m() {} }.m;
  Method.prototype = { run() {} };
  class Real { run() {} }
  export const Bound = Real.bind(null);
  export const TrappedClass = new Proxy(Real, { construct() { throw new Error('no'); } });
  export const PlainProxy = new Proxy(Real, {});
  export const ProxiedArrow = new Proxy(() => {}, { construct() { return {}; }, get() { return { run() {} }; } });
  // The check must not run this getter: if it did, it would see a function.
  export class GetterRun { get run() { return function () {}; } }
  export class InheritedGetter extends GetterRun {}
  export class DataNotCallable {}
  DataNotCallable.prototype.run = 1;
"""
WORKFLOW_CLASSES = """
  export function Plain() {}
  Plain.prototype.run = function () {};
  class Base { async run() {} }
  export class Inherits extends Base {}
  export class Own { run() {} }
"""


async def test_only_constructible_classes_with_a_callable_run_are_workflow_classes(wf: Workflows) -> None:  # WF-28
    ctx = await wf.runtime.start_context(wf.modules(NOT_WORKFLOW_CLASSES + WORKFLOW_CLASSES, ""), wf.main)
    info = await ctx.load_info()
    await ctx.stop()
    assert info.load_error is None
    assert sorted(info.workflow_classes) == ["Inherits", "Own", "Plain"]


@pytest.mark.parametrize("name", ["Generator", "Bound", "TrappedClass", "GetterRun"])
async def test_running_a_shape_that_is_not_a_workflow_class_is_run_threw(
    wf: Workflows, name: str
) -> None:  # WF-28, WF-29
    ctx = await wf.runtime.start_context(wf.modules(NOT_WORKFLOW_CLASSES, ""), wf.main)
    inv = invocation()
    outcome = await ctx.invoke_workflow(type(inv)(name, inv.instance_id, None), EnvSpec(), StepHost())
    await ctx.stop()
    assert (outcome.kind, outcome.reason) == ("errored", "run_threw")
    assert f'no workflow class "{name}"' in (outcome.message or "")
