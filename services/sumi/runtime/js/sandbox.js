// Evaluated as a classic script inside a fresh vm context, before any worker
// module. Its completion value is `install(bridge)`, which builds the whole
// global surface of the context and returns the control object the worker
// thread drives the context with.
//
// Invariant (the reason this file exists): no object of the worker thread's
// realm is ever reachable from worker code. A host-realm object hands out the
// host's `Function` via `.constructor.constructor`, and from there `process`.
// So every global here is built from this realm's intrinsics, the bridge
// passes and returns primitives only and never throws, and the host calls into
// the control object with primitives only. The alternative, exposing Node's
// own TextEncoder/URL/console, was rejected for exactly that leak.
//
// Intrinsics are captured before worker code runs, so a worker that patches
// Array.prototype or JSON breaks only its own code, not provenance or results.
(function () {
  'use strict';
  const { apply } = Reflect;
  const { defineProperty, freeze, getOwnPropertyDescriptor, create, keys } = Object;
  const { parse: jsonParse, stringify: jsonStringify } = JSON;
  const { fromCharCode } = String;
  const charCodeAt = String.prototype.charCodeAt;
  const WeakSetHas = WeakSet.prototype.has;
  const WeakSetAdd = WeakSet.prototype.add;
  const MapGet = Map.prototype.get;
  const MapSet = Map.prototype.set;
  const MapDelete = Map.prototype.delete;
  const PromiseThen = Promise.prototype.then;
  const isView = ArrayBuffer.isView;
  const _Error = Error;
  const _TypeError = TypeError;
  const _RangeError = RangeError;
  const _Uint8Array = Uint8Array;
  const _Promise = Promise;
  const _ArrayBuffer = ArrayBuffer;

  const hostErrors = new WeakSet();

  function makeError(Ctor, name, message) {
    const e = new Ctor(message);
    defineProperty(e, 'name', { value: name, writable: false, enumerable: false, configurable: false });
    return e;
  }

  // WF-44: the mark lives in a WeakSet only this closure can reach, so an
  // Error carrying a copied name is never mistaken for one the Host raised.
  function makeHostError(name, message) {
    const e = makeError(_Error, String(name), String(message));
    apply(WeakSetAdd, hostErrors, [e]);
    return e;
  }
  function isHostError(e) {
    return (typeof e === 'object' || typeof e === 'function') && e !== null && apply(WeakSetHas, hostErrors, [e]);
  }

  // ---- base64 / bytes -------------------------------------------------
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const B64_INDEX = new _Uint8Array(128).fill(255);
  for (let i = 0; i < 64; i++) B64_INDEX[apply(charCodeAt, B64, [i])] = i;

  function bytesToBase64(bytes) {
    let out = '';
    let i = 0;
    for (; i + 2 < bytes.length; i += 3) {
      const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      out += B64[n >> 18] + B64[(n >> 12) & 63] + B64[(n >> 6) & 63] + B64[n & 63];
    }
    if (i < bytes.length) {
      const n = (bytes[i] << 16) | ((i + 1 < bytes.length ? bytes[i + 1] : 0) << 8);
      out += B64[n >> 18] + B64[(n >> 12) & 63];
      out += i + 1 < bytes.length ? B64[(n >> 6) & 63] + '=' : '==';
    }
    return out;
  }

  // Returns null on malformed input instead of throwing: callers pick the error.
  function base64ToBytes(s) {
    s = s.replace(/[\t\n\f\r ]/g, '');
    if (s.length % 4 === 0) s = s.replace(/==?$/, '');
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) return null;
    const out = new _Uint8Array((s.length * 3) >> 2);
    let acc = 0, bits = 0, j = 0;
    for (let i = 0; i < s.length; i++) {
      acc = (acc << 6) | B64_INDEX[apply(charCodeAt, s, [i])];
      bits += 6;
      if (bits >= 8) { bits -= 8; out[j++] = (acc >> bits) & 255; }
    }
    return out;
  }

  function atob(data) {
    const bytes = base64ToBytes(String(data));
    if (bytes === null) throw makeError(_Error, 'InvalidCharacterError', 'atob: invalid base64');
    let s = '';
    for (let i = 0; i < bytes.length; i++) s += fromCharCode(bytes[i]);
    return s;
  }
  function btoa(data) {
    const s = String(data);
    const bytes = new _Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) {
      const c = apply(charCodeAt, s, [i]);
      if (c > 255) throw makeError(_Error, 'InvalidCharacterError', 'btoa: character out of Latin-1 range');
      bytes[i] = c;
    }
    return bytesToBase64(bytes);
  }

  // ---- UTF-8 ----------------------------------------------------------
  function utf8Encode(str) {
    const out = [];
    for (let i = 0; i < str.length; i++) {
      let c = apply(charCodeAt, str, [i]);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < str.length) {
        const d = apply(charCodeAt, str, [i + 1]);
        if (d >= 0xdc00 && d <= 0xdfff) { c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00); i++; }
      }
      if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return new _Uint8Array(out);
  }

  function utf8Decode(bytes, fatal) {
    let s = '';
    for (let i = 0; i < bytes.length;) {
      const b = bytes[i];
      let need = 0, cp = 0, min = 0;
      if (b < 0x80) { s += fromCharCode(b); i++; continue; }
      else if (b >= 0xc2 && b <= 0xdf) { need = 1; cp = b & 31; min = 0x80; }
      else if (b >= 0xe0 && b <= 0xef) { need = 2; cp = b & 15; min = 0x800; }
      else if (b >= 0xf0 && b <= 0xf4) { need = 3; cp = b & 7; min = 0x10000; }
      else need = -1;
      let ok = need > 0;
      for (let k = 1; ok && k <= need; k++) {
        const c = bytes[i + k];
        if (c === undefined || (c & 0xc0) !== 0x80) ok = false; else cp = (cp << 6) | (c & 63);
      }
      if (ok && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) ok = false;
      if (!ok) {
        if (fatal) throw makeError(_TypeError, 'TypeError', 'The encoded data was not valid for encoding utf-8');
        s += '\ufffd'; i++; continue;
      }
      if (cp >= 0x10000) { cp -= 0x10000; s += fromCharCode(0xd800 + (cp >> 10), 0xdc00 + (cp & 1023)); }
      else s += fromCharCode(cp);
      i += need + 1;
    }
    return s;
  }

  function toBytes(input, what) {
    if (input instanceof _ArrayBuffer) return new _Uint8Array(input);
    if (isView(input)) return new _Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    throw new _TypeError(`${what} must be an ArrayBuffer or ArrayBufferView`);
  }

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') { return utf8Encode(String(input)); }
    encodeInto(src, dest) {
      const bytes = utf8Encode(String(src));
      // Only whole characters are written; count back to the last lead byte that fits.
      let n = Math.min(bytes.length, dest.length);
      while (n < bytes.length && n > 0 && (bytes[n] & 0xc0) === 0x80) n--;
      dest.set(bytes.subarray(0, n));
      return { read: utf8Decode(bytes.subarray(0, n), false).length, written: n };
    }
  }

  class TextDecoder {
    #fatal; #ignoreBOM;
    constructor(label = 'utf-8', options = {}) {
      const l = String(label).trim().toLowerCase();
      if (l !== 'utf-8' && l !== 'utf8' && l !== 'unicode-1-1-utf-8') {
        throw new _RangeError(`TextDecoder: only utf-8 is supported, not "${label}"`);
      }
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return 'utf-8'; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input) {
      if (input === undefined) return '';
      let bytes = toBytes(input, 'TextDecoder.decode input');
      if (!this.#ignoreBOM && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) bytes = bytes.subarray(3);
      return utf8Decode(bytes, this.#fatal);
    }
  }

  // ---- structuredClone (pure: the host's would return host-realm objects)
  function structuredClone(value) {
    const seen = new Map();
    const clone = (v) => {
      if (typeof v === 'function' || typeof v === 'symbol') {
        throw makeError(_Error, 'DataCloneError', `${typeof v} could not be cloned`);
      }
      if (typeof v !== 'object' || v === null) return v;
      const prior = apply(MapGet, seen, [v]);
      if (prior !== undefined) return prior;
      let out;
      if (v instanceof Date) out = new Date(v.getTime());
      else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
      else if (v instanceof _ArrayBuffer) out = v.slice(0);
      else if (isView(v)) out = new v.constructor(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
      else if (v instanceof Map) { out = new Map(); apply(MapSet, seen, [v, out]); for (const [k, x] of v) out.set(clone(k), clone(x)); return out; }
      else if (v instanceof Set) { out = new Set(); apply(MapSet, seen, [v, out]); for (const x of v) out.add(clone(x)); return out; }
      else if (v instanceof _Error) { out = new _Error(v.message); apply(MapSet, seen, [v, out]); out.name = String(v.name); return out; }
      else if (Array.isArray(v)) { out = new Array(v.length); apply(MapSet, seen, [v, out]); for (const k of keys(v)) out[k] = clone(v[k]); return out; }
      else { out = {}; apply(MapSet, seen, [v, out]); for (const k of keys(v)) out[k] = clone(v[k]); return out; }
      apply(MapSet, seen, [v, out]);
      return out;
    };
    return clone(value);
  }

  // extensions: { installWorkflow, checkDocument }, both already evaluated in this realm
  // (workflow.js, document.mjs) by context_worker.mjs.
  return function install(bridge, extensions) {
    // bridge(kind, payload) -> string | undefined. Host side never throws.
    const global = globalThis;
    delete global.console;       // V8's inspector console: writes past our log routing
    delete global.WebAssembly;   // not ECMAScript; wasm code generation is off anyway

    const send = (kind, payload) => bridge(kind, payload);

    // ---- console --------------------------------------------------------
    const fmt = (v, depth, seen) => {
      if (typeof v === 'string') return depth === 0 ? v : jsonStringify(v);
      if (typeof v === 'bigint') return `${v}n`;
      if (typeof v === 'symbol' || typeof v === 'number' || typeof v === 'boolean' || v === undefined || v === null) return String(v);
      if (typeof v === 'function') return `[Function ${v.name || 'anonymous'}]`;
      if (v instanceof _Error) return v.stack ? String(v.stack) : `${v.name}: ${v.message}`;
      if (seen.has(v)) return '[Circular]';
      if (depth > 3) return Array.isArray(v) ? '[Array]' : '[Object]';
      seen.add(v);
      try {
        if (Array.isArray(v)) return `[ ${Array.prototype.map.call(v, (x) => fmt(x, depth + 1, seen)).join(', ')} ]`;
        const parts = [];
        for (const k of keys(v)) {
          const d = getOwnPropertyDescriptor(v, k);
          parts.push(`${k}: ${d && 'value' in d ? fmt(d.value, depth + 1, seen) : '[Getter]'}`);
        }
        return `{ ${parts.join(', ')} }`;
      } finally { seen.delete(v); }
    };
    const logger = (level) => (...args) => {
      let text;
      try { text = args.map((a) => fmt(a, 0, new Set())).join(' '); } catch { text = '[unformattable]'; }
      send('log', jsonStringify([level, text]));
    };
    const console = freeze({
      log: logger('info'), info: logger('info'), debug: logger('debug'),
      warn: logger('warn'), error: logger('error'), trace: logger('debug'),
    });

    // ---- timers ---------------------------------------------------------
    const timers = new Map();
    let nextTimer = 1;
    function setTimeout(fn, ms = 0, ...args) {
      if (typeof fn !== 'function') throw new _TypeError('setTimeout: callback must be a function');
      const id = nextTimer++;
      apply(MapSet, timers, [id, () => apply(fn, undefined, args)]);
      const delay = Number(ms) > 0 ? Math.min(Number(ms), 2147483647) : 0;
      send('timer_set', jsonStringify([id, delay]));
      return id;
    }
    function clearTimeout(id) {
      if (apply(MapDelete, timers, [id])) send('timer_clear', jsonStringify([id]));
    }

    // ---- crypto ---------------------------------------------------------
    const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
    const crypto = freeze({
      getRandomValues(array) {
        if (!INTEGER_ARRAYS.some((C) => array instanceof C)) {
          throw makeError(_TypeError, 'TypeMismatchError', 'getRandomValues: argument must be an integer TypedArray');
        }
        if (array.byteLength > 65536) throw makeError(_Error, 'QuotaExceededError', 'getRandomValues: at most 65536 bytes');
        const bytes = base64ToBytes(send('random', String(array.byteLength)));
        new _Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(bytes);
        return array;
      },
      randomUUID() { return send('uuid', ''); },
    });

    // ---- URL: parsed by the host (WHATWG parser), state kept here --------
    const urlCall = (op) => {
      const r = jsonParse(send('url', jsonStringify(op)));
      if (r.error) throw new _TypeError(r.error);
      return r.parts;
    };
    const URL_FIELDS = ['href', 'protocol', 'username', 'password', 'host', 'hostname', 'port', 'pathname', 'search', 'hash'];
    let partsOf, setParts;
    class URL {
      #parts;
      static {
        partsOf = (u) => u.#parts;
        setParts = (u, p) => { u.#parts = p; };
      }
      constructor(url, base) {
        this.#parts = urlCall({ url: String(url), base: base === undefined ? undefined : String(base) });
      }
      static canParse(url, base) {
        try { new URL(url, base); return true; } catch { return false; }
      }
      get origin() { return this.#parts.origin; }
      toString() { return this.#parts.href; }
      toJSON() { return this.#parts.href; }
    }
    for (const field of URL_FIELDS) {
      defineProperty(URL.prototype, field, {
        configurable: true, enumerable: true,
        get() { return partsOf(this)[field]; },
        set(v) { setParts(this, urlCall({ url: partsOf(this).href, set: [field, String(v)] })); },
      });
    }

    const globals = { console, TextEncoder, TextDecoder, URL, structuredClone, crypto, setTimeout, clearTimeout, atob, btoa };
    for (const name of keys(globals)) {
      defineProperty(global, name, { value: globals[name], writable: true, enumerable: false, configurable: true });
    }

    // ---- host calls -----------------------------------------------------
    const pending = new Map();
    let nextCall = 1;
    function hostCall(method, args) {
      const callId = nextCall++;
      return new _Promise((resolve, reject) => {
        apply(MapSet, pending, [callId, { resolve, reject }]);
        send('call', jsonStringify([callId, method, args]));
      });
    }

    const checkMessageId = (id, fn) => {
      if (typeof id !== 'string') throw new _TypeError(`${fn}: message id must be a string`);
    };
    const checkDelay = (delaySeconds, fn) => {
      if (delaySeconds === undefined) return;
      if (typeof delaySeconds !== 'number') throw new _TypeError(`${fn}: delaySeconds must be a number`);
      if (!Number.isInteger(delaySeconds) || delaySeconds < 0 || delaySeconds > 43200) {
        throw new _RangeError(`${fn}: delaySeconds must be an integer 0..43200`);
      }
    };
    // An async wrapper turns a synchronous validation throw into a rejection;
    // we throw synchronously instead so a bad argument never looks like a host failure.
    const withArgs = (base, extra) => {
      const out = { ...base };
      for (const k of keys(extra)) if (extra[k] !== undefined) out[k] = extra[k];
      return out;
    };
    const settle = (method, args) => apply(PromiseThen, hostCall(method, args), [() => undefined]);

    function makeBatch(spec) {
      const base = { batchId: spec.id };
      const messages = spec.messages.map((m) => freeze({
        id: m.id, timestamp: m.timestamp, attempts: m.attempts, body: base64ToBytes(m.body),
      }));
      return freeze({
        id: spec.id,
        queue: spec.queue,
        messages: freeze(messages),
        acknowledge(id) {
          checkMessageId(id, 'acknowledge');
          return settle('batch.acknowledge', withArgs(base, { messageId: id }));
        },
        retry(id, delaySeconds) {
          checkMessageId(id, 'retry');
          checkDelay(delaySeconds, 'retry');
          return settle('batch.retry', withArgs(base, { messageId: id, delaySeconds }));
        },
        acknowledgeAll() { return settle('batch.acknowledgeAll', base); },
        retryAll(delaySeconds) {
          checkDelay(delaySeconds, 'retryAll');
          return settle('batch.retryAll', withArgs(base, { delaySeconds }));
        },
      });
    }

    const SEND_KEYS = ['delaySeconds'];
    function encodeBody(body, fn) {
      if (typeof body === 'string') return bytesToBase64(utf8Encode(body));
      if (body instanceof _Uint8Array || body instanceof _ArrayBuffer) return bytesToBase64(toBytes(body, fn));
      throw new _TypeError(`${fn}: body must be a string, Uint8Array or ArrayBuffer`);
    }
    function encodeMessage(body, options, fn) {
      if (options !== undefined && (typeof options !== 'object' || options === null)) {
        throw new _TypeError(`${fn}: options must be an object`);
      }
      const opts = options || {};
      for (const k of keys(opts)) if (!SEND_KEYS.includes(k)) throw new _TypeError(`${fn}: unknown option "${k}"`);
      checkDelay(opts.delaySeconds, fn);
      return withArgs({ body: encodeBody(body, fn) }, { delaySeconds: opts.delaySeconds });
    }
    function makeQueueBinding(binding) {
      return freeze({
        send(body, options) {
          const msg = encodeMessage(body, options, 'send');
          return settle('queue.send', { binding, messages: [msg] });
        },
        sendBatch(entries) {
          if (!Array.isArray(entries) || entries.length === 0) {
            throw new _TypeError('sendBatch: expects a non-empty array of {body, delaySeconds?}');
          }
          const msgs = entries.map((e) => {
            if (typeof e !== 'object' || e === null) throw new _TypeError('sendBatch: each entry must be an object');
            const { body, ...rest } = e;
            return encodeMessage(body, rest, 'sendBatch');
          });
          return settle('queue.send', { binding, messages: msgs });
        },
      });
    }
    function makeEnv(spec) {
      const env = {};
      for (const name of keys(spec.vars || {})) env[name] = String(spec.vars[name]);
      for (const name of spec.queueBindings || []) env[name] = makeQueueBinding(name);
      for (const name of spec.workflowBindings || []) env[name] = workflow.makeBinding(name);
      return freeze(env);
    }

    const describe = (e) => {
      try {
        if (e instanceof _Error || (typeof e === 'object' && e !== null)) {
          return { name: String(e.name ?? 'Error'), message: String(e.message ?? ''), hostError: isHostError(e) };
        }
        return { name: 'Error', message: `non-Error thrown: ${String(e)}`, hostError: false };
      } catch {
        return { name: 'Error', message: 'unreadable error', hostError: false };
      }
    };

    const workflow = extensions && extensions.installWorkflow
      ? extensions.installWorkflow({ hostCall, makeHostError, checkDocument: extensions.checkDocument, describe })
      : null;

    let mainNs = null;
    return freeze({
      setMain(ns) { mainNs = ns; },
      loadInfo() {
        const info = { handlers: [], workflowClasses: [] };
        const def = mainNs.default;
        if (typeof def === 'object' && def !== null) {
          for (const k of keys(def)) if (typeof def[k] === 'function') info.handlers.push(k);
        }
        for (const k of keys(mainNs)) {
          const v = mainNs[k];
          if (k === 'default' || typeof v !== 'function') continue;
          const proto = getOwnPropertyDescriptor(v, 'prototype');
          const constructible = proto !== undefined && typeof proto.value === 'object' && proto.value !== null;
          if (constructible && typeof proto.value.run === 'function') info.workflowClasses.push(k);
        }
        return jsonStringify(info);
      },
      invokeQueue(batchJson, envJson, invocationId) {
        const done = (result) => send('result', jsonStringify([invocationId, result]));
        try {
          const def = mainNs.default;
          if (typeof def !== 'object' || def === null || typeof def.queue !== 'function') {
            done({ ok: false, reason: 'threw', error: { name: 'TypeError', message: 'main module has no default.queue handler', hostError: false } });
            return;
          }
          const waits = [];
          const ctx = freeze({ waitUntil(p) { waits.push(_Promise.resolve(p).catch((e) => logger('error')('waitUntil rejected:', e))); } });
          const run = async () => {
            try { await def.queue(makeBatch(jsonParse(batchJson)), makeEnv(jsonParse(envJson)), ctx); }
            catch (e) { await _Promise.allSettled(waits); return { ok: false, reason: 'threw', error: describe(e) }; }
            await _Promise.allSettled(waits);
            return { ok: true };
          };
          apply(PromiseThen, run(), [done, (e) => done({ ok: false, reason: 'threw', error: describe(e) })]);
        } catch (e) {
          done({ ok: false, reason: 'threw', error: describe(e) });
        }
      },
      invokeWorkflow(invocationJson, envJson, invocationId) {
        const done = (outcome) => send('result', jsonStringify([invocationId, outcome]));
        try {
          workflow.invoke(mainNs, jsonParse(invocationJson), makeEnv(jsonParse(envJson)), done);
        } catch (e) {
          done({ kind: 'errored', reason: 'run_threw', message: describe(e).message });
        }
      },
      deliverReply(callId, ok, payloadJson) {
        const p = apply(MapGet, pending, [callId]);
        if (!p) return;
        apply(MapDelete, pending, [callId]);
        const payload = jsonParse(payloadJson);
        if (ok) p.resolve(payload);
        else p.reject(makeHostError(payload.name, payload.message));
      },
      fireTimer(id) {
        const fn = apply(MapGet, timers, [id]);
        if (!fn) return;
        apply(MapDelete, timers, [id]);
        try { fn(); } catch (e) { logger('error')('uncaught exception in timer:', e); }
      },
      isHostError,
      makeTypeError(message) { return new _TypeError(String(message)); },
    });
  };
})();
