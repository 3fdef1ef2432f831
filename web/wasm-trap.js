// A trap inside an async wasm export, turned into that call's rejection.
//
// wasm-bindgen runs an `async fn` export's Rust future in microtasks (wasm-bindgen-futures):
// a trap there (a panic under panic=abort, an allocation that cannot be met) is thrown in a
// microtask of its own, reported to the global scope as an uncaught error, and the promise
// the export returned never settles. `guardWasm` races such a call with that report: while
// calls are pending, the first uncaught WebAssembly.RuntimeError of this realm rejects every
// one of them with code `internal`, naming the call (which call trapped cannot be told apart
// from the error: they share the realm's event loop), instead of leaving them pending.
import { GgwebError } from './errors.js';

/** Pending guarded calls: reject(trap) each. */
const pending = new Set();
let detach = null;

const isTrap = (e) => typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError;

function onTrap(e) {
  for (const reject of [...pending]) reject(e);
}

/** Listens for uncaught errors while a guarded call is pending (a page, a worker, Node). */
function attach() {
  const g = globalThis;
  if (typeof g.addEventListener === 'function') {
    const listener = (ev) => {
      if (!isTrap(ev.error)) return;
      ev.preventDefault(); // reported as the calls' rejection instead
      onTrap(ev.error);
    };
    g.addEventListener('error', listener);
    return () => g.removeEventListener('error', listener);
  }
  if (typeof g.process?.on === 'function') {
    // Node: a listener keeps the process alive on every uncaught exception, so one that is
    // not a trap is thrown again without it (Node's own report and exit).
    const listener = (e) => {
      if (isTrap(e)) return onTrap(e);
      stop();
      g.process.nextTick(() => { throw e; });
    };
    g.process.on('uncaughtException', listener);
    return () => g.process.off('uncaughtException', listener);
  }
  return () => {};
}

function stop() {
  detach?.();
  detach = null;
}

/**
 * `promise` (an async wasm export's), settled by a trap too: rejected with a GgwebError
 * `internal` naming `what` when the module traps before it settles.
 */
export function guardWasm(promise, what) {
  let reject;
  const trapped = new Promise((_, r) => {
    reject = (e) => r(new GgwebError('internal', `${what}: the wasm module trapped (${e.message}); it cannot be used further`));
  });
  pending.add(reject);
  if (!detach) detach = attach();
  const done = () => {
    pending.delete(reject);
    if (pending.size === 0) stop();
  };
  return Promise.race([promise, trapped]).finally(done);
}
