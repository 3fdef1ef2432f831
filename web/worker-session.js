// One page's conversation with a worker's Engine: the calls, generations and training runs
// it started (by its message ids), their cancel and read messages, and its SAEs. The
// dedicated worker (worker.js) has one Session; the shared worker (shared-worker.js) one per
// tab, all over the same Engine. Both answer 'load' and 'dispose' themselves: that is where
// they differ.
import { GENERATE_AHEAD, TRAIN_AHEAD, driveGeneration } from './engine.js';
import { GgwebError, toGgwebError } from './errors.js';
import { METHODS } from './methods.js';

/** The engine's own short calls; the long ones (a last argument `{ cancelled() }`, stopped at
 *  their next step when it is true) are the method table's (web/methods.js). */
const SHORT_CALLS = ['tokenize', 'detokenize', 'logits', 'save', 'dropLora', 'saveLora', 'loadLora', 'loadSae', 'saeOpen', 'saeFeed', 'saeFinish', 'saeAbort',
  'saeDecoderRow', 'saeDispose', '_debugLoseDevice'];
const isLong = (method) => Object.hasOwn(METHODS, method);

export class Session {
  /**
   * @param {(msg: object, transfer?: Transferable[]) => void} post sends a message to the page
   * @param {number|null} readerStallMs (finite: a limit) a generation whose reader takes nothing for this long is
   *   stopped ('timeout'): in a shared worker, so a tab that stopped reading does not hold the others
   */
  constructor(post, readerStallMs = null) {
    this.post = post;
    this.readerStallMs = readerStallMs;
    this.engine = null;
    this.running = new Map(); // generate / train id → driveGeneration's { cancel, read }
    this.calls = new Map(); // long call id → { cancelled } (a 'cancel' message sets it)
    this.saes = new Set(); // the SAE ids this page loaded (freed when it leaves a shared worker)
  }

  /** Sends `e` as the answer to message `id`. */
  fail(id, e, code = 'internal') {
    this.post({ id, type: 'error', error: toGgwebError(e, code).toJSON() });
  }

  /** Answers a 'call', 'generate', 'train', 'cancel' or 'read' message; resolves when it has run. */
  async handle(m) {
    const engine = this.engine;
    switch (m.type) {
      case 'call': {
        if (!engine) throw new GgwebError('invalid', `${m.method}: no model is loaded`);
        if (!SHORT_CALLS.includes(m.method) && !isLong(m.method)) {
          throw new GgwebError('invalid', `unknown method ${JSON.stringify(m.method)}`);
        }
        let value;
        if (isLong(m.method)) {
          // The call's checkpoint yields to the worker's event loop every few ms, so the
          // page's 'cancel' for it (its signal aborted) arrives while it runs.
          const c = { cancelled: false };
          this.calls.set(m.id, c);
          try {
            value = await engine[m.method](...m.args, { cancelled: () => c.cancelled });
          } finally {
            this.calls.delete(m.id);
          }
        } else {
          value = await engine[m.method](...m.args);
          if (m.method === 'loadSae' || m.method === 'saeFinish') this.saes.add(value.id);
          if (m.method === 'saeDispose') this.saes.delete(m.args[0]);
        }
        return this.post({ id: m.id, type: 'result', value }, ArrayBuffer.isView(value) ? [value.buffer] : []);
      }
      case 'generate':
      case 'train': {
        // Training streams like a generation: one 'token' message per update, then 'done'.
        if (!engine) throw new GgwebError('invalid', `${m.type}: no model is loaded`);
        const [input, ahead] = m.type === 'train' ? [m.data, TRAIN_AHEAD] : [m.prompt, GENERATE_AHEAD];
        const send = (msg) => this.post({ id: m.id, ...msg });
        const run = driveGeneration(engine, input, m.opts, send, m.type, ahead, this.readerStallMs);
        this.running.set(m.id, run);
        try {
          return await run.done;
        } finally {
          this.running.delete(m.id);
        }
      }
      case 'cancel': {
        this.running.get(m.id)?.cancel();
        const c = this.calls.get(m.id);
        if (c) c.cancelled = true;
        return;
      }
      case 'read': {
        // The page handed out m.n tokens of generation m.id: the run may go on (flow control).
        this.running.get(m.id)?.read(m.n);
        return;
      }
      default:
        throw new GgwebError('invalid', `unknown message type ${JSON.stringify(m.type)}`);
    }
  }

  /** Stops everything this page started and frees its SAEs (it left a shared worker). */
  close() {
    for (const id of this.running.keys()) this.handle({ type: 'cancel', id });
    for (const id of this.calls.keys()) this.handle({ type: 'cancel', id });
    if (this.engine && !this.engine.disposed) for (const id of this.saes) this.engine.saeDispose(id);
    this.saes.clear();
  }
}
