// One cell = one worker thread hosting execution contexts, each a vm context
// with a clean global (sandbox.js) and its Version's ES modules linked inside
// it. The main thread (host.mjs) puts in one cell only contexts of the same
// Version (a "shared" cell, up to a few dozen at once) or exactly one context
// (a "solo" cell). A context never outlives its execution: a stop drops it
// (its timers cleared, its bridge cut, so its code can never reach the host
// again) or, when its code is running or a limit is hit, ends the whole thread
// with worker.terminate() (WF-26, WF-46). Starting a thread costs ~25 ms of
// CPU; a vm context in a running cell ~1-3 ms: that difference is what a
// shared cell is for.
import { parentPort, workerData } from 'node:worker_threads';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { types } from 'node:util';
import vm from 'node:vm';

const post = (msg) => parentPort.postMessage(msg);

// Everything the sandbox hands the bridge is untrusted: each message to the
// main thread is rebuilt here field by field, with types and sizes checked,
// so no field the worker chose can stand in for one the runtime sets.
const LEVELS = new Set(['debug', 'info', 'warn', 'error']);
const REASONS = new Set(['threw', 'cpu_limit', 'heap_limit', 'wall_limit', 'stopped']);
const MAX_LOG_TEXT = 16 * 1024;
const MAX_STEP_NAME = 256; // WF-34: step names are 1..256 characters
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


// CPU accounting shared with the main thread, which enforces the limits:
// meter[0] is the slot of the context whose code runs now (0: none),
// meter[1] this loop's active time when it was entered, meter[1 + slot] the
// active time of that slot before then. Work between entries (a microtask
// drain after a host reply, say) is charged to the context entered last.
const meter = new Float64Array(workerData.meter);
const wake = new Int32Array(workerData.wake); // 0 while the main thread's budget checks sleep
function mark(slot) {
  if (Atomics.compareExchange(wake, 0, 0, 1) === 0) Atomics.notify(wake, 0);
  const active = performance.eventLoopUtilization().active;
  const current = meter[0];
  if (current) meter[1 + current] += active - meter[1];
  meter[1] = active;
  meter[0] = slot;
}

const contexts = new Map(); // context id -> context
const bySlot = new Map(); // slot -> context

// The runtime's own files, read once per cell. The scripts are compiled once
// and run in each context (a vm.Script is not bound to a context).
const fileText = (file) => readFileSync(new URL(file, import.meta.url), 'utf8');
const scriptOf = (file) => new vm.Script(fileText(file), { filename: `sumi:${file.slice(2)}` });
const SANDBOX = scriptOf('./sandbox.js');
const WORKFLOW = scriptOf('./workflow.js');
// document.mjs is an ES module (tests import it in plain node); here it runs as
// a script, its exports made locals, since a module's link and evaluation cost
// a fresh context about as much as the rest of its set-up.
const DOCUMENT = new vm.Script(`(function () {\n${fileText('./document.mjs').replace(/^export /gm, '')}\nreturn makeDocumentChecker;\n})()`, {
  filename: 'sumi:document.mjs',
});

// Whatever worker code runs goes through enter(), which marks whose code it
// is and swallows throws (never formatted here: formatting a worker's value
// can run its code with this realm's objects).
function enter(ctx, fn) {
  if (ctx.dead) return;
  mark(ctx.slot);
  try { fn(); } catch { post({ type: 'log', ctx: ctx.id, level: 'error', text: 'uncaught exception in worker code' }); }
  checkBuffersSoon();
}

// The memory limit from the engine's side: this thread's ArrayBuffer backing
// stores (outside the V8 heap and its limit; each worker thread has its own
// allocator), as V8 counts them, whatever path allocated them. Read once per
// turn in which worker code ran, after its promise jobs too (setImmediate);
// over the limit, the main thread ends the cell as for a heap breach.
let checkPending = false;
let overLimit = false;
function checkBuffersSoon() {
  if (checkPending || overLimit) return;
  checkPending = true;
  setImmediate(() => {
    checkPending = false;
    if (process.memoryUsage().arrayBuffers <= workerData.bufferBytes) return;
    overLimit = true;
    post({ type: 'buffers_over', ctx: null });
  });
}

// The only door between one context's code and this thread. Takes and
// returns primitives and never throws into the sandbox. Once the context is
// dropped, the door is shut: nothing it does reaches the main thread.
function bridgeOf(ctx) {
  const id = ctx.id;
  return function bridge(kind, payload) {
    if (ctx.dead) return undefined;
    try {
      switch (kind) {
        case 'log': {
          const [level, line, step] = JSON.parse(payload);
          const named = typeof step === 'string' ? { step: text(step, MAX_STEP_NAME) } : {};
          post({ type: 'log', ctx: id, level: LEVELS.has(level) ? level : 'info', text: text(line, MAX_LOG_TEXT), ...named });
          return undefined;
        }
        case 'call': {
          const [callId, method, args] = JSON.parse(payload);
          if (!isId(callId) || typeof method !== 'string') return undefined;
          post({ type: 'host_call', ctx: id, callId, method: text(method, 64), args });
          return undefined;
        }
        case 'result': {
          const [invocationId, result] = JSON.parse(payload);
          if (isId(invocationId)) post({ type: 'invoke_result', ctx: id, invocationId, result: checkedResult(result) });
          return undefined;
        }
        case 'outcome': {
          const [invocationId, outcome] = JSON.parse(payload);
          if (isId(invocationId)) post({ type: 'invoke_result', ctx: id, invocationId, outcome: checkedOutcome(outcome) });
          return undefined;
        }
        case 'timer_set': {
          const [timerId, ms] = JSON.parse(payload);
          if (!isId(timerId) || typeof ms !== 'number') return undefined;
          ctx.timers.set(timerId, setTimeout(() => { ctx.timers.delete(timerId); enter(ctx, () => ctx.control.fireTimer(timerId)); }, ms));
          return undefined;
        }
        case 'timer_clear_all':
          clearTimers(ctx);
          return undefined;
        case 'timer_clear': {
          const [timerId] = JSON.parse(payload);
          clearTimeout(ctx.timers.get(timerId));
          ctx.timers.delete(timerId);
          return undefined;
        }
        case 'ab': {
          // Buffers of this thread's isolate, every context of the cell together
          // (each worker thread has its own allocator).
          const used = process.memoryUsage().arrayBuffers;
          return used + Number(payload) <= workerData.bufferBytes ? 'ok' : 'no';
        }
        case 'random': {
          const n = Number(payload);
          return Number.isSafeInteger(n) && n >= 0 && n <= 65536 ? randomBytes(n).toString('base64') : undefined;
        }
        case 'uuid': return randomUUID();
        case 'url': return JSON.stringify(urlOp(JSON.parse(payload)));
        default: return undefined;
      }
    } catch (e) {
      return kind === 'url' ? JSON.stringify({ error: String(e && e.message) }) : undefined;
    }
  };
}

function clearTimers(ctx) {
  for (const t of ctx.timers.values()) clearTimeout(t);
  ctx.timers.clear();
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

// ---- one context: its realm, its module graph (only the Version's own modules, by relative specifier)
const ROOT = 'file:///version/';

// V8's code cache of each module as the cell first compiled it: every later context of the
// Version (a shared cell holds one Version) hands it to its own compile, which then skips
// parsing (a fifth of a context's start). The cache is bytecode of the module's source
// only, made before the module ran, so it carries nothing one context did to the next, and
// it is handed only to a compile of the very same source. It lives in this thread's
// buffers, which count against the cell's memory limit: so at most CODE_CACHE_BYTES.
const CODE_CACHE_BYTES = 4 * 1024 * 1024;
const compiled = new Map(); // module name -> {source, data}
let compiledBytes = 0;
function forget(name) {
  const prior = compiled.get(name);
  if (prior === undefined) return;
  compiled.delete(name);
  compiledBytes -= prior.data.length;
}
function remember(name, source, m) {
  forget(name);
  let data;
  try { data = m.createCachedData(); } catch { return; }
  if (compiledBytes + data.length > CODE_CACHE_BYTES) return;
  compiled.set(name, { source, data });
  compiledBytes += data.length;
}

class Context {
  constructor(id, slot, modules, mainModule) {
    this.id = id;
    this.slot = slot;
    this.mainModule = mainModule;
    this.dead = false;
    this.timers = new Map();
    this.control = null;
    this.loadInfo = null;
    this.sources = new Map(modules.map((m) => [m.name.replace(/^\.\//, ''), m.content]));
    this.modules = new Map();
    this.jobs = new Map();
    // Code generation from strings is off: in Node 20 an `import()` inside eval'd
    // code rejects with an Error of *this* realm, which would hand worker code our
    // Function constructor. Workers on other platforms forbid eval for the same
    // kind of reason. A null-prototype sandbox keeps `this.constructor` unbound.
    this.realm = vm.createContext(Object.create(null), {
      name: `sumi-context-${id}`,
      codeGeneration: { strings: false, wasm: false },
    });
  }

  resolve(specifier, referrerName) {
    if (!specifier.startsWith('./') && !specifier.startsWith('../')) {
      throw new Error(`cannot import "${specifier}": a worker may import only its Version's modules, by relative path`);
    }
    const href = new URL(specifier, ROOT + referrerName).href;
    const name = href.startsWith(ROOT) ? decodeURIComponent(href.slice(ROOT.length)) : null;
    if (name === null || !this.sources.has(name)) {
      throw new Error(`cannot import "${specifier}" from "${referrerName}": no such module in this Version`);
    }
    return name;
  }

  moduleFor(name) {
    let m = this.modules.get(name);
    if (!m) {
      const source = this.sources.get(name);
      const cached = compiled.get(name);
      const compile = (cachedData) => new vm.SourceTextModule(source, {
        context: this.realm,
        identifier: ROOT + name,
        importModuleDynamically: (spec, referrer) => this.dynamicImport(spec, referrer),
        ...(cachedData ? { cachedData } : {}),
      });
      if (cached !== undefined && cached.source === source) {
        // V8 refuses a cache by throwing; the module is then compiled as if none were kept.
        try { m = compile(cached.data); } catch { forget(name); }
      }
      if (!m) {
        m = compile(null);
        remember(name, source, m);
      }
      this.modules.set(name, m);
    }
    return m;
  }

  // One job per module: link, then evaluate. Every import() of the module,
  // however many are in flight and however often it is retried after a
  // failure, awaits that same job, and gets the namespace of a module that is
  // fully evaluated or a sandbox-realm error. Never the module object itself:
  // Node's vm wrapper checks its status and throws errors of this realm (whose
  // constructor is this realm's Function) when it is still linking or errored.
  loadJob(m) {
    let job = this.jobs.get(m);
    if (!job) {
      const linker = (specifier, referrer) => this.moduleFor(this.resolve(specifier, referrer.identifier.slice(ROOT.length)));
      job = (async () => {
        if (m.status === 'unlinked') await m.link(linker);
        if (m.status === 'linked' || m.status === 'evaluating' || m.status === 'errored') await m.evaluate();
        if (m.status !== 'evaluated') throw new Error(`module ${m.identifier} is ${m.status}`);
      })();
      job.catch(() => {});
      this.jobs.set(m, job);
    }
    return job;
  }

  async dynamicImport(specifier, referrer) {
    let failure;
    try {
      const m = this.moduleFor(this.resolve(specifier, referrer.identifier.slice(ROOT.length)));
      await this.loadJob(m);
      return m.namespace;
    } catch (e) {
      failure = e;
    }
    // The failure may be a value worker code threw while the module evaluated,
    // or an error of this realm: either way only the sandbox describes it.
    throw this.control.makeTypeError(`import of "${typeof specifier === 'string' ? specifier : '?'}" failed: ${this.control.describe(failure)}`);
  }

  async load() {
    // DOC-1..6 in the sandbox realm, loaded before worker code so that it
    // captures the realm's intrinsics unpatched. Proxies are told apart by
    // node's own check, which stays in the checker's closure, out of worker
    // code's reach.
    const checkDocument = DOCUMENT.runInContext(this.realm)({ isProxy: types.isProxy });
    const installWorkflow = WORKFLOW.runInContext(this.realm);
    this.control = SANDBOX.runInContext(this.realm)(bridgeOf(this), { installWorkflow, checkDocument });
    const mainName = this.mainModule.replace(/^\.\//, '');
    if (!this.sources.has(mainName)) throw new Error(`main module "${mainName}" is not among the modules`);
    const main = this.moduleFor(mainName);
    await this.loadJob(main);
    this.control.setMain(main.namespace);
    return JSON.parse(this.control.loadInfo());
  }

  // A value worker code threw is described by the sandbox (it returns a
  // string); this realm never reads its properties, calls its methods or
  // formats it, since each of those can run worker code with our objects.
  describe(e) {
    try {
      const d = this.control ? this.control.describe(e) : null;
      return typeof d === 'string' ? d.slice(0, MAX_ERROR_TEXT) : 'module failed to load';
    } catch { return 'module failed to load'; }
  }

  drop() {
    this.dead = true;
    clearTimers(this);
    contexts.delete(this.id);
    bySlot.delete(this.slot);
  }
}

const names = (list) => (Array.isArray(list) ? list.filter((n) => typeof n === 'string').slice(0, 1024).map((n) => text(n, 256)) : []);

async function open(msg) {
  const ctx = new Context(msg.ctx, msg.slot, msg.modules, msg.mainModule);
  contexts.set(ctx.id, ctx);
  bySlot.set(ctx.slot, ctx);
  mark(ctx.slot); // module evaluation is worker code
  checkBuffersSoon();
  let info;
  try {
    info = await ctx.load();
  } catch (e) {
    info = { loadError: ctx.describe(e) };
  }
  checkBuffersSoon();
  if (ctx.dead) return;
  ctx.loadInfo = info;
  post(info.loadError
    ? { type: 'loaded', ctx: ctx.id, loadError: text(String(info.loadError), MAX_ERROR_TEXT) }
    : { type: 'loaded', ctx: ctx.id, handlers: names(info.handlers), workflowClasses: names(info.workflowClasses) });
}

// Whatever reaches this thread's top level uncaught (a timer, a finalizer, a
// rejection nobody handled) is caught here, not formatted by Node's
// util.inspect (which calls methods of the value and hands them our objects),
// and charged to the context entered last.
process.on('uncaughtException', () => {
  post({ type: 'log', ctx: bySlot.get(meter[0])?.id ?? null, level: 'error', text: 'uncaught exception in worker code' });
});
process.on('unhandledRejection', (e) => {
  const ctx = bySlot.get(meter[0]);
  post({ type: 'log', ctx: ctx?.id ?? null, level: 'error', text: `unhandled rejection: ${ctx ? ctx.describe(e) : 'in worker code'}` });
});

const failedQueue = (message) => ({ ok: false, reason: 'threw', error: { name: 'Error', message, hostError: false } });

// Messages of the main thread, by type; a new operation is one entry. A
// message for a context this cell no longer holds is dropped (its stop won).
const onMain = {
  open(msg) { open(msg); },
  drop(msg) {
    contexts.get(msg.ctx)?.drop();
    post({ type: 'dropped', ctx: msg.ctx });
  },
  invoke_queue(msg, ctx) {
    if (ctx.loadInfo.loadError) {
      post({ type: 'invoke_result', ctx: ctx.id, invocationId: msg.invocationId, result: failedQueue(ctx.loadInfo.loadError) });
    } else {
      enter(ctx, () => ctx.control.invokeQueue(JSON.stringify(msg.batch), JSON.stringify(msg.env), msg.invocationId));
    }
  },
  invoke_workflow(msg, ctx) {
    if (ctx.loadInfo.loadError) {
      post({ type: 'invoke_result', ctx: ctx.id, invocationId: msg.invocationId, outcome: { kind: 'errored', reason: 'run_threw', message: ctx.loadInfo.loadError } });
    } else {
      enter(ctx, () => ctx.control.invokeWorkflow(JSON.stringify(msg.invocation), JSON.stringify(msg.env), msg.invocationId));
    }
  },
  host_reply(msg, ctx) {
    enter(ctx, () => ctx.control.deliverReply(msg.callId, msg.ok, JSON.stringify(msg.ok ? (msg.value ?? null) : msg.error)));
  },
};
const CELL_OPS = new Set(['open', 'drop']);
parentPort.on('message', (msg) => {
  const handler = Object.hasOwn(onMain, msg.type) ? onMain[msg.type] : null;
  if (!handler) return;
  if (CELL_OPS.has(msg.type)) return handler(msg);
  const ctx = contexts.get(msg.ctx);
  if (ctx && ctx.loadInfo) handler(msg, ctx);
});
