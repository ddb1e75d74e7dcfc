// One execution context = one worker thread running this file. The thread
// owns a vm context with a clean global (sandbox.js) and the Version's ES
// modules linked inside it. A thread (not just a vm context) per execution
// context is what gives a separate heap with its own limit, and what lets the
// main thread stop the code physically with worker.terminate() (WF-26, WF-46).
import { parentPort, workerData } from 'node:worker_threads';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { types } from 'node:util';
import vm from 'node:vm';

const post = (msg) => parentPort.postMessage(msg);

// Everything the sandbox hands the bridge is untrusted: each message to the
// main thread is rebuilt here field by field, with types and sizes checked,
// so no field the worker chose can stand in for one the runtime sets.
const LEVELS = new Set(['debug', 'info', 'warn', 'error']);
const REASONS = new Set(['threw', 'cpu_limit', 'heap_limit', 'wall_limit', 'stopped']);
const MAX_LOG_TEXT = 16 * 1024;
const MAX_ERROR_TEXT = 4 * 1024;
const text = (v, n) => (typeof v === 'string' ? (v.length > n ? v.slice(0, n) : v) : '');
const isId = (v) => Number.isSafeInteger(v) && v > 0;

// A workflow execution's outcome (workflow.js): complete {output?} | errored {reason, message} | suspended.
// The output was judged a document inside the context; Python judges it again (_protocol).
const WF_REASONS = new Set(['run_threw', 'step_failed', 'step_definition_mismatch']);
function checkedOutcome(o) {
  if (o !== null && typeof o === 'object') {
    if (o.kind === 'complete') {
      const out = o.output;
      return out !== null && typeof out === 'object' && !Array.isArray(out) ? { kind: 'complete', output: out } : { kind: 'complete' };
    }
    if (o.kind === 'suspended') return { kind: 'suspended' };
    if (o.kind === 'errored' && WF_REASONS.has(o.reason)) {
      return { kind: 'errored', reason: o.reason, message: text(o.message, MAX_ERROR_TEXT) };
    }
  }
  return { kind: 'errored', reason: 'run_threw', message: 'invalid workflow outcome' };
}

function checkedResult(r) {
  if (r === null || typeof r !== 'object') return { ok: false, reason: 'threw', error: { name: 'Error', message: 'invalid result', hostError: false } };
  if (r.ok === true) return { ok: true };
  const e = r.error !== null && typeof r.error === 'object' ? r.error : {};
  return {
    ok: false,
    reason: REASONS.has(r.reason) ? r.reason : 'threw',
    error: { name: text(e.name, 256) || 'Error', message: text(e.message, MAX_ERROR_TEXT), hostError: e.hostError === true },
  };
}

// Code generation from strings is off: in Node 20 an `import()` inside eval'd
// code rejects with an Error of *this* realm, which would hand worker code our
// Function constructor. Workers on other platforms forbid eval for the same
// kind of reason. A null-prototype sandbox keeps `this.constructor` unbound.
const context = vm.createContext(Object.create(null), {
  name: `sumi-context-${workerData.contextId}`,
  codeGeneration: { strings: false, wasm: false },
});

const timers = new Map();
let control;

// The only door between worker code and this thread. Takes and returns
// primitives and never throws into the sandbox.
function bridge(kind, payload) {
  try {
    switch (kind) {
      case 'log': {
        const [level, line] = JSON.parse(payload);
        post({ type: 'log', level: LEVELS.has(level) ? level : 'info', text: text(line, MAX_LOG_TEXT) });
        return undefined;
      }
      case 'call': {
        const [callId, method, args] = JSON.parse(payload);
        if (!isId(callId) || typeof method !== 'string') return undefined;
        post({ type: 'host_call', callId, method: text(method, 64), args });
        return undefined;
      }
      case 'result': {
        const [invocationId, result] = JSON.parse(payload);
        if (isId(invocationId)) post({ type: 'invoke_result', invocationId, result: checkedResult(result) });
        return undefined;
      }
      case 'outcome': {
        const [invocationId, outcome] = JSON.parse(payload);
        if (isId(invocationId)) post({ type: 'invoke_result', invocationId, outcome: checkedOutcome(outcome) });
        return undefined;
      }
      case 'timer_set': {
        const [id, ms] = JSON.parse(payload);
        if (!isId(id) || typeof ms !== 'number') return undefined;
        timers.set(id, setTimeout(() => { timers.delete(id); enter(() => control.fireTimer(id)); }, ms));
        return undefined;
      }
      case 'timer_clear_all':
        for (const t of timers.values()) clearTimeout(t);
        timers.clear();
        return undefined;
      case 'timer_clear': {
        const [id] = JSON.parse(payload);
        clearTimeout(timers.get(id));
        timers.delete(id);
        return undefined;
      }
      case 'ab': {
        // Buffers of this thread's isolate only (each worker has its own allocator).
        const used = process.memoryUsage().arrayBuffers;
        return used + Number(payload) <= workerData.bufferBytes ? 'ok' : 'no';
      }
      case 'random': return randomBytes(Number(payload)).toString('base64');
      case 'uuid': return randomUUID();
      case 'url': return JSON.stringify(urlOp(JSON.parse(payload)));
      default: return undefined;
    }
  } catch (e) {
    return kind === 'url' ? JSON.stringify({ error: String(e && e.message) }) : undefined;
  }
}

function urlOp({ url, base, set }) {
  let u;
  try { u = new URL(url, base); } catch { return { error: `Invalid URL: ${url}` }; }
  if (set) u[set[0]] = set[1];
  const parts = { origin: u.origin };
  for (const f of ['href', 'protocol', 'username', 'password', 'host', 'hostname', 'port', 'pathname', 'search', 'hash']) {
    parts[f] = u[f];
  }
  return { parts };
}

// ---- module graph: only the Version's own modules, by relative specifier ---
const ROOT = 'file:///version/';
const sources = new Map(workerData.modules.map((m) => [m.name.replace(/^\.\//, ''), m.content]));
const modules = new Map();

function resolve(specifier, referrerName) {
  if (!specifier.startsWith('./') && !specifier.startsWith('../')) {
    throw new Error(`cannot import "${specifier}": a worker may import only its Version's modules, by relative path`);
  }
  const href = new URL(specifier, ROOT + referrerName).href;
  const name = href.startsWith(ROOT) ? decodeURIComponent(href.slice(ROOT.length)) : null;
  if (name === null || !sources.has(name)) {
    throw new Error(`cannot import "${specifier}" from "${referrerName}": no such module in this Version`);
  }
  return name;
}

function moduleFor(name) {
  let m = modules.get(name);
  if (!m) {
    m = new vm.SourceTextModule(sources.get(name), {
      context,
      identifier: ROOT + name,
      importModuleDynamically: (spec, referrer) => dynamicImport(spec, referrer),
    });
    modules.set(name, m);
  }
  return m;
}

const linker = (specifier, referrer) => moduleFor(resolve(specifier, referrer.identifier.slice(ROOT.length)));

// One job per module: link, then evaluate. Every import() of the module,
// however many are in flight and however often it is retried after a
// failure, awaits that same job, and gets the namespace of a module that is
// fully evaluated or a sandbox-realm error. Never the module object itself:
// Node's vm wrapper checks its status and throws errors of this realm (whose
// constructor is this realm's Function) when it is still linking or errored.
const jobs = new Map();
function loadJob(m) {
  let job = jobs.get(m);
  if (!job) {
    job = (async () => {
      if (m.status === 'unlinked') await m.link(linker);
      if (m.status === 'linked' || m.status === 'evaluating' || m.status === 'errored') await m.evaluate();
      if (m.status !== 'evaluated') throw new Error(`module ${m.identifier} is ${m.status}`);
    })();
    job.catch(() => {});
    jobs.set(m, job);
  }
  return job;
}

async function dynamicImport(specifier, referrer) {
  let failure;
  try {
    const m = moduleFor(resolve(specifier, referrer.identifier.slice(ROOT.length)));
    await loadJob(m);
    return m.namespace;
  } catch (e) {
    failure = e;
  }
  // The failure may be a value worker code threw while the module evaluated,
  // or an error of this realm: either way only the sandbox describes it.
  throw control.makeTypeError(`import of "${typeof specifier === 'string' ? specifier : '?'}" failed: ${control.describe(failure)}`);
}

// A runtime file evaluated inside the context's realm, before any worker code.
const runtimeScript = (file) => new vm.Script(readFileSync(new URL(file, import.meta.url), 'utf8'), {
  filename: `sumi:${file.slice(2)}`,
}).runInContext(context);

async function runtimeModule(file) {
  const m = new vm.SourceTextModule(readFileSync(new URL(file, import.meta.url), 'utf8'), {
    context, identifier: `sumi:${file.slice(2)}`,
  });
  await m.link(() => { throw new Error(`${file} may not import`); });
  await m.evaluate();
  return m.namespace;
}

async function load() {
  // DOC-1..6 in the sandbox realm, loaded before worker code so that it
  // captures the realm's intrinsics unpatched. Proxies are told apart by
  // node's own check, which stays in the checker's closure, out of worker
  // code's reach.
  const { makeDocumentChecker } = await runtimeModule('./document.mjs');
  const checkDocument = makeDocumentChecker({ isProxy: types.isProxy });
  const installWorkflow = runtimeScript('./workflow.js');
  control = runtimeScript('./sandbox.js')(bridge, { installWorkflow, checkDocument });
  const mainName = workerData.mainModule.replace(/^\.\//, '');
  if (!sources.has(mainName)) throw new Error(`main module "${mainName}" is not among the modules`);
  const main = moduleFor(mainName);
  await loadJob(main);
  control.setMain(main.namespace);
  return JSON.parse(control.loadInfo());
}

// A value worker code threw is described by the sandbox (it returns a
// string); this realm never reads its properties, calls its methods or
// formats it, since each of those can run worker code with our objects.
const describeLoadError = (e) => {
  try {
    const d = control ? control.describe(e) : null;
    return typeof d === 'string' ? d.slice(0, MAX_ERROR_TEXT) : 'module failed to load';
  } catch { return 'module failed to load'; }
};

// Whatever reaches this thread's top level uncaught (a timer, a finalizer, a
// rejection nobody handled) is caught here, not formatted by Node's
// util.inspect (which calls methods of the value and hands them our objects).
// Entries into sandbox code go through enter(), which swallows throws the
// same way; these handlers are the net under everything else.
function enter(fn) {
  try { fn(); } catch { post({ type: 'log', level: 'error', text: 'uncaught exception in worker code' }); }
}
process.on('uncaughtException', () => post({ type: 'log', level: 'error', text: 'uncaught exception in worker code' }));
process.on('unhandledRejection', (e) => post({ type: 'log', level: 'error', text: `unhandled rejection: ${describeLoadError(e)}` }));

let loadInfo;
try {
  loadInfo = await load();
} catch (e) {
  loadInfo = { loadError: describeLoadError(e) };
}
const names = (list) => (Array.isArray(list) ? list.filter((n) => typeof n === 'string').slice(0, 1024).map((n) => text(n, 256)) : []);
post(loadInfo.loadError
  ? { type: 'loaded', loadError: text(String(loadInfo.loadError), MAX_ERROR_TEXT) }
  : { type: 'loaded', handlers: names(loadInfo.handlers), workflowClasses: names(loadInfo.workflowClasses) });

// Messages of the main thread, by type; a new operation is one entry.
const onMain = {
  invoke_queue(msg) {
    if (loadInfo.loadError) {
      post({ type: 'invoke_result', invocationId: msg.invocationId, result: { ok: false, reason: 'threw', error: { name: 'Error', message: loadInfo.loadError, hostError: false } } });
    } else {
      enter(() => control.invokeQueue(JSON.stringify(msg.batch), JSON.stringify(msg.env), msg.invocationId));
    }
  },
  invoke_workflow(msg) {
    if (loadInfo.loadError) {
      post({ type: 'invoke_result', invocationId: msg.invocationId, outcome: { kind: 'errored', reason: 'run_threw', message: loadInfo.loadError } });
    } else {
      enter(() => control.invokeWorkflow(JSON.stringify(msg.invocation), JSON.stringify(msg.env), msg.invocationId));
    }
  },
  host_reply(msg) {
    enter(() => control.deliverReply(msg.callId, msg.ok, JSON.stringify(msg.ok ? (msg.value ?? null) : msg.error)));
  },
};
parentPort.on('message', (msg) => {
  const handler = Object.hasOwn(onMain, msg.type) ? onMain[msg.type] : null;
  if (handler) handler(msg);
});
