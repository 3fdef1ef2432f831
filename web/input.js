// What callers pass, checked once, before it crosses to the worker or into wasm.
//
// Everything a public method receives goes through here on the calling thread, for both
// transports (the Web Worker and `{ worker: false }`), so the two give the same errors:
// a value a worker cannot receive (a function, a symbol, an AbortSignal where data is
// expected) is refused as 'invalid' naming the option, never as the structured clone's
// DataCloneError, and a value JSON would silently drop or change (a function, undefined in
// an array, NaN, a BigInt) never reaches the wasm side's strict parser as something else.
import { GgwebError, isOwnError } from './errors.js';

const invalid = (msg) => new GgwebError('invalid', msg);

/** What a caller's getter or Proxy trap threw, in words; never throws itself (a revoked Proxy thrown, say). */
function thrownText(e) {
  try {
    if (e instanceof Error) return `${e.name}: ${e.message}`;
  } catch { /* a revoked Proxy: instanceof asks its getPrototypeOf trap */ }
  return show(e);
}

/**
 * Runs `fn`, which reads a value the caller passed (`label` names it: "score: options",
 * "hooks[0].pos"). Whatever that reading throws — a getter, a Proxy trap, a revoked Proxy
 * (every operation on one throws a TypeError), an `instanceof` asking a trap — becomes
 * 'invalid' naming the value; ggweb's own 'invalid' errors from the checks inside pass as
 * they are. Every reading of a caller's value in this file goes through it, and the callers
 * in ggweb.js, cache.js and hub.js use it for their own type tests (`instanceof`).
 */
export function reading(label, fn) {
  try {
    return fn();
  } catch (e) {
    if (isOwnError(e) && e.code === 'invalid') throw e;
    throw invalid(`${label} could not be read: ${thrownText(e)}`);
  }
}

/**
 * A value as an error message shows it. Never throws, whatever it is: a BigInt (`464n`), a
 * symbol, a function, a cyclic object or one whose toString throws (JSON.stringify throws on
 * the first and the last two, and a template literal on a symbol).
 */
export function show(v) {
  try {
    switch (typeof v) {
      case 'bigint': return `${v}n (a BigInt)`;
      case 'symbol': return `${String(v)} (a symbol)`;
      case 'function': return `a function${v.name ? ` (${v.name})` : ''}`;
      case 'number': return Object.is(v, -0) ? '-0' : String(v); // NaN and Infinity as such
      case 'undefined': return 'undefined';
      // Long strings (a 100k-character prompt in the wrong place) are cut; a path or URL fits.
      case 'string': return JSON.stringify(v.length > 300 ? `${v.slice(0, 297)}...` : v);
      default: break;
    }
    if (v === null) return 'null';
    if (!isPlainObject(v) && !Array.isArray(v)) {
      const name = Object.prototype.toString.call(v).slice(8, -1);
      return `${/^[AEIOU]/.test(name) ? 'an' : 'a'} ${name}${ArrayBuffer.isView(v) && 'length' in v ? ` of length ${v.length}` : ''}`;
    }
    const s = JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : typeof x === 'function' || typeof x === 'symbol' ? String(x) : x));
    return s.length > 80 ? `${s.slice(0, 77)}...` : s;
  } catch {
    try {
      return Object.prototype.toString.call(v);
    } catch {
      return 'an object that cannot be read (a revoked Proxy?)'; // toString asks IsArray, which throws on one
    }
  }
}

/** An object literal's kind: prototype Object.prototype or null (not an array, class instance, Proxy of one). */
export function isPlainObject(v) {
  if (v === null || typeof v !== 'object') return false;
  const p = Object.getPrototypeOf(v);
  return p === Object.prototype || p === null;
}

/**
 * A method's options argument as a null-prototype copy of its own keys (so an own
 * `__proto__` key stays a key, and an unknown one is refused by name). `undefined` and `null`
 * mean "no options". Anything but an object literal is 'invalid'. With `known`, a key not in
 * it is 'invalid'; symbol keys always are.
 */
export function optionsObject(options, what, known = null, noun = 'option') {
  const out = Object.create(null);
  if (options === undefined || options === null) return out;
  return reading(`${what}: options`, () => {
    if (!isPlainObject(options)) throw invalid(`${what}: options must be an object, got ${show(options)}`);
    const symbols = Object.getOwnPropertySymbols(options);
    if (symbols.length) {
      throw invalid(`${what}: unknown option ${show(symbols[0])}${known ? ` (known: ${known.join(', ')})` : ''}`);
    }
    for (const k of Object.keys(options)) {
      // Never an option (and a copy made by assignment would set the prototype instead).
      if (k === '__proto__' || (known && !known.includes(k))) throw invalid(`${what}: unknown option ${JSON.stringify(k)}${known ? ` (known: ${known.join(', ')})` : ''}`);
      // Read once: what is checked is what is used (a getter is not asked again).
      const v = reading(`${what}: ${noun} ${JSON.stringify(k)}`, () => options[k]);
      // Absent and undefined read the same, as with a destructuring default.
      if (v !== undefined) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
    return out;
  });
}

/** Options without the keys in `omit`, as a null-prototype object (see optionsObject). */
export function without(opts, omit) {
  const out = Object.create(null);
  for (const k of Object.keys(opts)) {
    if (!omit.includes(k)) Object.defineProperty(out, k, { value: opts[k], enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * `v` as plain data that JSON carries unchanged, copied: null, a boolean, a string, a finite
 * number, an array of such (no holes), or an object literal of such (undefined members are
 * left out), at most 16 levels deep and not cyclic. The copy is what crosses to the worker or
 * into wasm, so a getter or Proxy is read exactly once, here (never again by the structured
 * clone or the wasm side's parser), and a throwing one is 'invalid' naming `path`, as is any
 * other value.
 */
export function plainData(v, path, depth = 0, parents = null) {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw invalid(`${path} must be a finite number, got ${show(v)}`);
    return v;
  }
  if (typeof v !== 'object') throw invalid(`${path} must be a number, string, boolean, array or plain object, got ${show(v)}`);
  return reading(path, () => {
    if (parents?.has(v)) throw invalid(`${path} refers to an object that contains it (a cyclic object)`);
    if (depth >= 16) throw invalid(`${path} is nested more than 16 levels deep`);
    const inner = new Set(parents);
    inner.add(v);
    if (Array.isArray(v)) {
      const n = v.length;
      const out = new Array(n);
      for (let i = 0; i < n; i++) {
        if (!(i in v)) throw invalid(`${path}[${i}] is a hole in the array`);
        const x = v[i];
        if (x === undefined) throw invalid(`${path}[${i}] is undefined`);
        out[i] = typeof x === 'number' && Number.isFinite(x) ? x : plainData(x, `${path}[${i}]`, depth + 1, inner);
      }
      return out;
    }
    if (isPlainObject(v)) {
      const sym = Object.getOwnPropertySymbols(v);
      if (sym.length) throw invalid(`${path} has a symbol key ${show(sym[0])}`);
      const out = Object.create(null);
      for (const k of Object.keys(v)) {
        const x = v[k];
        if (x !== undefined) {
          Object.defineProperty(out, k, { value: plainData(x, `${path}.${k}`, depth + 1, inner), enumerable: true, writable: true, configurable: true });
        }
      }
      return out;
    }
    throw invalid(`${path} must be a number, string, boolean, array or plain object, got ${show(v)}`);
  });
}

/** Checks that `v` is plain data (plainData), throwing 'invalid' naming `path` otherwise. */
export function checkData(v, path) {
  plainData(v, path);
}

/** A boolean option (absent: `dflt`). */
export function boolOption(v, name, dflt) {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') throw invalid(`${name} must be true or false, got ${show(v)}`);
  return v;
}

/** Checks an AbortSignal option. */
export function checkSignal(signal) {
  if (signal === undefined || signal === null) return undefined;
  reading('signal', () => {
    if (!(typeof AbortSignal !== 'undefined' && signal instanceof AbortSignal)) {
      throw invalid(`signal must be an AbortSignal, got ${show(signal)}`);
    }
  });
  return signal;
}

/** The most ids one call takes: far beyond any context, small enough to copy at once. */
export const MAX_IDS = 1 << 24;

/**
 * Token ids as a Uint32Array: from an array, a typed array (not a DataView: it has no
 * elements) or an array-like object, each element an integer 0..2^32-1. 'invalid' naming
 * the index and the value otherwise (the vocabulary's range is checked by the wasm side).
 */
export function tokenIds(ids, what) {
  return reading(`${what}: the token ids`, () => readIds(ids, what));
}

function readIds(ids, what) {
  if (ids instanceof Uint32Array) return ids.slice();
  const arrayLike = ids !== null && typeof ids === 'object' && !(ids instanceof DataView) &&
    (Array.isArray(ids) || ArrayBuffer.isView(ids) || (typeof ids.length === 'number' && Number.isInteger(ids.length) && ids.length >= 0));
  if (!arrayLike) {
    throw invalid(`${what}: token ids must be an array (or typed array) of integers, got ${ids === null ? 'null' : show(ids)}`);
  }
  const n = ids.length;
  if (n > MAX_IDS) throw invalid(`${what}: ${n} token ids is more than one call takes (${MAX_IDS})`);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const v = ids[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
      throw invalid(`${what}: token id at index ${i} is ${show(v)}, not a non-negative integer`);
    }
    out[i] = v;
  }
  return out;
}

/** A model input: a string, or token ids (tokenIds). */
export function modelInput(input, what) {
  if (typeof input === 'string') return input;
  if (input === null || typeof input !== 'object') {
    throw invalid(`${what}: the input must be a string or token ids, got ${show(input)}`);
  }
  return reading(`${what}: the input`, () => readIds(input, what));
}

/**
 * score / trace / run / ... options: `special` (a boolean, default false) for the JS side,
 * and the rest, a checked plain-data copy (plainData), for the wasm side's strict parser.
 */
export function passOptions(options, what) {
  const o = optionsObject(options, what);
  const special = boolOption(o.special, 'special', false);
  const rest = without(o, ['special']);
  for (const k of Object.keys(rest)) {
    rest[k] = k === 'hooks' && rest.hooks !== null ? hookList(rest.hooks, what) : plainData(rest[k], k);
  }
  return { special, rest };
}

/**
 * The `hooks` option: an array of plain objects `{ at, op, head?, pos?, index?, value? }`
 * (their keys and values are the wasm side's to check), copied as plain data; a typed-array
 * `value` (e.g. a capture's `data`, a decoder row) crosses as a plain array of numbers.
 */
export function hookList(v, what) {
  return reading(`${what}: hooks`, () => {
    if (!Array.isArray(v)) throw invalid(`${what}: hooks must be an array of { at, op, ... }, got ${show(v)}`);
    const n = v.length;
    const out = new Array(n);
    for (let i = 0; i < n; i++) {
      out[i] = reading(`${what}: hooks[${i}]`, () => {
        const h = v[i];
        if (!isPlainObject(h)) throw invalid(`${what}: hooks[${i}] must be a plain object, got ${show(h)}`);
        const o = optionsObject(h, `${what}: hooks[${i}]`, null, 'key');
        const x = o.value;
        if (ArrayBuffer.isView(x) && !(x instanceof DataView) && !(x instanceof BigInt64Array) && !(x instanceof BigUint64Array)) {
          o.value = Array.from(x);
        }
        return plainData(o, `hooks[${i}]`);
      });
    }
    return out;
  });
}
