// The JavaScript runtime process. Python starts it as
//   node --experimental-permission --allow-fs-read=<this dir> --allow-worker
//        --experimental-vm-modules --no-warnings host.mjs
// and talks to it over stdin/stdout in frames: 4-byte big-endian length +
// UTF-8 JSON. stdout carries nothing else.
//
// Permission model (Node 20): no fs writes, fs reads only of this directory,
// no child processes, no native addons. --allow-worker is needed because each
// execution context is a worker thread; workers inherit the same permission
// set, and worker code never sees `Worker` anyway (see sandbox.js). Node 20's
// permission model has no network switch: network is kept out by the clean
// vm global, which offers no socket API.
import { Worker } from 'node:worker_threads';
import { createFrameReader, encodeFrame } from './frames.mjs';

const CELL_URL = new URL('./cell.mjs', import.meta.url);
const DEFAULT_LIMITS = { cpuMs: 30000, heapMb: 128, wallMs: 900000 };
// A shared cell holds contexts of one Version only (same code, same Space):
// at most CELL_CONTEXTS at once, CELL_PLACEMENTS over its life (then it
// retires and its thread ends with its last context, which bounds whatever
// dropped contexts leave in its heap). An idle cell ends after CELL_IDLE_MS.
const CELL_CONTEXTS = 32;
const CELL_PLACEMENTS = 256;
const CELL_IDLE_MS = 10000;
// A drop the cell has not confirmed in this time (the context's code is
// running, or the cell is stuck) is made certain by ending the thread.
const DROP_GRACE_MS = 2000;
const contexts = new Map();
const cells = new Set();
// Log frames are dropped (and counted) while this much output waits for
// Python to read it: a worker logging in a loop costs its own CPU budget, not
// the runtime's memory. Frames that carry results or host calls are never
// dropped; they are bounded by the sandbox's caps on calls in flight.
const LOG_BACKLOG = 8 * 1024 * 1024;
// Each context's lines are bounded here too, by the same token bucket as the Host's
// (sumi/runtime/_lograte.py): a worker printing in a loop then costs the Host a counter, not a
// frame per line. What is refused is counted and told in one frame (`dropped`).
const LOG_RATE = 100;
const LOG_BURST = 500;

// Writes one frame; false if it could not be written (too large for the
// channel), in which case the caller stops the context it belongs to.
function send(msg) {
  const frame = encodeFrame(msg);
  if (frame === null) return false;
  process.stdout.write(frame);
  return true;
}

// One worker thread: its own isolate, heap limit and event loop. Limits are
// enforced here, from outside the thread: CPU as the thread's event-loop
// active time charged to the context whose code ran (cell.mjs keeps the
// meter), memory as the thread's heap limit. A breach ends the thread; the
// context that breached stops with the limit's reason, and the others in the
// cell with `evicted`: they did nothing wrong, and their engine runs them
// again alone. A heap breach in a cell of several contexts cannot be charged
// to one, so all are evicted; run alone, the culprit then breaches by itself.
class Cell {
  constructor(key, limits) {
    this.key = key; // null: a solo cell, for exactly one context
    this.limits = limits;
    this.capacity = key === null ? 1 : CELL_CONTEXTS;
    this.contexts = new Map(); // id -> Context
    this.placed = 0;
    this.ended = false;
    this.idleTimer = null;
    this.meterBuffer = new SharedArrayBuffer(8 * (2 + CELL_PLACEMENTS));
    this.meter = new Float64Array(this.meterBuffer);
    this.wake = new Int32Array(new SharedArrayBuffer(4)); // 0: the budget checks sleep, told of the next entry
    this.waking = false;
    this.worker = new Worker(CELL_URL, {
      // ArrayBuffer memory counts against the same limit as the heap (sandbox.js).
      workerData: { meter: this.meterBuffer, wake: this.wake.buffer, bufferBytes: limits.heapMb * 1024 * 1024 },
      resourceLimits: { maxOldGenerationSizeMb: limits.heapMb },
      stdout: true, stderr: true, // worker code cannot reach process.stdout, but keep our frame channel safe regardless
    });
    this.worker.stdout.resume();
    this.worker.stderr.resume();
    this.worker.on('message', (m) => this.onMessage(m));
    this.worker.on('error', (e) => {
      this.end(null, e && e.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'heap_limit' : 'threw', e);
    });
    this.worker.on('exit', () => this.onExit());
    cells.add(this);
  }

  hasRoom(key, limits) {
    return !this.ended && this.key === key && this.limits.heapMb === limits.heapMb
      && this.contexts.size < this.capacity && this.placed < CELL_PLACEMENTS;
  }

  place(ctx, modules, mainModule) {
    clearTimeout(this.idleTimer);
    ctx.slot = ++this.placed;
    this.contexts.set(ctx.id, ctx);
    this.worker.postMessage({ type: 'open', ctx: ctx.id, slot: ctx.slot, modules, mainModule });
    checkSoon();
  }

  post(msg) {
    if (this.ended) return;
    this.worker.postMessage(msg);
    checkSoon();
  }

  // While the checks sleep, the thread's next entry into a context's code (a timer of its own,
  // say) wakes them at once: cell.mjs flips `wake` and notifies.
  armWake() {
    if (this.waking || this.ended) return;
    Atomics.store(this.wake, 0, 0);
    const r = Atomics.waitAsync(this.wake, 0, 0);
    if (!r.async) return checkSoon();
    this.waking = true;
    waits += 1;
    r.value.then(() => { this.waking = false; waits -= 1; checkSoon(); });
  }

  // An ended cell's wait is settled, not left pending: a pending one would keep the cell.
  unwait() {
    if (!this.waking) return;
    Atomics.store(this.wake, 0, 1);
    Atomics.notify(this.wake, 0);
  }

  active() {
    return this.ended ? 0 : this.worker.performance.eventLoopUtilization().active;
  }

  // Active time charged to a slot so far.
  usedMs(slot) {
    const m = this.meter;
    return m[1 + slot] + (m[0] === slot ? this.active() - m[1] : 0);
  }

  running(slot) {
    return this.meter[0] === slot;
  }

  onMessage(m) {
    if (m !== null && typeof m === 'object' && m.type === 'dropped') {
      this.contexts.get(m.ctx)?.gone();
      return;
    }
    if (m !== null && typeof m === 'object' && m.type === 'buffers_over') {
      this.end(null, 'heap_limit'); // as a heap breach: the thread's buffers, not one context's
      return;
    }
    const ctx = m !== null && typeof m === 'object' ? this.contexts.get(m.ctx) : undefined;
    if (ctx) ctx.onMessage(m);
    else if (m === null || typeof m !== 'object' || m.ctx !== null) this.end(null, 'threw', new Error('unknown message from a cell'));
  }

  // Ends the thread. `culprit` (or, in a cell of one, its only context) stops
  // with `reason`; every other context of the cell with `evicted`.
  end(culprit, reason, error) {
    if (this.ended) return;
    this.ended = true;
    cells.delete(this);
    clearTimeout(this.idleTimer);
    this.unwait();
    const alone = this.contexts.size === 1;
    for (const ctx of this.contexts.values()) {
      ctx.decided(ctx === culprit || alone ? reason : 'evicted', error);
    }
    this.worker.terminate();
  }

  onExit() {
    this.ended = true;
    cells.delete(this);
    clearTimeout(this.idleTimer);
    this.unwait();
    for (const ctx of [...this.contexts.values()]) ctx.gone(); // 'stopped', unless a reason was decided
  }

  // A context left the cell (dropped or gone with it).
  release(ctx) {
    this.contexts.delete(ctx.id);
    if (this.ended || this.contexts.size) return;
    if (this.key === null || this.placed >= CELL_PLACEMENTS) this.end(null, 'stopped');
    else this.idleTimer = setTimeout(() => this.end(null, 'stopped'), CELL_IDLE_MS).unref();
  }
}

function cellFor(key, limits) {
  if (key !== null) {
    for (const cell of cells) if (cell.hasRoom(key, limits)) return cell;
  }
  return new Cell(key, limits);
}

class Context {
  constructor(id, key, modules, mainModule, limits) {
    this.id = id;
    this.limits = {
      cpuMs: limits?.cpuMs || DEFAULT_LIMITS.cpuMs,
      heapMb: limits?.heapMb || DEFAULT_LIMITS.heapMb,
      wallMs: limits?.wallMs || DEFAULT_LIMITS.wallMs,
    };
    this.ready = null;            // promise of load info
    this.invocations = new Map(); // invocationId -> reqId
    this.stopReason = null;       // set once termination is decided; gates all output
    this.stopError = null;
    this.stopWaiters = [];
    this.exited = false;
    this.nextInvocation = 1;
    this.budgetStart = 0;
    this.wallStart = Date.now();
    this.stepCalls = new Map(); // callId -> step name, of step calls the Host has not answered
    this.steps = new Set();     // step names this context's execution has seen completed
    this.droppedLogs = 0;
    this.logTokens = LOG_BURST;
    this.logAt = Date.now();
    this.dropTimer = null;
    this.ready = new Promise((resolve) => { this.resolveReady = resolve; });
    this.cell = cellFor(typeof key === 'string' && key ? key : null, this.limits);
    this.cell.place(this, modules, mainModule);
    this.startBudget();
  }

  // The CPU and wall budgets run from here to the next start: an invocation,
  // or (in a workflow) the Host's answer that completes a step (docs/decisions.md).
  startBudget() {
    this.budgetStart = this.cell.usedMs(this.slot);
    this.wallStart = Date.now();
  }
  checkBudget() {
    if (this.stopReason) return;
    if (this.cell.usedMs(this.slot) - this.budgetStart > this.limits.cpuMs) this.decideStop('cpu_limit');
    else if (this.limits.wallMs && Date.now() - this.wallStart > this.limits.wallMs) this.decideStop('wall_limit');
  }

  onMessage(m) {
    if (this.stopReason) return; // nothing from a stopping context reaches Python (WF-46)
    const handler = Object.hasOwn(fromWorker, m.type) ? fromWorker[m.type] : null;
    if (!handler) return this.decideStop('threw', new Error('unknown message from the context'));
    // Every frame to Python is built here, field by field: the runtime's own
    // fields (op, reqId, contextId) are never taken from the worker's message.
    if (handler(this, m) === false) this.decideStop('threw', new Error(`${m.type} too large for the channel`));
  }

  log(level, text, step) {
    const now = Date.now();
    this.logTokens = Math.min(LOG_BURST, this.logTokens + ((now - this.logAt) / 1000) * LOG_RATE);
    this.logAt = now;
    if (this.logTokens < 1 || process.stdout.writableLength > LOG_BACKLOG) { this.droppedLogs++; return true; }
    this.logTokens -= 1;
    this.tellDropped();
    return send({ op: 'log', contextId: this.id, level, text, ...(step === undefined ? {} : { step }) });
  }

  tellDropped() {
    if (!this.droppedLogs) return;
    send({ op: 'log', contextId: this.id, level: 'warn', text: 'log lines dropped', dropped: this.droppedLogs });
    this.droppedLogs = 0;
  }

  invoke(reqId, message) { // message: {type: 'invoke_queue', batch, env} | {type: 'invoke_workflow', invocation, env}
    if (this.stopReason) {
      send(invokeResult(reqId, this.id, stoppedResult(this.stopReason)));
      return;
    }
    const invocationId = this.nextInvocation++;
    this.invocations.set(invocationId, reqId);
    this.steps = new Set(message.type === 'invoke_workflow' ? Object.keys(message.invocation?.completed ?? {}) : []);
    this.startBudget();
    this.cell.post({ ...message, ctx: this.id, invocationId });
  }

  // Stops the context: a solo cell's thread ends; in a shared cell the
  // context is dropped, unless its code is running now or it hit a limit
  // there, which only ending the thread stops for certain.
  decideStop(reason, error) {
    if (this.stopReason) return;
    this.decided(reason, error);
    const limit = reason === 'cpu_limit' || reason === 'heap_limit';
    if (this.cell.capacity === 1 || (limit && this.cell.running(this.slot))) {
      this.cell.end(this, reason, error);
      return;
    }
    this.cell.post({ type: 'drop', ctx: this.id });
    this.dropTimer = setTimeout(() => this.cell.end(this, reason, error), DROP_GRACE_MS).unref();
  }

  decided(reason, error) {
    if (this.stopReason) return;
    this.stopReason = reason;
    this.stopError = error;
    this.resolveReady({ loadError: `context stopped: ${reason}` });
  }

  // A step call the Host answered. Only the first answer that completes a step
  // name starts a new budget: every such answer is a step the Host recorded
  // (at most WF-38's count), whereas a completed name can be asked again for free.
  stepAnswered(callId, ok, value) {
    const name = this.stepCalls.get(callId);
    if (name === undefined) return;
    this.stepCalls.delete(callId);
    const action = ok && value !== null && typeof value === 'object' ? value.action : undefined;
    if ((action === 'resolve' || action === 'reject') && !this.steps.has(name)) {
      this.steps.add(name);
      this.startBudget();
    }
  }

  // The context's code can never run toward the host again: dropped by its
  // cell, or the cell's thread is gone.
  gone() {
    if (this.exited) return;
    this.exited = true;
    clearTimeout(this.dropTimer);
    if (!this.stopReason) this.stopReason = 'stopped';
    this.resolveReady({ loadError: `context stopped: ${this.stopReason}` });
    for (const reqId of this.invocations.values()) {
      send(invokeResult(reqId, this.id, stoppedResult(this.stopReason, this.stopError)));
    }
    this.invocations.clear();
    contexts.delete(this.id);
    this.cell.release(this);
    send({ op: 'context_stopped', contextId: this.id, reason: this.stopReason });
    for (const w of this.stopWaiters) w();
  }

  stop() {
    return new Promise((resolve) => {
      if (this.exited) return resolve();
      this.stopWaiters.push(resolve);
      this.decideStop('stopped');
    });
  }
}

// What a context may say through its cell, by type (cell.mjs checked and
// built each message; these take only the fields they need).
const isId = (v) => Number.isSafeInteger(v) && v > 0;
const fromWorker = {
  loaded(c, m) {
    c.resolveReady(typeof m.loadError === 'string'
      ? { loadError: m.loadError }
      : { handlers: m.handlers, workflowClasses: m.workflowClasses });
  },
  log(c, m) {
    return c.log(m.level, m.text, typeof m.step === 'string' ? m.step : undefined);
  },
  host_call(c, m) {
    if (!isId(m.callId) || typeof m.method !== 'string') return true;
    if (m.method.startsWith('step.') && typeof m.args?.name === 'string') c.stepCalls.set(m.callId, m.args.name);
    return send({ op: 'host_call', contextId: c.id, callId: m.callId, method: m.method, args: m.args });
  },
  invoke_result(c, m) {
    const reqId = c.invocations.get(m.invocationId);
    if (reqId === undefined) return true;
    c.invocations.delete(m.invocationId);
    c.tellDropped(); // before the result: the Host tells an invocation's drops when it ends
    return send(m.outcome !== undefined ? { op: 'invoke_result', reqId, contextId: c.id, ...m.outcome } : invokeResult(reqId, c.id, m.result));
  },
};

function invokeResult(reqId, contextId, r) {
  const frame = { op: 'invoke_result', reqId, contextId, ok: r.ok === true };
  if (!frame.ok) {
    frame.reason = r.reason;
    frame.error = { name: r.error.name, message: r.error.message, hostError: r.error.hostError === true };
  }
  return frame;
}

function stoppedResult(reason, error) {
  const messages = {
    cpu_limit: 'context exceeded its CPU time limit and was stopped',
    wall_limit: 'context exceeded its wall-clock limit and was stopped',
    heap_limit: 'context exceeded its memory limit and was stopped',
    stopped: 'context was stopped',
    evicted: 'context was stopped with the other contexts of its worker thread, one of which exceeded a limit',
  };
  const message = Object.hasOwn(messages, reason) ? messages[reason] : `context crashed: ${String(error && error.message).slice(0, 2048)}`;
  return { ok: false, reason: messages[reason] ? reason : 'threw', error: { name: 'Error', message, hostError: false } };
}

// The budgets are looked at every 10 ms while a cell's thread works, every 100 ms while none
// did since the last look, and once a second after QUIET_AFTER such looks (issue 40: an idle
// runtime woke 10 times a second for nothing). Quiet does not mean late: work handed to a cell
// (a frame posted to it) and a thread's own entry into context code (a timer of a context's,
// told through `wake`) bring the 10 ms looks back at once; the 1 s look stays as the backstop
// for what starts otherwise (a promise settled from Node's thread pool).
const BUSY_CHECK_MS = 10;
const IDLE_CHECK_MS = 100;
const QUIET_CHECK_MS = 1000;
const QUIET_AFTER = 10;
const BUSY_ACTIVE_MS = 1; // an idle thread's active time still jitters by microseconds
const lastActive = new WeakMap(); // cell -> its thread's active time at the last look
let quietLooks = 0;
let waits = 0; // cells whose wake is awaited
let checkTimer = null;
let checkDelay = 0;
function checkBudgets() {
  for (const c of contexts.values()) c.checkBudget();
  let busy = false;
  for (const cell of cells) {
    const active = cell.active();
    if (Math.abs(active - (lastActive.get(cell) ?? -Infinity)) > BUSY_ACTIVE_MS) busy = true;
    lastActive.set(cell, active);
  }
  quietLooks = busy ? 0 : quietLooks + 1;
  checkDelay = busy ? BUSY_CHECK_MS : quietLooks < QUIET_AFTER ? IDLE_CHECK_MS : QUIET_CHECK_MS;
  if (checkDelay === QUIET_CHECK_MS) for (const cell of cells) cell.armWake();
  checkTimer = setTimeout(checkBudgets, checkDelay).unref();
}
function checkSoon() {
  quietLooks = 0;
  if (checkDelay <= BUSY_CHECK_MS) return;
  clearTimeout(checkTimer);
  checkDelay = BUSY_CHECK_MS;
  checkTimer = setTimeout(checkBudgets, BUSY_CHECK_MS).unref();
}
checkBudgets();

const ops = {
  async start_context(f) {
    if (contexts.has(f.contextId)) throw Object.assign(new Error(`context ${f.contextId} exists`), { name: 'invalid_request' });
    const c = new Context(f.contextId, f.share, f.modules, f.mainModule, f.limits);
    contexts.set(f.contextId, c);
    const info = await c.ready;
    return { op: 'started', loadError: info.loadError ?? null };
  },
  async load_info(f) {
    const info = await getContext(f.contextId).ready;
    return info.loadError ? { op: 'load_info_result', loadError: info.loadError }
      : { op: 'load_info_result', handlers: info.handlers, workflowClasses: info.workflowClasses };
  },
  async invoke_queue(f) {
    const c = contexts.get(f.contextId);
    if (!c) return invokeResult(f.reqId, f.contextId, stoppedResult('stopped'));
    await c.ready;
    c.invoke(f.reqId, { type: 'invoke_queue', batch: f.batch, env: f.env });
    return null; // answered by the context
  },
  async invoke_workflow(f) {
    const c = contexts.get(f.contextId);
    if (!c) return invokeResult(f.reqId, f.contextId, stoppedResult('stopped'));
    await c.ready;
    c.invoke(f.reqId, { type: 'invoke_workflow', invocation: f.invocation, env: f.env });
    return null; // answered by the context: one outcome frame (complete | errored | suspended)
  },
  async host_reply(f) {
    const c = contexts.get(f.contextId);
    if (c && !c.stopReason) c.stepAnswered(f.callId, f.ok, f.value);
    if (c && !c.stopReason) c.cell.post({ type: 'host_reply', ctx: c.id, callId: f.callId, ok: f.ok, value: f.value, error: f.error });
    return null;
  },
  async stop_context(f) {
    const c = contexts.get(f.contextId);
    if (c) await c.stop();
    return { op: 'stopped', contextId: f.contextId };
  },
};

// Test only: the Python side starts the process with this variable solely
// when a test asks for it (the walls clear the environment otherwise). It
// runs code here, in the runtime process, as an escape from the vm would.
if (process.env.SUMI_JS_TEST_HOOKS === '1') {
  const AsyncFunction = (async () => {}).constructor;
  ops.debug_eval = async (f) => ({ op: 'debug_eval_result', value: await new AsyncFunction('send', f.code)(send) ?? null });
  globalThis.sumiCells = () => [...cells].map((c) => ({ key: c.key, contexts: c.contexts.size }));
  globalThis.sumiWaits = () => waits;
}

function getContext(id) {
  const c = contexts.get(id);
  if (!c) throw Object.assign(new Error(`no context ${id}`), { name: 'unknown_context' });
  return c;
}

async function dispatch(frame) {
  const handler = ops[frame.op];
  try {
    if (!handler) throw Object.assign(new Error(`unknown op ${frame.op}`), { name: 'invalid_request' });
    const reply = await handler(frame);
    if (reply) send({ ...reply, reqId: frame.reqId, contextId: frame.contextId }); // replies built in this file
  } catch (e) {
    send({ op: 'error', reqId: frame.reqId, contextId: frame.contextId, error: { name: String(e.name), message: String(e.message) } });
  }
}

process.stdin.on('data', createFrameReader(dispatch));
process.stdin.on('end', () => process.exit(0));
