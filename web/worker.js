// The ggweb Web Worker: owns one Engine (one wasm instance, one model) and answers
// ggweb.js's messages. Started by Model.load; one worker per model, so terminating it
// frees everything the model held. (A model shared by tabs lives in shared-worker.js.)
//
// Messages in:  { id, type: 'load', src, opts, cache, stallTimeoutMs, coreUrl } | { id, type: 'call', method, args }
//               { id, type: 'generate', prompt, opts } | { id, type: 'train', data, opts } | { id, type: 'dispose' }
//               { id, type: 'cancel' } (stops generation id, or long call id at its next step: METHODS)
//               { id, type: 'read', n } (generation id has handed n tokens to its reader: flow control)
// Messages out: { id, type: 'result', value } | { id, type: 'error', error } |
//               { id, type: 'progress', data } | { id, type: 'token', data } | { id, type: 'done', value } |
//               { id, type: 'stage', data: { stage: 'opening', backend } | { stage: 'opened' } } (load)
// Everything but 'load' and 'dispose' is the Session's (worker-session.js).
import { Engine } from './engine.js';
import { GgwebError } from './errors.js';
import { Session } from './worker-session.js';

const post = (msg, transfer) => self.postMessage(msg, transfer ?? []);
const session = new Session(post);

async function handle(m) {
  switch (m.type) {
    case 'load': {
      if (session.engine) throw new GgwebError('busy', 'this worker already loaded a model');
      session.engine = new Engine(m.coreUrl);
      const info = await session.engine.load(m.src, m.opts, {
        cache: m.cache,
        stallTimeoutMs: m.stallTimeoutMs,
        onProgress: (data) => post({ id: m.id, type: 'progress', data }),
        onStage: (data) => post({ id: m.id, type: 'stage', data }),
      });
      return post({ id: m.id, type: 'result', value: info });
    }
    case 'dispose': {
      // The model is freed now, or when the step running ends (the page ends this worker
      // after at most 1 s either way).
      await session.engine?.dispose();
      return post({ id: m.id, type: 'result', value: true });
    }
    default:
      return session.handle(m);
  }
}

self.onmessage = (ev) => {
  const m = ev.data;
  handle(m).catch((e) => session.fail(m.id, e));
};
