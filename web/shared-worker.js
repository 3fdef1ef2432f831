// The ggweb SharedWorker: one Engine (one model) for every tab of an origin that loads the
// same source with the same model options and `shared: true`. Model.load names the
// SharedWorker after that key, so the browser hands every such tab a port to this one.
//
// Each tab speaks worker.js's protocol over its port, with a Session (worker-session.js) of
// its own for its ids. Here:
// - 'load' { lock }: the first tab's load runs; the others wait for it and get the same info
//   (they download nothing). `lock` names a Web Lock the tab holds while it lives: the tab
//   closing (or crashing, or disposing) releases it, and the request for it made here is
//   then granted: the tab is gone. A port sends nothing when it closes, a heartbeat would
//   be throttled in a background tab (then taken for a closed one), and `pagehide` misses
//   crashes; the lock is released by the browser in every case.
// - 'call', 'generate', 'train': one tab's work at a time, in arrival order (a queue); a
//   call from the tab whose work runs now goes straight to the engine, which answers by the
//   tab's own rule ('busy'). A generation nobody reads for the tab's stallTimeoutMs stops.
// - 'dispose': this tab's handle only; the last one frees the model and ends this worker.
import { Engine } from './engine.js';
import { GgwebError, toGgwebError } from './errors.js';
import { stallTimeout } from './source.js';
import { Session } from './worker-session.js';

let engine = null;
let loading = null; // the load's promise of info, shared by every tab that attaches
const ended = new AbortController(); // the last tab left during the load
const listeners = new Set(); // (msg) => void: the load's progress, to every tab waiting for it
const tabs = new Set(); // tabs attached (loading or loaded)
const queue = []; // { tab, m } waiting for their turn
let turn = null; // { tab, n }: whose work runs now, and how many of its messages are running

class Tab {
  constructor(port) {
    this.port = port;
    this.session = new Session((msg, transfer) => port.postMessage(msg, transfer ?? []));
    this.cancelled = new Set(); // ids cancelled while queued: cancelled again when they start
    this.gone = false;
  }
}

/** Starts message `m` of `tab` now; resolves when it has run (a generation: when it ended). */
function start(tab, m) {
  if (turn === null) turn = { tab, n: 0 };
  turn.n++;
  const t = turn;
  const p = tab.session.handle(m).catch((e) => tab.session.fail(m.id, e));
  // A run or long call starts its bookkeeping synchronously: a cancel that came while it
  // waited in the queue now stops it at its first step, through the same path.
  if (tab.cancelled.delete(m.id)) tab.session.handle({ type: 'cancel', id: m.id });
  return p.finally(() => {
    if (--t.n === 0 && turn === t) {
      turn = null;
      pump();
    }
  });
}

function pump() {
  while (turn === null && queue.length) {
    const { tab, m } = queue.shift();
    if (!tab.gone) start(tab, m);
  }
}

function submit(tab, m) {
  if (turn?.tab === tab) start(tab, m);
  else {
    queue.push({ tab, m });
    pump();
  }
}

/**
 * `tab` leaves (dispose, or closed): its queued work dropped, its running work stopped. The
 * last one ends the worker at once (synchronously, so no tab can join a worker that is
 * closing: a later `new SharedWorker` with this name starts a new one); closing frees the
 * wasm memory with the worker.
 */
function leave(tab) {
  if (tab.gone) return;
  tab.gone = true;
  tabs.delete(tab);
  for (let i = queue.length - 1; i >= 0; i--) if (queue[i].tab === tab) queue.splice(i, 1);
  tab.session.close();
  if (tabs.size > 0) return;
  ended.abort();
  engine?.dispose();
  self.close();
}

async function attach(tab, m) {
  if (tabs.has(tab)) throw new GgwebError('busy', 'this tab already loaded a model on this port');
  if (ended.signal.aborted) throw new GgwebError('worker', 'the shared worker is closing (its last tab left); load again');
  tabs.add(tab);
  tab.session.readerStallMs = stallTimeout(m.stallTimeoutMs);
  navigator.locks.request(m.lock, () => leave(tab)).catch(() => leave(tab));
  const joined = loading !== null;
  const hear = (data) => tab.port.postMessage({ id: m.id, type: 'progress', data });
  listeners.add(hear);
  if (!joined) {
    engine = new Engine(m.coreUrl);
    loading = engine.load(m.src, m.opts, {
      signal: ended.signal,
      cache: m.cache,
      stallTimeoutMs: m.stallTimeoutMs,
      onProgress: (data) => { for (const f of listeners) f(data); },
      onStage: (data) => tab.port.postMessage({ id: m.id, type: 'stage', data }),
    });
    // A failed load is not kept: the next tab to attach loads again.
    loading.catch(() => {
      engine.dispose();
      engine = null;
      loading = null;
    });
  }
  try {
    const info = await loading;
    tab.session.engine = engine;
    return { ...info, load: { ...info.load, shared: { joined, tabs: tabs.size } } };
  } finally {
    listeners.delete(hear);
  }
}

async function handle(tab, m) {
  switch (m.type) {
    case 'load': {
      const info = await attach(tab, m);
      return tab.port.postMessage({ id: m.id, type: 'result', value: info });
    }
    case 'dispose':
      leave(tab);
      return tab.port.postMessage({ id: m.id, type: 'result', value: true });
    case 'call':
    case 'generate':
    case 'train':
      if (!tabs.has(tab)) throw new GgwebError('invalid', `${m.method ?? m.type}: no model is loaded`);
      return submit(tab, m);
    case 'cancel':
      if (queue.some((j) => j.tab === tab && j.m.id === m.id)) tab.cancelled.add(m.id);
      return tab.session.handle(m);
    default:
      return tab.session.handle(m);
  }
}

self.onconnect = (ev) => {
  const tab = new Tab(ev.ports[0]);
  tab.port.onmessage = (e) => {
    const m = e.data;
    handle(tab, m).catch((err) => tab.session.fail(m.id, toGgwebError(err, 'internal')));
  };
};
