// One execution context = one worker thread running this file. The thread
// owns a vm context with a clean global (sandbox.js) and the Version's ES
// modules linked inside it. A thread (not just a vm context) per execution
// context is what gives a separate heap with its own limit, and what lets the
// main thread stop the code physically with worker.terminate() (WF-26, WF-46).
import { parentPort, workerData } from 'node:worker_threads';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const post = (msg) => parentPort.postMessage(msg);

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
        const [level, text] = JSON.parse(payload);
        post({ type: 'log', level, text });
        return undefined;
      }
      case 'call': {
        const [callId, method, args] = JSON.parse(payload);
        post({ type: 'host_call', callId, method, args });
        return undefined;
      }
      case 'result': {
        const [invocationId, result] = JSON.parse(payload);
        post({ type: 'invoke_result', invocationId, ...result });
        return undefined;
      }
      case 'timer_set': {
        const [id, ms] = JSON.parse(payload);
        timers.set(id, setTimeout(() => { timers.delete(id); control.fireTimer(id); }, ms));
        return undefined;
      }
      case 'timer_clear': {
        const [id] = JSON.parse(payload);
        clearTimeout(timers.get(id));
        timers.delete(id);
        return undefined;
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

// Every failure here must reach worker code as an Error of the sandbox realm.
async function dynamicImport(specifier, referrer) {
  let m;
  try {
    m = moduleFor(resolve(specifier, referrer.identifier.slice(ROOT.length)));
    if (m.status === 'unlinked') await m.link(linker);
  } catch (e) {
    throw control.makeTypeError(e && e.message);
  }
  if (m.status === 'linked') await m.evaluate();
  return m;
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
  const { checkDocument } = await runtimeModule('./document.mjs');
  const installWorkflow = runtimeScript('./workflow.js');
  control = runtimeScript('./sandbox.js')(bridge, { installWorkflow, checkDocument });
  const mainName = workerData.mainModule.replace(/^\.\//, '');
  if (!sources.has(mainName)) throw new Error(`main module "${mainName}" is not among the modules`);
  const main = moduleFor(mainName);
  await main.link(linker);
  await main.evaluate();
  control.setMain(main.namespace);
  return JSON.parse(control.loadInfo());
}

const describeLoadError = (e) => {
  try { return `${e.name}: ${e.message}`; } catch { return 'module failed to load'; }
};

// Worker code's stray rejections must not take the thread down.
process.on('unhandledRejection', (e) => post({ type: 'log', level: 'error', text: `unhandled rejection: ${describeLoadError(e)}` }));

let loadInfo;
try {
  loadInfo = await load();
} catch (e) {
  loadInfo = { loadError: describeLoadError(e) };
}
post({ type: 'loaded', ...loadInfo });

parentPort.on('message', (msg) => {
  switch (msg.type) {
    case 'invoke_queue':
      if (loadInfo.loadError) {
        post({ type: 'invoke_result', invocationId: msg.invocationId, ok: false, reason: 'threw', error: { name: 'Error', message: loadInfo.loadError, hostError: false } });
      } else {
        control.invokeQueue(JSON.stringify(msg.batch), JSON.stringify(msg.env), msg.invocationId);
      }
      break;
    case 'invoke_workflow':
      if (loadInfo.loadError) {
        post({ type: 'invoke_result', invocationId: msg.invocationId, kind: 'errored', reason: 'run_threw', message: loadInfo.loadError });
      } else {
        control.invokeWorkflow(JSON.stringify(msg.invocation), JSON.stringify(msg.env), msg.invocationId);
      }
      break;
    case 'host_reply':
      control.deliverReply(msg.callId, msg.ok, JSON.stringify(msg.ok ? (msg.value ?? null) : msg.error));
      break;
    default:
      break;
  }
});
