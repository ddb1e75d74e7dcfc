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
// Worker code runs in the same realm after this module was evaluated and may
// patch prototypes (an array iterator that throws, a setter on
// Object.prototype, RegExp.prototype.exec): the intrinsics are captured here,
// lists are walked by index and strings built by concatenation, so the
// verdict and the canonical text do not depend on what worker code patched.
export const MAX_DOCUMENT_BYTES = 1048576;
export const MAX_ROOT_PROPERTIES = 1024;

const { getOwnPropertyDescriptor, getPrototypeOf, hasOwn } = Object;
const { ownKeys, apply } = Reflect;
const { isArray } = Array;
const { isFinite } = Number;
const { stringify } = JSON;
const _String = String;
const _Map = Map;
const _Set = Set;
const _RangeError = RangeError;
const charCodeAt = String.prototype.charCodeAt;
const arraySort = Array.prototype.sort;
const MapGet = Map.prototype.get;
const MapSet = Map.prototype.set;
const SetHas = Set.prototype.has;
const SetAdd = Set.prototype.add;
const SetDelete = Set.prototype.delete;
const OBJECT_PROTO = Object.prototype;
const ARRAY_PROTO = Array.prototype;

class Reject {
  code; // class fields are defined, not assigned: no setter of Object.prototype runs
  message;
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

// How many Unicode scalar values a string holds (a surrogate pair is one), or -1
// if it has a lone surrogate (is not well-formed). Names and IDs count these (WF-34).
export function scalarValues(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++, n++) {
    const c = apply(charCodeAt, s, [i]);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = i + 1 < s.length ? apply(charCodeAt, s, [i + 1]) : 0;
      if (d < 0xdc00 || d > 0xdfff) return -1;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      return -1;
    }
  }
  return n;
}

function serializeString(s, path) {
  if (scalarValues(s) < 0) throw invalid(path, 'string is not well-formed Unicode');
  return stringify(s); // a primitive: no toJSON is looked up
}

function fragment(str) {
  const bytes = utf8Length(str);
  if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
  return { str, bytes };
}

function dataValue(obj, key, path) {
  const d = getOwnPropertyDescriptor(obj, key);
  if (d === undefined) throw invalid(path, 'hole');
  if (!hasOwn(d, 'value')) throw invalid(path, 'accessor property');
  return d;
}

class Serializer {
  memo = new _Map();
  active = new _Set();

  value(v, path) {
    switch (typeof v) {
      case 'string': return fragment(serializeString(v, path));
      case 'boolean': return fragment(v ? 'true' : 'false');
      case 'number':
        if (!isFinite(v)) throw invalid(path, 'number is not finite');
        return fragment(v === 0 ? '0' : _String(v)); // ES Number::toString, as RFC 8785 requires
      case 'object':
        if (v === null) return fragment('null');
        return this.object(v, path);
      case 'undefined': throw invalid(path, 'undefined');
      default: throw invalid(path, `${typeof v} is not a document value`);
    }
  }

  object(v, path) {
    const done = apply(MapGet, this.memo, [v]);
    if (done !== undefined) return done;
    if (apply(SetHas, this.active, [v])) throw invalid(path, 'cycle');
    apply(SetAdd, this.active, [v]);
    const out = isArray(v) ? this.array(v, path) : this.plain(v, path);
    apply(SetDelete, this.active, [v]);
    apply(MapSet, this.memo, [v, out]);
    return out;
  }

  array(v, path) {
    if (getPrototypeOf(v) !== ARRAY_PROTO) throw invalid(path, 'array with a foreign prototype');
    const len = v.length;
    if (ownKeys(v).length !== len + 1) throw invalid(path, 'array with holes or extra properties');
    let str = '';
    let bytes = 2;
    for (let i = 0; i < len; i++) {
      const p = `${path}[${i}]`;
      const d = dataValue(v, _String(i), p);
      const f = this.value(d.value, p);
      bytes += f.bytes + (i ? 1 : 0);
      if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
      str += (i ? ',' : '') + f.str;
    }
    return { str: `[${str}]`, bytes };
  }

  plain(v, path) {
    const proto = getPrototypeOf(v);
    if (proto !== OBJECT_PROTO && proto !== null) throw invalid(path, 'not a plain object');
    const keys = ownKeys(v);
    for (let i = 0; i < keys.length; i++) if (typeof keys[i] === 'symbol') throw invalid(path, 'symbol key');
    apply(arraySort, keys, []); // default order compares UTF-16 code units, as RFC 8785 requires
    let str = '';
    let bytes = 2;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      const p = path ? `${path}.${k}` : k;
      const d = dataValue(v, k, p);
      if (!d.enumerable) throw invalid(p, 'non-enumerable property');
      const key = fragment(serializeString(k, p));
      const f = this.value(d.value, p);
      bytes += key.bytes + 1 + f.bytes + (i ? 1 : 0);
      if (bytes > MAX_DOCUMENT_BYTES) throw tooLarge(`canonical JSON exceeds ${MAX_DOCUMENT_BYTES} bytes`);
      str += `${i ? ',' : ''}${key.str}:${f.str}`;
    }
    return { str: `{${str}}`, bytes };
  }
}

export function checkDocument(value) {
  try {
    if (typeof value !== 'object' || value === null || isArray(value)) {
      throw invalid('', 'a document is a plain object');
    }
    if (ownKeys(value).length > MAX_ROOT_PROPERTIES) {
      throw tooLarge(`more than ${MAX_ROOT_PROPERTIES} root properties`);
    }
    const { str, bytes } = new Serializer().object(value, '');
    return { ok: true, canonical: str, size: bytes };
  } catch (e) {
    if (e instanceof Reject) return { ok: false, code: e.code, message: e.message };
    if (e instanceof _RangeError) return { ok: false, code: 'invalid_params', message: 'document nested too deeply' };
    throw e;
  }
}
