// The DurableWorkflow side of the worker ABI: the `step` API, the run driver
// and the Caller Binding `env.NAME` (WF-18..45, contract "Runtime ABI").
//
// Evaluated as a classic script inside the context's vm realm, like
// sandbox.js and before any worker module, so every object it hands out is of
// that realm and the intrinsics below are captured before worker code could
// patch them. Its completion value is `installWorkflow(deps)`; sandbox.js
// calls it with its host-call door and error factories.
//
// One context runs at most one workflow execution (WF-32: the Host never
// pools them). The run driver reports exactly one outcome per execution:
//   complete {output?}      run settled with a document or undefined
//   errored {reason, message}   run_threw | step_failed | step_definition_mismatch
//   suspended               a step is pending on the Host (retry scheduled,
//                           sleeping, waiting, or a Host rejection such as a
//                           limit or a fenced owner): its Promise never settles
//                           and the Host stops the context.
// After the outcome the context is halted: no step and no binding call
// reaches the Host any more, their Promises stay pending.
//
// Decisions where the texts leave room (written down here, as the contract asks):
// - Argument errors are rejected Promises (the step methods behave as async
//   functions), TypeError for every bad type or range of an unfinished name.
// - A step is "unsettled" from its call until the runtime settles its
//   Promise; a replayed (completed) name settles at once, so awaiting it is
//   not needed to start the next step.
// - A completed name replays whatever was recorded under it, whatever kind
//   the call has (WF-36 names only unfinished names for the kind check).
// - The effect's result travels as the document checker's canonical JSON,
//   parsed back here: the run sees the same value live and on replay.
// Worker code runs in this realm and may have patched prototypes: objects are
// built as literals (never by assignment, which would run setters), lists are
// walked by index, values from worker code and Host replies are read as own
// data properties, and documents are copied through the document checker
// (which reads descriptors), never through JSON.stringify (which runs toJSON).
(function () {
  'use strict';
  const { apply } = Reflect;
  const { freeze, keys, getOwnPropertyDescriptor } = Object;
  const { parse: jsonParse } = JSON;
  const { isInteger } = Number;
  const charCodeAt = String.prototype.charCodeAt;
  const WeakSetHas = WeakSet.prototype.has;
  const WeakSetAdd = WeakSet.prototype.add;
  const MapGet = Map.prototype.get;
  const MapSet = Map.prototype.set;
  const MapHas = Map.prototype.has;
  const PromiseThen = Promise.prototype.then;
  const _Promise = Promise;
  const _TypeError = TypeError;
  const _Map = Map;
  const _WeakSet = WeakSet;
  const PromiseResolve = Promise.resolve;
  const PromiseReject = Promise.reject;
  const DateNow = Date.now;
  const _Date = Date;
  const clock = () => apply(DateNow, _Date, []);
  const promiseResolve = (v) => apply(PromiseResolve, _Promise, [v]);
  const promiseReject = (e) => apply(PromiseReject, _Promise, [e]);
  const never = () => new _Promise(() => {});

  const MAX_NAME = 256;
  const MAX_SLEEP_SECONDS = 31536000;
  const MAX_DELAY_SECONDS = 43200;
  const RETRY_KEYS = ['maxAttempts', 'initialDelaySeconds', 'backoff', 'maxDelaySeconds'];
  const WAIT_KEYS = ['type', 'timeoutSeconds'];
  const CREATE_KEYS = ['id', 'params'];
  const EVENT_KEYS = ['type', 'payload'];

  const ObjectHasOwn = Object.hasOwn;
  const hasOwn = (o, k) => ObjectHasOwn(o, k);
  // An own data property's value, or undefined: no getter and no prototype is consulted.
  const own = (o, k) => {
    if (typeof o !== 'object' || o === null) return undefined;
    const d = getOwnPropertyDescriptor(o, k);
    return d !== undefined && ObjectHasOwn(d, 'value') ? d.value : undefined;
  };
  // Fails with a TypeError naming the first key of `o` not in `allowed`.
  function onlyKeys(o, allowed, what) {
    const ks = keys(o);
    for (let i = 0; i < ks.length; i++) if (!has(allowed, ks[i])) throw new _TypeError(`${what} "${ks[i]}"`);
  }
  const has = (list, k) => {
    for (let i = 0; i < list.length; i++) if (list[i] === k) return true;
    return false;
  };

  // 1..256 Unicode scalar values: no lone surrogates, pairs count once (WF-34, WF-19).
  function scalarName(value) {
    if (typeof value !== 'string') return false;
    let n = 0;
    for (let i = 0; i < value.length; i++, n++) {
      const c = apply(charCodeAt, value, [i]);
      if (c >= 0xd800 && c <= 0xdbff) {
        const d = i + 1 < value.length ? apply(charCodeAt, value, [i + 1]) : 0;
        if (d < 0xdc00 || d > 0xdfff) return false;
        i++;
      } else if (c >= 0xdc00 && c <= 0xdfff) {
        return false;
      }
    }
    return n >= 1 && n <= MAX_NAME;
  }
  const isObject = (v) => typeof v === 'object' && v !== null;
  const intIn = (v, lo, hi) => typeof v === 'number' && isInteger(v) && v >= lo && v <= hi;

  return function installWorkflow(deps) {
    // deps: { hostCall(method, args) -> Promise, makeHostError(name, message), checkDocument(value),
    //         describe(error) -> {name, message}, isWorkflowClass(value) } (document.mjs, sandbox.js)
    const { hostCall, makeHostError, checkDocument, describe, isWorkflowClass } = deps;
    const typeError = (message) => new _TypeError(message);
    // The canonical JSON of a document from a Host reply or the history; undefined for none (DOC-5).
    const canonicalOf = (doc) => {
      if (doc === undefined || doc === null) return undefined;
      const r = checkDocument(doc);
      return r.ok ? r.canonical : undefined;
    };
    const parsed = (canonical) => (canonical === undefined ? undefined : jsonParse(canonical));
    const fresh = (doc) => parsed(canonicalOf(doc));

    // WF-44: the step API's own Host Errors. Only these count for step_failed (WF-45);
    // the mark is private to this closure and to this context's realm.
    const stepErrors = new _WeakSet();
    function stepError(name, message) {
      const e = makeHostError(name, message);
      apply(WeakSetAdd, stepErrors, [e]);
      return e;
    }
    const isStepError = (e) => (typeof e === 'object' || typeof e === 'function') && e !== null && apply(WeakSetHas, stepErrors, [e]);

    let halted = false; // set once this context's outcome is reported: nothing more reaches the Host

    // A Host call whose reply is passed to `then`; after the halt it never settles.
    function call(method, args) {
      if (halted) return never();
      return hostCall(method, args);
    }

    // Validate a document argument; returns the parsed canonical copy or throws a Host Error
    // named invalid_params / document_too_large (what the Host would answer for it).
    function checkedDocument(value, what) {
      const r = checkDocument(value);
      if (!r.ok) throw makeHostError(r.code, `${what}: ${r.message}`);
      return jsonParse(r.canonical);
    }

    // ---- the Caller Binding (WF-18..27) ----------------------------------
    function makeInstance(binding, id) {
      const base = () => ({ binding, id });
      const voidCall = (method, args) => apply(PromiseThen, call(method, args), [() => undefined]);
      return freeze({
        id,
        status() {
          return apply(PromiseThen, call('workflow.status', base()), [(r) => {
            const output = fresh(own(r, 'output'));
            const error = own(r, 'error');
            const message = own(error, 'message');
            return {
              status: String(own(r, 'status')),
              ...(output !== undefined ? { output } : {}),
              ...(isObject(error) ? {
                error: { reason: String(own(error, 'reason')), ...(typeof message === 'string' ? { message } : {}) },
              } : {}),
            };
          }]);
        },
        sendEvent(input) {
          try {
            if (!isObject(input)) throw typeError('sendEvent: expects an object {type, payload?}');
            onlyKeys(input, EVENT_KEYS, 'sendEvent: unknown key');
            const { type, payload } = input;
            if (!scalarName(type)) throw typeError('sendEvent: type must be a string of 1..256 Unicode scalar values');
            const doc = payload === undefined ? {} : { payload: checkedDocument(payload, 'sendEvent payload') };
            return voidCall('workflow.sendEvent', { binding, id, type, ...doc });
          } catch (e) {
            return promiseReject(e);
          }
        },
        terminate() { return voidCall('workflow.terminate', base()); },
      });
    }

    function makeBinding(binding) {
      const instance = (r) => makeInstance(binding, String(own(r, 'id')));
      return freeze({
        create(input) {
          try {
            if (input !== undefined && !isObject(input)) throw typeError('create: expects an object {id?, params?}');
            const opts = input || {};
            onlyKeys(opts, CREATE_KEYS, 'create: unknown key');
            const { id, params } = opts;
            if (id !== undefined && !scalarName(id)) {
              throw typeError('create: id must be a string of 1..256 Unicode scalar values');
            }
            const args = {
              binding,
              ...(id !== undefined ? { id } : {}),
              ...(params !== undefined ? { params: checkedDocument(params, 'create params') } : {}),
            };
            return apply(PromiseThen, call('workflow.create', args), [instance]);
          } catch (e) {
            return promiseReject(e);
          }
        },
        get(id) {
          if (!scalarName(id)) return promiseReject(typeError('get: id must be a string of 1..256 Unicode scalar values'));
          return apply(PromiseThen, call('workflow.get', { binding, id }), [instance]);
        },
      });
    }

    // ---- one workflow execution (WF-29..45) ------------------------------
    function invoke(mainNs, inv, env, done) {
      let finished = false;
      const finish = (outcome) => {
        if (finished) return;
        finished = true;
        halted = true;
        done(outcome);
      };
      // inv was parsed from the Host's frame in this realm: plain data, read as own properties.
      const completed = new _Map();
      const history = own(inv, 'completed') || {};
      const names = keys(history);
      for (let i = 0; i < names.length; i++) apply(MapSet, completed, [names[i], own(history, names[i])]);
      const pendingKinds = own(inv, 'pendingKinds') || {};
      let active = null; // the one unsettled live step: {name, kind}
      deps.watchStep(() => (active === null ? null : active.name)); // its log lines name it
      // WF-38: the Host's limits as of the context start (none from an older Host: the Host judges).
      const limit = (v) => (typeof v === 'number' ? v : Infinity);
      const stepsLeft = limit(own(inv, 'stepsLeft'));
      const lifetimeEndsAt = limit(own(inv, 'lifetimeEndsAt'));
      let begun = 0; // new step names begun in this context

      // WF-35: uncatchable. The caller gets a Promise that never settles, the outcome is reported.
      function mismatch(message) {
        finish({ kind: 'errored', reason: 'step_definition_mismatch', message });
        return never();
      }
      const suspend = () => { finish({ kind: 'suspended' }); };
      // The runtime's own work failed in this realm: only patched intrinsics (e.g. a throwing array
      // iterator under the document checker) do that. The run cannot go on truthfully; it threw.
      function broken(e) {
        finish({ kind: 'errored', reason: 'run_threw', message: `the runtime could not check a document in this context: ${describe(e).message}` });
        return never();
      }
      const guarded = (fn) => (v) => { try { fn(v); } catch (e) { broken(e); } };

      // Record a settled live step so a later call of the same name replays it in this context too.
      function settle(step, record, settleFn, value) {
        apply(MapSet, completed, [step.name, record]);
        active = null;
        settleFn(value);
      }

      // record: {ok, result?, error?} from the history, or {ok, canonical?, error?} settled in this context.
      function replay(record) {
        if (own(record, 'ok') === true) {
          const canonical = own(record, 'canonical');
          try {
            return promiseResolve(typeof canonical === 'string' ? jsonParse(canonical) : fresh(own(record, 'result')));
          } catch (e) {
            return broken(e);
          }
        }
        const error = own(record, 'error');
        return promiseReject(stepError(String(own(error, 'name') || 'step_failed'), String(own(error, 'message') || '')));
      }

      // The checks every step call makes, in the order WF-34..37 give. Returns a Promise to hand
      // back, or null when the step is unfinished and its own arguments are to be checked.
      function enter(kind, name) {
        if (finished) return never();
        if (!scalarName(name)) return promiseReject(typeError(`step.${kind === 'wait' ? 'waitForEvent' : kind}: name must be a string of 1..256 Unicode scalar values`));
        if (active !== null) return mismatch(`step "${name}" started while step "${active.name}" is unsettled`);
        if (apply(MapHas, completed, [name])) return replay(apply(MapGet, completed, [name]));
        const prior = own(pendingKinds, name);
        if (prior !== undefined && prior !== kind) {
          return mismatch(`step "${name}" was a ${prior} step and is now used as ${kind}`);
        }
        if (prior === undefined) begun++;
        return null;
      }

      // WF-38: no effect starts for a step the Host would refuse. Within the limits the context
      // started with, it starts at once; past them the Host is asked first (step.begin) and decides:
      // past a limit it ends the instance and stops this context, and the effect never runs.
      function cleared(name, go) {
        const isNew = own(pendingKinds, name) === undefined;
        if (!(isNew && begun > stepsLeft) && clock() < lifetimeEndsAt) { go(); return; }
        const onReply = (reply) => {
          if (finished) return;
          if (own(reply, 'action') === 'resolve') go();
          else suspend();
        };
        apply(PromiseThen, call('step.begin', { name }), [guarded(onReply), suspend]);
      }

      // A step call to the Host whose reply decides: resolve, reject (a genuine Host Error), suspend.
      // `sent` (do only): the canonical JSON of the result this context sent, used when the Host
      // does not echo it back.
      // `onReject`: the message of the Host Error when the Host gives none; null: the step cannot fail.
      function live(kind, name, method, args, onReject, sent) {
        const step = { name, kind };
        active = step;
        return new _Promise((resolve, reject) => {
          const onReply = (reply) => {
            if (finished) return;
            const action = own(reply, 'action');
            if (action === 'resolve') {
              let canonical;
              if (kind === 'wait') canonical = canonicalOf(own(reply, 'payload'));
              else if (kind === 'do') canonical = hasOwn(reply, 'result') ? canonicalOf(own(reply, 'result')) : sent;
              // The run gets its own copy; the record keeps the text, so a replay here is unaffected
              // by what the run does to the value.
              settle(step, { ok: true, canonical }, resolve, parsed(canonical));
            } else if (action === 'reject' && onReject !== null) {
              const given = own(reply, 'message');
              const message = typeof given === 'string' ? given : onReject;
              const errorName = kind === 'wait' ? 'wait_timeout' : 'step_failed';
              settle(step, { ok: false, error: { name: errorName, message } }, reject, stepError(errorName, message));
            } else {
              suspend(); // retry scheduled, future sleep, no matching event, or anything unexpected
            }
          };
          // A Host rejection (limits, a fenced owner, backend down) leaves the step pending (contract).
          apply(PromiseThen, call(method, args), [guarded(onReply), suspend]);
        });
      }

      function retryConfig(policy) {
        if (policy === undefined) return { maxAttempts: 1, initialDelaySeconds: 0, backoff: 'constant', maxDelaySeconds: MAX_DELAY_SECONDS };
        if (!isObject(policy)) throw typeError('step.do: retryPolicy must be an object');
        onlyKeys(policy, RETRY_KEYS, 'step.do: unknown retryPolicy key');
        const { maxAttempts, initialDelaySeconds = 0, backoff = 'constant', maxDelaySeconds = MAX_DELAY_SECONDS } = policy;
        if (!intIn(maxAttempts, 1, 100)) throw typeError('step.do: retryPolicy.maxAttempts must be an integer 1..100');
        if (!intIn(initialDelaySeconds, 0, MAX_DELAY_SECONDS)) throw typeError('step.do: retryPolicy.initialDelaySeconds must be an integer 0..43200');
        if (backoff !== 'constant' && backoff !== 'exponential') throw typeError('step.do: retryPolicy.backoff must be "constant" or "exponential"');
        if (!intIn(maxDelaySeconds, 0, MAX_DELAY_SECONDS)) throw typeError('step.do: retryPolicy.maxDelaySeconds must be an integer 0..43200');
        return { maxAttempts, initialDelaySeconds, backoff, maxDelaySeconds };
      }

      // One attempt of the effect in this context; its outcome goes to the Host (WF-41).
      async function attempt(effect) {
        try {
          const value = await effect();
          if (value === undefined) return { ok: true };
          const r = checkDocument(value);
          if (r.ok) return { ok: true, canonical: r.canonical };
          if (r.code === 'document_too_large') return { ok: false, error: { name: 'document_too_large', message: r.message } };
          return { ok: false, error: { name: 'TypeError', message: `step.do effect must return a document or undefined: ${r.message}` } };
        } catch (e) {
          const d = describe(e);
          return { ok: false, error: { name: d.name, message: d.message } };
        }
      }

      const step = freeze({
        do(name, effect, retryPolicy) {
          const early = enter('do', name);
          if (early !== null) return early;
          let config;
          try {
            if (typeof effect !== 'function') throw typeError('step.do: effect must be a function');
            config = retryConfig(retryPolicy);
          } catch (e) {
            return promiseReject(e);
          }
          active = { name, kind: 'do' }; // unsettled from here: a step started inside the effect overlaps
          return new _Promise((resolve, reject) => cleared(name, () => {
            apply(PromiseThen, attempt(effect), [guarded((outcome) => {
              if (finished) return;
              const { canonical } = outcome;
              const args = {
                name, config, ok: outcome.ok,
                ...(outcome.ok ? (canonical === undefined ? {} : { result: jsonParse(canonical) }) : { error: outcome.error }),
              };
              const failure = outcome.ok ? '' : outcome.error.message;
              apply(PromiseThen, live('do', name, 'step.do', args, failure, canonical), [resolve, reject]);
            })]);
          }));
        },
        sleep(name, seconds) {
          const early = enter('sleep', name);
          if (early !== null) return early;
          if (!intIn(seconds, 0, MAX_SLEEP_SECONDS)) return promiseReject(typeError('step.sleep: seconds must be an integer 0..31536000'));
          return live('sleep', name, 'step.sleep', { name, seconds }, null, undefined);
        },
        waitForEvent(name, options) {
          const early = enter('wait', name);
          if (early !== null) return early;
          if (!isObject(options)) return promiseReject(typeError('step.waitForEvent: options {type, timeoutSeconds} are required'));
          let type, timeoutSeconds;
          try {
            onlyKeys(options, WAIT_KEYS, 'step.waitForEvent: unknown option');
            ({ type, timeoutSeconds } = options);
          } catch (e) {
            return promiseReject(e);
          }
          if (!scalarName(type)) return promiseReject(typeError('step.waitForEvent: type must be a string of 1..256 Unicode scalar values'));
          if (!intIn(timeoutSeconds, 1, MAX_SLEEP_SECONDS)) return promiseReject(typeError('step.waitForEvent: timeoutSeconds must be an integer 1..31536000'));
          const timeout = `no "${type}" event within ${timeoutSeconds} s`;
          return live('wait', name, 'step.waitForEvent', { name, type, timeoutSeconds }, timeout, undefined);
        },
      });

      const runSettled = (ok, value) => {
        try {
          judgeRun(ok, value);
        } catch (e) {
          finish({ kind: 'errored', reason: 'run_threw', message: 'run result could not be judged' });
        }
      };
      const judgeRun = (ok, value) => {
        if (finished) return;
        if (active !== null) {
          mismatch(`run settled while step "${active.name}" is unsettled`);
          return;
        }
        if (ok) {
          if (value === undefined) { finish({ kind: 'complete' }); return; }
          const r = checkDocument(value);
          if (r.ok) finish({ kind: 'complete', output: jsonParse(r.canonical) });
          else finish({ kind: 'errored', reason: 'run_threw', message: `run must return a document or undefined: ${r.message}` });
          return;
        }
        // WF-45: only an uncaught genuine step_failed is step_failed; a copied name is not.
        if (isStepError(value) && value.name === 'step_failed') {
          finish({ kind: 'errored', reason: 'step_failed', message: String(value.message) });
          return;
        }
        const d = describe(value);
        finish({ kind: 'errored', reason: 'run_threw', message: d.message ? `${d.name}: ${d.message}` : d.name });
      };

      try {
        const Export = mainNs[String(own(inv, 'className'))];
        if (!isWorkflowClass(Export)) {
          throw typeError(`main module has no workflow class "${inv.className}" with a run method`);
        }
        const params = own(inv, 'params');
        const event = { instanceId: String(own(inv, 'instanceId')), ...(isObject(params) ? { params } : {}) };
        const instance = new Export(env);
        const result = instance.run(event, step);
        apply(PromiseThen, promiseResolve(result), [(v) => runSettled(true, v), (e) => runSettled(false, e)]);
      } catch (e) {
        runSettled(false, e);
      }
    }

    return freeze({ invoke, makeBinding });
  };
})();
