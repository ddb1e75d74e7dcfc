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

const WORKER_URL = new URL('./context_worker.mjs', import.meta.url);
const DEFAULT_LIMITS = { cpuMs: 30000, heapMb: 128, wallMs: 900000 };
const contexts = new Map();
// Log frames are dropped (and counted) while this much output waits for
// Python to read it: a worker logging in a loop costs its own CPU budget, not
// the runtime's memory. Frames that carry results or host calls are never
// dropped; they are bounded by the sandbox's caps on calls in flight.
const LOG_BACKLOG = 8 * 1024 * 1024;

// Writes one frame; false if it could not be written (too large for the
// channel), in which case the caller stops the context it belongs to.
function send(msg) {
  const frame = encodeFrame(msg);
  if (frame === null) return false;
  process.stdout.write(frame);
  return true;
}

class Context {
  constructor(id, modules, mainModule, limits) {
    this.id = id;
    this.limits = {
      cpuMs: limits?.cpuMs || DEFAULT_LIMITS.cpuMs,
      heapMb: limits?.heapMb || DEFAULT_LIMITS.heapMb,
      wallMs: limits?.wallMs || DEFAULT_LIMITS.wallMs,
    };
    this.ready = null;            // promise of load info
    this.invocations = new Map(); // invocationId -> reqId
    this.stopReason = null;       // set once termination is decided; gates all output
    this.stopWaiters = [];
    this.exited = false;
    this.nextInvocation = 1;
    this.budgetStart = null;
    this.wallStart = null;
    this.droppedLogs = 0;

    this.worker = new Worker(WORKER_URL, {
      // ArrayBuffer memory counts against the same limit as the heap (sandbox.js).
      workerData: { contextId: id, modules, mainModule, bufferBytes: this.limits.heapMb * 1024 * 1024 },
      resourceLimits: { maxOldGenerationSizeMb: this.limits.heapMb },
      stdout: true, stderr: true, // worker code cannot reach process.stdout, but keep our frame channel safe regardless
    });
    this.worker.stdout.resume();
    this.worker.stderr.resume();
    this.ready = new Promise((resolve) => { this.resolveReady = resolve; });
    this.startBudget();
    this.worker.on('message', (m) => this.onMessage(m));
    this.worker.on('error', (e) => {
      this.decideStop(e && e.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'heap_limit' : 'threw', e);
    });
    this.worker.on('exit', () => this.onExit());
  }

  // CPU is measured as the worker's event-loop active time (busy, not idle
  // waiting for host replies or timers), read from this thread while the
  // worker may be spinning. It is wall time spent running, so it
  // over-approximates CPU when the OS deschedules the thread.
  busyMs() {
    return this.exited ? 0 : this.worker.performance.eventLoopUtilization().active;
  }
  startBudget() {
    this.budgetStart = this.busyMs();
    this.wallStart = Date.now();
  }
  checkBudget() {
    if (this.stopReason) return;
    if (this.busyMs() - this.budgetStart > this.limits.cpuMs) this.decideStop('cpu_limit');
    else if (this.limits.wallMs && Date.now() - this.wallStart > this.limits.wallMs) this.decideStop('wall_limit');
  }

  onMessage(m) {
    if (this.stopReason) return; // nothing from a stopping context reaches Python (WF-46)
    const handler = m !== null && typeof m === 'object' && Object.hasOwn(fromWorker, m.type) ? fromWorker[m.type] : null;
    if (!handler) return this.decideStop('threw', new Error('unknown message from the context'));
    // Every frame to Python is built here, field by field: the runtime's own
    // fields (op, reqId, contextId) are never taken from the worker's message.
    if (handler(this, m) === false) this.decideStop('threw', new Error(`${m.type} too large for the channel`));
  }

  log(level, text) {
    if (process.stdout.writableLength > LOG_BACKLOG) { this.droppedLogs++; return true; }
    if (this.droppedLogs) {
      send({ op: 'log', contextId: this.id, level: 'warn', text: `${this.droppedLogs} log lines dropped (output backlog)` });
      this.droppedLogs = 0;
    }
    return send({ op: 'log', contextId: this.id, level, text });
  }

  invoke(reqId, message) { // message: {type: 'invoke_queue', batch, env} | {type: 'invoke_workflow', invocation, env}
    if (this.stopReason) {
      send(invokeResult(reqId, this.id, stoppedResult(this.stopReason)));
      return;
    }
    const invocationId = this.nextInvocation++;
    this.invocations.set(invocationId, reqId);
    this.startBudget();
    this.worker.postMessage({ ...message, invocationId });
  }

  decideStop(reason, error) {
    if (this.stopReason) return;
    this.stopReason = reason;
    this.stopError = error;
    this.resolveReady({ loadError: `context stopped: ${reason}` });
    if (!this.exited) this.worker.terminate();
  }

  onExit() {
    this.exited = true;
    if (!this.stopReason) this.stopReason = 'stopped';
    this.resolveReady({ loadError: `context stopped: ${this.stopReason}` });
    for (const reqId of this.invocations.values()) {
      send(invokeResult(reqId, this.id, stoppedResult(this.stopReason, this.stopError)));
    }
    this.invocations.clear();
    contexts.delete(this.id);
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

// What a context's worker thread may say, by type (context_worker.mjs checked
// and built each message; these take only the fields they need).
const isId = (v) => Number.isSafeInteger(v) && v > 0;
const fromWorker = {
  loaded(c, m) {
    c.resolveReady(typeof m.loadError === 'string'
      ? { loadError: m.loadError }
      : { handlers: m.handlers, workflowClasses: m.workflowClasses });
  },
  log(c, m) {
    return c.log(m.level, m.text);
  },
  host_call(c, m) {
    if (!isId(m.callId) || typeof m.method !== 'string') return true;
    return send({ op: 'host_call', contextId: c.id, callId: m.callId, method: m.method, args: m.args });
  },
  invoke_result(c, m) {
    const reqId = c.invocations.get(m.invocationId);
    if (reqId === undefined) return true;
    c.invocations.delete(m.invocationId);
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
  };
  const message = messages[reason] || `context crashed: ${String(error && error.message).slice(0, 2048)}`;
  return { ok: false, reason: messages[reason] ? reason : 'threw', error: { name: 'Error', message, hostError: false } };
}

setInterval(() => { for (const c of contexts.values()) c.checkBudget(); }, 10).unref();

const ops = {
  async start_context(f) {
    if (contexts.has(f.contextId)) throw Object.assign(new Error(`context ${f.contextId} exists`), { name: 'invalid_request' });
    const c = new Context(f.contextId, f.modules, f.mainModule, f.limits);
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
    if (c && !c.stopReason) c.worker.postMessage({ type: 'host_reply', callId: f.callId, ok: f.ok, value: f.value, error: f.error });
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
