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
  const { apply, construct } = Reflect;
  const { defineProperty, freeze, getOwnPropertyDescriptor, create, keys, hasOwn } = Object;
  const { parse: jsonParse, stringify: jsonStringify } = JSON;
  const { fromCharCode } = String;
  const { isArray } = Array;
  const { isInteger } = Number;
  const { min } = Math;
  const charCodeAt = String.prototype.charCodeAt;
  const stringSlice = String.prototype.slice;
  const WeakSetHas = WeakSet.prototype.has;
  const WeakSetAdd = WeakSet.prototype.add;
  const MapGet = Map.prototype.get;
  const MapSet = Map.prototype.set;
  const MapDelete = Map.prototype.delete;
  const MapKeys = Map.prototype.keys;
  const MapClear = Map.prototype.clear;
  const PromiseThen = Promise.prototype.then;
  const isView = ArrayBuffer.isView;
  const _Error = Error;
  const _TypeError = TypeError;
  const _RangeError = RangeError;
  const _Uint8Array = Uint8Array;
  const _Promise = Promise;
  const _ArrayBuffer = ArrayBuffer;
  const _Array = Array;
  const ArrayFrom = Array.from;
  // Brand-checked reads of a buffer or typed array: the engine's own slots, which worker
  // code cannot fake with a prototype or shadow with an own property.
  const getterOf = (o, k) => getOwnPropertyDescriptor(o, k).get;
  const TypedArrayProto = Object.getPrototypeOf(Uint8Array.prototype);
  const taLength = getterOf(TypedArrayProto, 'length');
  const taByteLength = getterOf(TypedArrayProto, 'byteLength');
  const taByteOffset = getterOf(TypedArrayProto, 'byteOffset');
  const taBuffer = getterOf(TypedArrayProto, 'buffer');
  const taSet = TypedArrayProto.set;
  const abByteLength = getterOf(ArrayBuffer.prototype, 'byteLength');
  const abResizable = getterOf(ArrayBuffer.prototype, 'resizable');
  const sabGrowable = getterOf(SharedArrayBuffer.prototype, 'growable');
  const abMax = getterOf(ArrayBuffer.prototype, 'maxByteLength');
  const sabMax = getterOf(SharedArrayBuffer.prototype, 'maxByteLength');
  const sabByteLength = getterOf(SharedArrayBuffer.prototype, 'byteLength');
  const slot = (get, v) => { try { return apply(get, v, []); } catch { return undefined; } };

  // Every buffer this file allocates for worker code counts as the worker's own
  // (install() puts the context's accounting here before any worker code runs).
  let need = () => {};
  const newBytes = (n) => { need(n); return new _Uint8Array(n); };

  const hostErrors = new WeakSet();

  // WF-28: "a constructible named export whose prototype has a callable run", judged as
  // the Form states it and without running worker code: no getter, trap or constructor.
  // Function.prototype.toString gives a Proxy, a bound and a built-in function the
  // NativeFunction form, and only those, so what qualifies is code the Version wrote
  // (a Proxy's traps could answer this check one way and the run another). Whether it
  // is a constructor is IsConstructor itself: Reflect.construct with it as newTarget
  // constructs `noop`, never it, and reads only its own `prototype` data property.
  const FunctionToString = Function.prototype.toString;
  const StringEndsWith = String.prototype.endsWith;
  const { getPrototypeOf } = Reflect;
  const MAX_PROTOTYPE_DEPTH = 1000;
  const noop = function () {};
  const isConstructor = (f) => {
    try { construct(noop, [], f); return true; } catch { return false; }
  };
  const writtenByTheVersion = (f) => !apply(StringEndsWith, apply(FunctionToString, f, []), ['[native code] }']);
  function hasCallableRun(proto) {
    let o = proto;
    for (let depth = 0; o !== null && depth < MAX_PROTOTYPE_DEPTH; depth++, o = getPrototypeOf(o)) {
      const d = getOwnPropertyDescriptor(o, 'run');
      if (d !== undefined) return hasOwn(d, 'value') && typeof d.value === 'function';
    }
    return false;
  }
  function isWorkflowClass(v) {
    if (typeof v !== 'function' || !writtenByTheVersion(v) || !isConstructor(v)) return false;
    try {
      const p = getOwnPropertyDescriptor(v, 'prototype');
      return p !== undefined && hasOwn(p, 'value') && typeof p.value === 'object' && p.value !== null
        && hasCallableRun(p.value);
    } catch {
      return false; // a prototype object that is a Proxy whose trap threw
    }
  }

  // Bounds of what one context may put on the channel (the Python side
  // enforces the same numbers; these keep honest code under them).
  const MAX_LOG_TEXT = 8 * 1024;
  const MAX_ERROR_TEXT = 2 * 1024;
  const MAX_CALL_CHARS = 4 * 1024 * 1024;
  const MAX_IN_FLIGHT = 256;     // host calls sent and not yet answered
  const MAX_WAITING = 10000;     // host calls queued behind those

  const truncate = (s, n) => (s.length > n ? apply(stringSlice, s, [0, n]) + '…[truncated]' : s);

  // The frames' serialiser. JSON.stringify would run any toJSON worker code
  // put on a prototype, so payloads are serialised here, over values this
  // file built (own data properties only), with captured intrinsics.
  const own = (o, k) => {
    const d = getOwnPropertyDescriptor(o, k);
    return d !== undefined && hasOwn(d, 'value') ? d.value : undefined;
  };
  function encode(v) {
    switch (typeof v) {
      case 'string': return jsonStringify(v); // a primitive: no toJSON is looked up
      case 'number': return v === v && v !== Infinity && v !== -Infinity ? '' + v : 'null';
      case 'boolean': return v ? 'true' : 'false';
      case 'object': {
        if (v === null) return 'null';
        let out = '';
        if (isArray(v)) {
          const n = own(v, 'length');
          for (let i = 0; i < n; i++) out += (i ? ',' : '') + encode(own(v, i));
          return '[' + out + ']';
        }
        const ks = keys(v);
        for (let i = 0; i < ks.length; i++) {
          const x = own(v, ks[i]);
          if (x !== undefined) out += (out ? ',' : '') + jsonStringify(ks[i]) + ':' + encode(x);
        }
        return '{' + out + '}';
      }
      default: return 'null';
    }
  }
  // Building with defineProperty: an assignment would run setters worker
  // code may have put on Object.prototype or Array.prototype.
  const put = (o, k, v) => defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  function mapList(list, fn) {
    const out = [];
    const n = list.length;
    for (let i = 0; i < n; i++) put(out, i, fn(list[i]));
    return out;
  }

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
    const out = newBytes((s.length * 3) >> 2);
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
    const bytes = newBytes(s.length);
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
    const bytes = newBytes(out.length);
    apply(taSet, bytes, [out]);
    return bytes;
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
    if (slot(abByteLength, input) !== undefined) return new _Uint8Array(input);
    const length = slot(taByteLength, input);
    if (length !== undefined) return new _Uint8Array(slot(taBuffer, input), slot(taByteOffset, input), length);
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

  // ---- ArrayBuffer memory ----------------------------------------------
  // Backing stores of ArrayBuffer / SharedArrayBuffer live outside the V8 heap
  // and its limit. Every way worker code can allocate one is wrapped here
  // (constructors, and the methods that allocate by species or resize); the
  // bytes are reported to the worker thread in chunks, which refuses once the
  // context's buffers (live or not yet collected) would pass its memory limit.
  // The whole process has an OS memory cap besides (the walls).
  //
  // Every value the count depends on is read once, and the engine is handed
  // that same primitive (a valueOf answering 0 to the count and 256 MiB to the
  // engine is how this was got around): lengths are converted here, option
  // bags rebuilt, typed-array sources copied to a plain array first. Paths
  // that still allocate past these checks are caught after the turn by
  // cell.mjs, from the engine's own count of the thread's buffers.
  const CHECK_CHUNK = 256 * 1024;
  function limitBufferMemory(global, allowed) {
    let unchecked = 0;
    // Resizable and growable buffers are V8's own reservations, which the thread's
    // allocator (the count cell.mjs checks) never sees: each is counted here at its
    // maximum from its creation until it is collected.
    let reserved = 0;
    const reservations = new FinalizationRegistry((n) => { reserved -= n; });
    const reserve = (buffer) => {
      if (!slot(abResizable, buffer) && !slot(sabGrowable, buffer)) return buffer;
      const max = count(slot(abMax, buffer) ?? slot(sabMax, buffer));
      reserved += max;
      reservations.register(buffer, max);
      return buffer;
    };
    need = (bytes) => {
      if (!(bytes > 0)) return;
      unchecked += bytes;
      if (unchecked < CHECK_CHUNK) return;
      const n = unchecked;
      unchecked = 0;
      if (!allowed(n + reserved)) throw new _RangeError('Array buffer allocation failed: the context would exceed its memory limit');
    };
    // ToNumber, once: an object's valueOf runs here and only here.
    const prim = (v) => (v !== null && (typeof v === 'object' || typeof v === 'function') ? +v : v);
    const count = (v) => {
      const n = typeof v === 'number' ? v : typeof v === 'bigint' ? 0 : Number(v);
      return n > 0 && n < Infinity ? n : 0;
    };
    const isBuffer = (v) => slot(abByteLength, v) !== undefined || slot(sabByteLength, v) !== undefined;
    const bufferSize = (self) => count(slot(abByteLength, self) ?? slot(sabByteLength, self));
    const wrapCtor = (C, build) => {
      const wrapped = new Proxy(C, { construct: (target, args, newTarget) => build(target, args, newTarget) });
      defineProperty(C.prototype, 'constructor', { value: wrapped, writable: true, enumerable: false, configurable: true });
      defineProperty(global, C.name, { value: wrapped, writable: true, enumerable: false, configurable: true });
    };
    // size(self, args) -> [bytes, the arguments the engine gets]
    const wrapMethod = (proto, name, size) => {
      const d = getOwnPropertyDescriptor(proto, name);
      if (!d || typeof d.value !== 'function') return;
      const original = d.value;
      const method = {
        [name](...args) {
          const [bytes, pass] = size(this, args);
          need(bytes);
          return apply(original, this, pass);
        },
      }[name];
      defineProperty(proto, name, { ...d, value: method });
    };
    const newBuffer = (target, args, newTarget) => {
      const length = prim(args[0]);
      const opts = args[1];
      const max = opts !== null && typeof opts === 'object' ? prim(opts.maxByteLength) : undefined;
      need(count(length) + count(max));
      return reserve(construct(target, max === undefined ? [length] : [length, { maxByteLength: max }], newTarget));
    };
    wrapCtor(ArrayBuffer, newBuffer);
    wrapCtor(SharedArrayBuffer, newBuffer);
    const ownBytes = (self, args) => [bufferSize(self), args];
    const replaced = (self, args) => {
      const length = prim(args[0]);
      // Within its maximum, a resizable buffer was counted whole when it was made.
      const counted = slot(abResizable, self) || slot(sabGrowable, self);
      return [counted ? 0 : count(length) - bufferSize(self), [length]];
    };
    wrapMethod(ArrayBuffer.prototype, 'slice', ownBytes);
    wrapMethod(ArrayBuffer.prototype, 'resize', replaced);
    for (const name of ['transfer', 'transferToFixedLength']) {
      wrapMethod(ArrayBuffer.prototype, name, (self, args) => {
        const length = prim(args[0]);
        return [count(length === undefined ? bufferSize(self) : length), length === undefined ? [] : [length]];
      });
      const method = ArrayBuffer.prototype[name];
      if (method) {
        defineProperty(ArrayBuffer.prototype, name, {
          ...getOwnPropertyDescriptor(ArrayBuffer.prototype, name),
          value: { [name](...args) { return reserve(apply(method, this, args)); } }[name],
        });
      }
    }
    wrapMethod(SharedArrayBuffer.prototype, 'slice', ownBytes);
    wrapMethod(SharedArrayBuffer.prototype, 'grow', replaced);
    const viewBytes = (self, args) => [count(slot(taByteLength, self)), args];
    for (const name of ['slice', 'map', 'filter']) wrapMethod(TypedArrayProto, name, viewBytes);
    for (const C of [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
      Float32Array, Float64Array, BigInt64Array, BigUint64Array]) {
      const width = C.BYTES_PER_ELEMENT;
      wrapCtor(C, (target, args, newTarget) => {
        const a = args[0];
        if (a === null || (typeof a !== 'object' && typeof a !== 'function')) {
          need(count(a) * width);
          return construct(target, args, newTarget);
        }
        if (isBuffer(a)) return construct(target, args, newTarget); // a view: no new memory
        const sourceLength = slot(taLength, a);
        if (sourceLength !== undefined) {
          need(count(sourceLength) * width);
          return construct(target, [a], newTarget);
        }
        // An array-like or iterable: its length is whatever it says each time it is
        // asked, so it is asked once (Array.from), and the engine gets that array.
        const list = apply(ArrayFrom, _Array, [a]);
        need(list.length * width);
        const out = construct(target, [list.length], newTarget);
        apply(taSet, out, [list]);
        return out;
      });
    }
  }

  // extensions: { installWorkflow, checkDocument }, both already evaluated in this realm
  // (workflow.js, document.mjs) by cell.mjs.
  return function install(bridge, extensions) {
    // bridge(kind, payload) -> string | undefined. Host side never throws.
    const global = globalThis;
    delete global.console;       // V8's inspector console: writes past our log routing
    delete global.WebAssembly;   // not ECMAScript; wasm code generation is off anyway
    limitBufferMemory(global, (bytes) => send('ab', '' + bytes) === 'ok');

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
    // A workflow context's lines name the step whose effect (or call) is unsettled, if any.
    let stepNow = () => null;
    const logger = (level) => (...args) => {
      let text;
      try { text = String(args.map((a) => fmt(a, 0, new Set())).join(' ')); } catch { text = '[unformattable]'; }
      const step = stepNow();
      send('log', encode(step === null ? [level, truncate(text, MAX_LOG_TEXT)] : [level, truncate(text, MAX_LOG_TEXT), step]));
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
      const delay = Number(ms) > 0 ? min(Number(ms), 2147483647) : 0;
      send('timer_set', encode([id, delay]));
      return id;
    }
    function clearTimeout(id) {
      if (apply(MapDelete, timers, [id])) send('timer_clear', encode([id]));
    }

    // ---- crypto ---------------------------------------------------------
    const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
    const crypto = freeze({
      getRandomValues(array) {
        if (!INTEGER_ARRAYS.some((C) => array instanceof C) || slot(taByteLength, array) === undefined) {
          throw makeError(_TypeError, 'TypeMismatchError', 'getRandomValues: argument must be an integer TypedArray');
        }
        const length = slot(taByteLength, array); // read once, from the engine's slot
        if (length > 65536) throw makeError(_Error, 'QuotaExceededError', 'getRandomValues: at most 65536 bytes');
        const bytes = base64ToBytes(send('random', String(length)));
        apply(taSet, new _Uint8Array(slot(taBuffer, array), slot(taByteOffset, array), length), [bytes]);
        return array;
      },
      randomUUID() { return send('uuid', ''); },
    });

    // ---- URL: parsed by the host (WHATWG parser), state kept here --------
    const urlCall = (op) => {
      const r = jsonParse(send('url', encode(op)));
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
    // At most MAX_IN_FLIGHT calls are on the channel; more wait here, in the
    // worker's own memory, and past MAX_WAITING a call throws. When the last
    // invocation ends, calls still open are abandoned: they never settle and
    // waiting ones are never sent (nothing runs for a pooled context).
    const pending = new Map();   // callId -> {resolve, reject} | null once abandoned
    const waiting = [];          // [callId, payload] not yet sent
    let waitingHead = 0;
    let inFlight = 0;
    let nextCall = 1;
    function hostCall(method, args) {
      if (waiting.length - waitingHead >= MAX_WAITING) throw new _RangeError(`${method}: more than ${MAX_WAITING} host calls waiting`);
      const callId = nextCall;
      const payload = encode([callId, method, args]);
      if (payload.length > MAX_CALL_CHARS) throw new _RangeError(`${method}: arguments exceed ${MAX_CALL_CHARS} characters`);
      nextCall++;
      return new _Promise((resolve, reject) => {
        apply(MapSet, pending, [callId, { resolve, reject }]);
        put(waiting, waiting.length, [callId, payload]);
        pump();
      });
    }
    function pump() {
      while (inFlight < MAX_IN_FLIGHT && waitingHead < waiting.length) {
        const call = waiting[waitingHead];
        waiting[waitingHead++] = undefined;
        inFlight++;
        send('call', call[1]);
      }
      if (waitingHead === waiting.length) { waiting.length = 0; waitingHead = 0; }
    }
    function abandonCalls() {
      for (let i = waitingHead; i < waiting.length; i++) apply(MapDelete, pending, [waiting[i][0]]);
      waiting.length = 0;
      waitingHead = 0;
      for (const id of apply(MapKeys, pending, [])) apply(MapSet, pending, [id, null]);
    }
    function cancelTimers() {
      apply(MapClear, timers, []);
      send('timer_clear_all', '');
    }

    const checkMessageId = (id, fn) => {
      if (typeof id !== 'string') throw new _TypeError(`${fn}: message id must be a string`);
    };
    const checkDelay = (delaySeconds, fn) => {
      if (delaySeconds === undefined) return;
      if (typeof delaySeconds !== 'number') throw new _TypeError(`${fn}: delaySeconds must be a number`);
      if (!isInteger(delaySeconds) || delaySeconds < 0 || delaySeconds > 43200) {
        throw new _RangeError(`${fn}: delaySeconds must be an integer 0..43200`);
      }
    };
    // An async wrapper turns a synchronous validation throw into a rejection;
    // we throw synchronously instead so a bad argument never looks like a host failure.
    const withArgs = (base, extra) => {
      const out = { ...base };
      const ks = keys(extra);
      for (let i = 0; i < ks.length; i++) if (extra[ks[i]] !== undefined) put(out, ks[i], extra[ks[i]]);
      return out;
    };
    const settle = (method, args) => apply(PromiseThen, hostCall(method, args), [() => undefined]);

    function makeBatch(spec) {
      const base = { batchId: spec.id };
      const messages = mapList(spec.messages, (m) => freeze({
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
      const optKeys = keys(opts);
      for (let i = 0; i < optKeys.length; i++) {
        if (optKeys[i] !== SEND_KEYS[0]) throw new _TypeError(`${fn}: unknown option "${optKeys[i]}"`);
      }
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
          const msgs = mapList(entries, (e) => {
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
          return {
            name: truncate(String(e.name ?? 'Error'), 256),
            message: truncate(String(e.message ?? ''), MAX_ERROR_TEXT),
            hostError: isHostError(e),
          };
        }
        return { name: 'Error', message: truncate(`non-Error thrown: ${String(e)}`, MAX_ERROR_TEXT), hostError: false };
      } catch {
        return { name: 'Error', message: 'unreadable error', hostError: false };
      }
    };

    const workflow = extensions && extensions.installWorkflow
      ? extensions.installWorkflow({
        hostCall, makeHostError, checkDocument: extensions.checkDocument, describe, isWorkflowClass,
        watchStep(fn) { stepNow = fn; },
      })
      : null;

    let mainNs = null;
    let running = 0;
    return freeze({
      setMain(ns) { mainNs = ns; },
      loadInfo() {
        const info = { handlers: [], workflowClasses: [] };
        const def = mainNs.default;
        if (typeof def === 'object' && def !== null) {
          for (const k of keys(def)) if (typeof def[k] === 'function') info.handlers.push(k);
        }
        for (const k of keys(mainNs)) {
          if (k !== 'default' && isWorkflowClass(mainNs[k])) info.workflowClasses.push(k);
        }
        return encode(info);
      },
      invokeQueue(batchJson, envJson, invocationId) {
        running++;
        let ended = false;
        const done = (result) => {
          if (ended) return;
          ended = true;
          // Before the result leaves: once the Host has it, nothing of this
          // invocation may run (its timers) or reach the Host (its calls).
          if (--running === 0) { cancelTimers(); abandonCalls(); }
          send('result', encode([invocationId, result]));
        };
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
        running++;
        let ended = false;
        const done = (outcome) => {
          if (ended) return;
          ended = true;
          // As for a queue invocation: once the Host has the outcome, nothing of this context may run
          // (its timers) or reach the Host (its calls); a suspended step's Promise stays pending.
          if (--running === 0) { cancelTimers(); abandonCalls(); }
          send('outcome', encode([invocationId, outcome]));
        };
        try {
          workflow.invoke(mainNs, jsonParse(invocationJson), makeEnv(jsonParse(envJson)), done);
        } catch (e) {
          done({ kind: 'errored', reason: 'run_threw', message: describe(e).message });
        }
      },
      deliverReply(callId, ok, payloadJson) {
        const p = apply(MapGet, pending, [callId]);
        if (p === undefined) return;
        apply(MapDelete, pending, [callId]);
        inFlight--;
        pump();
        if (p === null) return; // abandoned when its invocation ended
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
      // A primitive description of any value worker code threw, for the
      // worker thread, which must never read such a value itself.
      describe(e) {
        const d = describe(e);
        return truncate(`${d.name}: ${d.message}`, MAX_ERROR_TEXT);
      },
    });
  };
})();
