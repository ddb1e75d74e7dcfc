// DOC-1..6: is a value a document, and what is its RFC 8785 canonical JSON.
//
// checkDocument(value) -> { ok: true, canonical, size }
//                       | { ok: false, code: 'invalid_params' | 'document_too_large', message }
//
// It reads property descriptors only, so no getter and no toJSON ever runs
// (DOC-4), and the canonical string it returns is the snapshot the Host
// should store: what was checked is what is kept. It has no imports and uses
// only ECMAScript intrinsics of its own realm, so load it in the realm whose
// values it judges (e.g. inside a worker's context): "plain object" means
// that realm's Object.prototype or null.
//
// Shared acyclic sub-objects are allowed (DOC-3); each object's fragment is
// memoized, so a DAG that would expand exponentially is still judged in
// linear time, and no fragment grows past the limit before we stop.
//
// Objects and arrays nest at most MAX_DEPTH deep, the root counted (a DOC
// limit, the same in sumi.core.canonical): what this accepts the Host can
// read. A memoized fragment keeps its height, so a shared sub-object is
// judged again at every depth it is used at.
//
// Numbers are IEEE doubles: ES Number::toString is RFC 8785's form, and
// sumi.core.canonical writes the same bytes for every finite double.
//
// The values judged belong to code that may have patched every intrinsic of
// the realm after this module loaded (JSON.stringify, String.prototype...,
// Array.prototype.sort): every intrinsic used here is captured when the module
// is evaluated, before any worker code runs, and called through Reflect.apply.
// An object's own keys are read once and that one list is both counted and
// serialised. A Proxy could answer each read differently, so Proxies are
// refused: makeDocumentChecker({ isProxy }) takes the test (the runtime passes
// node's util.types.isProxy, kept out of worker code's reach); plain
// checkDocument cannot tell and is for values built by trusted code.
export const MAX_DOCUMENT_BYTES = 1048576;
export const MAX_ROOT_PROPERTIES = 1024;
export const MAX_DEPTH = 128;

const { getOwnPropertyDescriptor, getPrototypeOf, hasOwn } = Object;
const { ownKeys, apply } = Reflect;
const { isArray } = Array;
const { isFinite } = Number;
const { stringify } = JSON;
const _String = String;
const _RangeError = RangeError;
const OBJECT_PROTO = Object.prototype;
const ARRAY_PROTO = Array.prototype;
const charCodeAt = String.prototype.charCodeAt;
const regexpTest = RegExp.prototype.test;
const arraySort = Array.prototype.sort;
const arrayJoin = Array.prototype.join;
const mapGet = Map.prototype.get;
const mapSet = Map.prototype.set;
const setHas = Set.prototype.has;
const setAdd = Set.prototype.add;
const setDelete = Set.prototype.delete;
const _Map = Map;
const _Set = Set;
const { defineProperty } = Object;
// Not `list[i] = v`: on a missing index that runs setters put on Array.prototype.
const push = (list, v) => defineProperty(list, list.length, { value: v, writable: true, enumerable: true, configurable: true });

class Reject {
  code; message; // own fields, defined before the assignments below (no inherited setter runs)
  constructor(code, message) { this.code = code; this.message = message; }
}
const invalid = (path, what) => new Reject('invalid_params', `${path || 'document'}: ${what}`);
const tooLarge = (what) => new Reject('document_too_large', what);

function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = apply(charCodeAt, s, [i]);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff) { n += 4; i++; } // well-formed: a pair
    else n += 3;
  }
  return n;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function serializeString(s, path) {
  if (apply(regexpTest, LONE_SURROGATE, [s])) throw invalid(path, 'string is not well-formed Unicode');
  return stringify(s); // a primitive string: no toJSON is looked up
}

function fragment(str) {
  const bytes = utf8Length(str);
  if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
  return { str, bytes, height: 0 };
}

const tooDeep = (path) => invalid(path, `nested deeper than ${MAX_DEPTH} objects and arrays`);

function dataValue(obj, key, path) {
  const d = getOwnPropertyDescriptor(obj, key);
  if (d === undefined) throw invalid(path, 'hole');
  if (!hasOwn(d, 'value')) throw invalid(path, 'accessor property');
  return d;
}

class Serializer {
  constructor(isProxy) { this.memo = new _Map(); this.active = new _Set(); this.isProxy = isProxy; }

  value(v, path, depth) {
    switch (typeof v) {
      case 'string': return fragment(serializeString(v, path));
      case 'boolean': return fragment(v ? 'true' : 'false');
      case 'number':
        if (!isFinite(v)) throw invalid(path, 'number is not finite');
        return fragment(v === 0 ? '0' : _String(v)); // ES Number::toString, as RFC 8785 requires
      case 'object':
        if (v === null) return fragment('null');
        return this.object(v, path, depth);
      case 'undefined': throw invalid(path, 'undefined');
      default: throw invalid(path, `${typeof v} is not a document value`);
    }
  }

  // depth: how deep v sits, the root being 1.
  object(v, path, depth, maxKeys) {
    if (this.isProxy(v)) throw invalid(path, 'a Proxy is not a document value');
    const done = apply(mapGet, this.memo, [v]);
    if (done !== undefined) {
      if (depth - 1 + done.height > MAX_DEPTH) throw tooDeep(path);
      return done;
    }
    if (apply(setHas, this.active, [v])) throw invalid(path, 'cycle');
    if (depth > MAX_DEPTH) throw tooDeep(path);
    apply(setAdd, this.active, [v]);
    const out = isArray(v) ? this.array(v, path, depth) : this.plain(v, path, depth, maxKeys);
    apply(setDelete, this.active, [v]);
    apply(mapSet, this.memo, [v, out]);
    return out;
  }

  array(v, path, depth) {
    if (getPrototypeOf(v) !== ARRAY_PROTO) throw invalid(path, 'array with a foreign prototype');
    const len = dataValue(v, 'length', path).value;
    if (ownKeys(v).length !== len + 1) throw invalid(path, 'array with holes or extra properties');
    const parts = [];
    let bytes = 2;
    let height = 0;
    for (let i = 0; i < len; i++) {
      const p = `${path}[${i}]`;
      const d = dataValue(v, String(i), p);
      const f = this.value(d.value, p, depth + 1);
      bytes += f.bytes + (i ? 1 : 0);
      if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
      if (f.height > height) height = f.height;
      push(parts, f.str);
    }
    return { str: `[${apply(arrayJoin, parts, [','])}]`, bytes, height: height + 1 };
  }

  plain(v, path, depth, maxKeys) {
    const proto = getPrototypeOf(v);
    if (proto !== OBJECT_PROTO && proto !== null) throw invalid(path, 'not a plain object');
    const keys = ownKeys(v); // read once: counted and serialised from this one list
    if (maxKeys !== undefined && keys.length > maxKeys) throw tooLarge(`more than ${maxKeys} root properties`);
    for (let i = 0; i < keys.length; i++) if (typeof keys[i] === 'symbol') throw invalid(path, 'symbol key');
    apply(arraySort, keys, []); // default order compares UTF-16 code units, as RFC 8785 requires
    const parts = [];
    let bytes = 2;
    let height = 0;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      const p = path ? `${path}.${k}` : k;
      const d = dataValue(v, k, p);
      if (!d.enumerable) throw invalid(p, 'non-enumerable property');
      const key = fragment(serializeString(k, p));
      const f = this.value(d.value, p, depth + 1);
      bytes += key.bytes + 1 + f.bytes + (parts.length ? 1 : 0);
      if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
      if (f.height > height) height = f.height;
      push(parts, `${key.str}:${f.str}`);
    }
    return { str: `{${apply(arrayJoin, parts, [','])}}`, bytes, height: height + 1 };
  }
}

export function makeDocumentChecker({ isProxy }) {
  return function checkDocument(value) {
    try {
      if (typeof value !== 'object' || value === null || isArray(value)) {
        throw invalid('', 'a document is a plain object');
      }
      const { str, bytes } = new Serializer(isProxy).object(value, '', 1, MAX_ROOT_PROPERTIES);
      return { ok: true, canonical: str, size: bytes };
    } catch (e) {
      if (e instanceof Reject) return { ok: false, code: e.code, message: e.message };
      if (e instanceof _RangeError) return { ok: false, code: 'invalid_params', message: 'document nested too deeply' };
      throw e;
    }
  };
}

export const checkDocument = makeDocumentChecker({ isProxy: () => false });
