// The ggweb Web Worker: owns one Engine (one wasm instance, one model) and answers
// ggweb.js's messages. Started by Model.load; one worker per model, so terminating it
// frees everything the model held.
//
// Messages in:  { id, type: 'load', src, opts, cache, stallTimeoutMs, coreUrl } | { id, type: 'call', method, args }
//               { id, type: 'generate', prompt, opts } | { id, type: 'train', data, opts } | { id, type: 'dispose' }
//               { id, type: 'cancel' } (stops generation id, or long call id at its next step: METHODS)
//               { id, type: 'read', n } (generation id has handed n tokens to its reader: flow control)
// Messages out: { id, type: 'result', value } | { id, type: 'error', error } |
//               { id, type: 'progress', data } | { id, type: 'token', data } | { id, type: 'done', value } |
//               { id, type: 'stage', data: { stage: 'opening', backend } | { stage: 'opened' } } (load)
import { Engine, TRAIN_AHEAD, driveGeneration } from './engine.js';
import { GgwebError, toGgwebError } from './errors.js';
import { METHODS } from './methods.js';

let engine = null;
const running = new Map(); // generate id → driveGeneration's { cancel, read }
const calls = new Map(); // long call id → { cancelled } (a 'cancel' message sets it)

/** The engine's own short calls; the long ones (a last argument `{ cancelled() }`, stopped at
 *  their next step when it is true) are the method table's (web/methods.js). */
const SHORT_CALLS = ['tokenize', 'detokenize', 'logits', 'save', 'dropLora', 'saveLora', 'loadLora', 'loadSae', 'saeOpen', 'saeFeed', 'saeFinish', 'saeAbort',
  'saeDecoderRow', 'saeDispose', '_debugLoseDevice'];
const isLong = (method) => Object.hasOwn(METHODS, method);

const post = (msg, transfer) => self.postMessage(msg, transfer ?? []);
const fail = (id, e, code = 'internal') => post({ id, type: 'error', error: toGgwebError(e, code).toJSON() });

async function handle(m) {
  switch (m.type) {
    case 'load': {
      if (engine) throw new GgwebError('busy', 'this worker already loaded a model');
      engine = new Engine(m.coreUrl);
      const info = await engine.load(m.src, m.opts, {
        cache: m.cache,
        stallTimeoutMs: m.stallTimeoutMs,
        onProgress: (data) => post({ id: m.id, type: 'progress', data }),
        onStage: (data) => post({ id: m.id, type: 'stage', data }),
      });
      return post({ id: m.id, type: 'result', value: info });
    }
    case 'call': {
      if (!engine) throw new GgwebError('invalid', `${m.method}: no model is loaded`);
      if (!SHORT_CALLS.includes(m.method) && !isLong(m.method)) {
        throw new GgwebError('invalid', `unknown method ${JSON.stringify(m.method)}`);
      }
      let value;
      if (isLong(m.method)) {
        // The call's checkpoint yields to this worker's event loop every few ms, so the
        // page's 'cancel' for it (its signal aborted) arrives while it runs.
        const c = { cancelled: false };
        calls.set(m.id, c);
        try {
          value = await engine[m.method](...m.args, { cancelled: () => c.cancelled });
        } finally {
          calls.delete(m.id);
        }
      } else {
        value = await engine[m.method](...m.args);
      }
      return post({ id: m.id, type: 'result', value }, ArrayBuffer.isView(value) ? [value.buffer] : []);
    }
    case 'generate': {
      if (!engine) throw new GgwebError('invalid', 'generate: no model is loaded');
      const run = driveGeneration(engine, m.prompt, m.opts, (msg) => post({ id: m.id, ...msg }));
      running.set(m.id, run);
      try {
        return await run.done;
      } finally {
        running.delete(m.id);
      }
    }
    case 'train': {
      // A stream like a generation's: one 'token' message per update, then 'done' with the stats.
      if (!engine) throw new GgwebError('invalid', 'train: no model is loaded');
      const run = driveGeneration(engine, m.data, m.opts, (msg) => post({ id: m.id, ...msg }), 'train', TRAIN_AHEAD);
      running.set(m.id, run);
      try {
        return await run.done;
      } finally {
        running.delete(m.id);
      }
    }
    case 'cancel': {
      running.get(m.id)?.cancel();
      const c = calls.get(m.id);
      if (c) c.cancelled = true;
      return;
    }
    case 'read': {
      // The page handed out m.n tokens of generation m.id: the run may go on (flow control).
      running.get(m.id)?.read(m.n);
      return;
    }
    case 'dispose': {
      // The model is freed now, or when the step running ends (the page ends this worker
      // after at most 1 s either way).
      await engine?.dispose();
      return post({ id: m.id, type: 'result', value: true });
    }
    default:
      throw new GgwebError('invalid', `unknown message type ${JSON.stringify(m.type)}`);
  }
}

self.onmessage = (ev) => {
  const m = ev.data;
  handle(m).catch((e) => fail(m.id, e));
};
