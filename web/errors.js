// ggweb's one error type and its codes, shared by the page side (ggweb.js), the engine
// (engine.js) and the worker (worker.js), which sends errors across as toJSON().

/** Error codes a GgwebError can carry (see ggweb.d.ts for what each means). */
export const ERROR_CODES = Object.freeze([
  'http', 'network', 'timeout', 'aborted', 'format', 'disposed', 'busy', 'invalid', 'unsupported', 'internal', 'worker',
  'device_lost',
]);

/** Every GgwebError made here (never a caller's look-alike: a WeakSet asks no Proxy trap). */
const OWN = new WeakSet();

/** Whether `e` is a GgwebError ggweb made (a value a caller's getter threw may only pretend to be one). */
export const isOwnError = (e) => OWN.has(e);

export class GgwebError extends Error {
  /**
   * @param {string} code one of ERROR_CODES
   * @param {string} message what went wrong, in words, naming the URL / byte / token
   * @param {object} [details] e.g. { status, url, loaded, total }
   */
  constructor(code, message, details) {
    super(message);
    this.name = 'GgwebError';
    this.code = code;
    if (details !== undefined) this.details = details;
    OWN.add(this);
  }

  toJSON() {
    return { name: this.name, code: this.code, message: this.message, details: this.details };
  }

  static fromJSON(o) {
    return new GgwebError(o.code ?? 'internal', o.message ?? 'unknown error', o.details);
  }
}

/** Converts anything thrown (wasm-bindgen JsError, a trap, a DOMException) to a GgwebError. */
export function toGgwebError(e, fallbackCode, context) {
  if (isOwnError(e)) return e;
  const prefix = context ? `${context}: ` : '';
  try {
    return convert(e, fallbackCode, prefix);
  } catch {
    // Something a caller threw whose reading throws too (a revoked Proxy): nothing to say about it.
    return new GgwebError(fallbackCode, `${prefix}a value that cannot be read was thrown`);
  }
}

function convert(e, fallbackCode, prefix) {
  if (e instanceof GgwebError) return e;
  if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) {
    // A trap (a Rust panic, or an allocation the wasm memory could not grow for).
    return new GgwebError('internal', `${prefix}the wasm module trapped (${e.message}); it cannot be used further`);
  }
  if (e && e.name === 'AbortError') return new GgwebError('aborted', `${prefix}aborted`);
  const msg = e && typeof e === 'object' && 'message' in e ? e.message : String(e);
  // The wasm bindings tag their errors with a code (format, invalid, unsupported, internal).
  const code = e && typeof e.code === 'string' && ERROR_CODES.includes(e.code) ? e.code : fallbackCode;
  // A model over the memory budget (crate/model ModelError::OverBudget): the sizes as numbers too.
  const over = code === 'unsupported' && /model too large: needs (\d+) bytes .*the memory budget is (\d+) bytes/.exec(msg);
  // The crate names the call itself in some messages ("save: the … file does not fit"): once.
  const text = prefix && msg.startsWith(prefix) ? msg : prefix + msg;
  return new GgwebError(code, text, over ? { needed: Number(over[1]), budget: Number(over[2]) } : undefined);
}

export const abortedError = (what) => new GgwebError('aborted', `${what} was aborted`);
