// Under abuse, on the real module (web/pkg*, the llama.cpp-made tiny GPT-2 F16: 2 layers,
// n_ctx 128) in headless Chromium:
//   1. a property-based run (fast-check, seeded): random option objects and inputs thrown at
//      every public method, in a worker and on the page thread. Each call settles within a
//      bound, with success or a GgwebError whose code is one the d.ts documents for that
//      method (never 'internal', never 'busy': the calls come one after another); afterwards
//      the model's logits equal a fresh model's.
//   2. lifecycle in the default threaded worker: 25 load → generate → dispose cycles with the
//      live workers counted through the browser's target list (CDP) and the page's JS heap
//      measured; dispose during a generation, twice at once, during a logits call; a load
//      aborted midway. Every case leaves no worker behind.
// The seed: GGWEB_FC_SEED (default below), printed with any failure; GGWEB_FC_RUNS the
// number of cases per transport; GGWEB_FC_VERBOSE=1 prints every error.
//   node --test tests/e2e/abuse-real.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MODELS_DIR, useHarness } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const F16 = '/shared-models/tiny-gpt2-f16.gguf';
const N_VOCAB = 50257;
const N_CTX = 128;
const SEED = Number(process.env.GGWEB_FC_SEED ?? 20261202);
const RUNS = Number(process.env.GGWEB_FC_RUNS ?? 300);
/** Each call must settle within this (the slowest legal call: a load of the tiny model, or a 100k-character text). */
const CALL_BOUND_MS = 15000;

/**
 * The codes each method may fail with for a bad argument or option, as ggweb.d.ts documents
 * them (its "@throws" lines). Loads and inspections also meet the network's codes.
 */
const ALLOWED = {
  load: ['invalid', 'unsupported', 'http', 'network', 'timeout', 'format'],
  inspect: ['invalid', 'unsupported', 'http', 'network', 'timeout', 'format'],
  tokenize: ['invalid'],
  detokenize: ['invalid'],
  logits: ['invalid'],
  score: ['invalid'],
  trace: ['invalid'],
  generate: ['invalid'],
  info: [],
  // A debugging hook: on the CPU backend there is no device to lose.
  _debugLoseDevice: ['unsupported'],
};

/** window.make: builds the JS value a recipe from the Node side describes (values JSON cannot carry). */
function setupMake() {
  window.make = (r) => {
    const m = window.make;
    switch (r.t) {
      case 'num': return { NaN: NaN, Inf: Infinity, '-Inf': -Infinity, '-0': -0 }[r.v] ?? r.v;
      case 'str': return r.repeat ? r.v.repeat(r.repeat) : r.v;
      case 'bool': return r.v;
      case 'null': return null;
      case 'undef': return undefined;
      case 'bigint': return BigInt(r.v);
      case 'sym': return Symbol(r.v);
      case 'fn': return () => 1;
      case 'signal': return new AbortController().signal;
      case 'date': return new Date(0);
      case 'map': return new Map([[1, 2]]);
      case 'dataview': return new DataView(new ArrayBuffer(8));
      case 'arr': return r.items.map(m);
      case 'arraylike': return Object.fromEntries([['length', r.items.length], ...r.items.map((x, i) => [i, m(x)])]);
      case 'typed': return r.kind.startsWith('Big') ? new globalThis[r.kind](r.items.map((x) => BigInt(Math.trunc(x)))) : new globalThis[r.kind](r.items);
      case 'obj': {
        const o = {};
        for (const [k, v] of r.entries) Object.defineProperty(o, k, { value: m(v), enumerable: true, configurable: true, writable: true });
        if (r.symbolKey) o[Symbol('k')] = 1;
        return o;
      }
      default: throw new Error(`unknown recipe ${r.t}`);
    }
  };
}

const web = useHarness({}, setupMake);

// --- recipes: what a careless or hostile caller passes -------------------------------------

const num = fc.oneof(
  fc.integer({ min: -3, max: 300 }), fc.integer(), fc.double({ noNaN: true }),
  fc.constantFrom('NaN', 'Inf', '-Inf', '-0', 2 ** 31, 2 ** 32, 2 ** 53, Number.MAX_VALUE),
).map((v) => ({ t: 'num', v }));
/** Any UTF-16 code units: lone surrogates and NUL included. */
const anyString = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), maxLength: 40 });
const str = fc.oneof(
  { weight: 4, arbitrary: anyString.map((v) => ({ t: 'str', v })) },
  { weight: 1, arbitrary: fc.constantFrom('cpu', 'webgpu', 'auto', 'f16', 'f32', '', '\u0000', '\ud800', 'Hello', '<|endoftext|>').map((v) => ({ t: 'str', v })) },
  { weight: 1, arbitrary: fc.constant({ t: 'str', v: 'a', repeat: 100000 }) },
);
const exotic = fc.oneof(
  fc.constant({ t: 'null' }), fc.constant({ t: 'undef' }), fc.boolean().map((v) => ({ t: 'bool', v })),
  fc.bigInt({ min: -5n, max: 60000n }).map((v) => ({ t: 'bigint', v: String(v) })),
  fc.constantFrom('sym', 'fn', 'signal', 'date', 'map', 'dataview').map((t) => ({ t, v: 'x' })),
);
const scalar = fc.oneof({ weight: 3, arbitrary: num }, { weight: 2, arbitrary: str }, { weight: 2, arbitrary: exotic });
const value = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, tie('arr'), tie('obj')),
  arr: fc.array(tie('v'), { maxLength: 4 }).map((items) => ({ t: 'arr', items })),
  obj: fc.array(fc.tuple(fc.string({ maxLength: 6 }), tie('v')), { maxLength: 3 }).map((entries) => ({ t: 'obj', entries })),
})).v;

/** An id: mostly in the vocabulary, else at and beyond its edges, negative, fractional, not a number. */
const id = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: N_VOCAB - 1 }).map((v) => ({ t: 'num', v })) },
  { weight: 1, arbitrary: fc.constantFrom(-1, N_VOCAB, N_VOCAB + 1, 0.5, 2 ** 32, -0).map((v) => ({ t: 'num', v })) },
  { weight: 1, arbitrary: scalar },
);
const TYPED = ['Uint32Array', 'Int32Array', 'Uint16Array', 'Int16Array', 'Uint8Array', 'Int8Array', 'Uint8ClampedArray',
  'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array'];
const ids = fc.oneof(
  { weight: 4, arbitrary: fc.array(id, { minLength: 0, maxLength: 12 }).map((items) => ({ t: 'arr', items })) },
  { weight: 1, arbitrary: fc.integer({ min: N_CTX - 2, max: N_CTX + 40 }).map((n) => ({ t: 'arr', items: Array.from({ length: n }, (_, i) => ({ t: 'num', v: (i * 7919) % N_VOCAB })) })) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...TYPED), fc.array(fc.integer({ min: -2, max: 70000 }), { maxLength: 8 })).map(([kind, items]) => ({ t: 'typed', kind, items })) },
  { weight: 1, arbitrary: fc.array(id, { maxLength: 5 }).map((items) => ({ t: 'arraylike', items })) },
  { weight: 1, arbitrary: scalar },
);
const input = fc.oneof({ weight: 2, arbitrary: str }, { weight: 2, arbitrary: ids });

/** Values a caller who read the docs would pass, so that success paths are walked too. */
const SANE = {
  maxTokens: fc.integer({ min: 0, max: 6 }), temperature: fc.double({ min: 0, max: 2, noNaN: true }), topK: fc.integer({ min: 0, max: 50 }),
  topP: fc.double({ min: 0, max: 1, noNaN: true }), seed: fc.integer({ min: 0, max: 1000 }), repeatPenalty: fc.double({ min: 0.5, max: 2, noNaN: true }),
  minP: fc.double({ min: 0, max: 1, noNaN: true }), ignoreEos: fc.boolean(), special: fc.boolean(), topLogprobs: fc.integer({ min: 0, max: 5 }),
  stop: fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }), taps: fc.subarray(['attn', 'hidden', 'l0.kq_soft_max', 'l1.ffn_gelu'], { minLength: 1 }),
  logitBias: fc.dictionary(fc.integer({ min: 0, max: N_VOCAB + 5 }).map(String), fc.double({ min: -5, max: 5, noNaN: true }), { maxKeys: 2 }),
};
/** A plain JSON value as a recipe. */
const recipeOf = (v) => (Array.isArray(v) ? { t: 'arr', items: v.map(recipeOf) }
  : v !== null && typeof v === 'object' ? { t: 'obj', entries: Object.entries(v).map(([k, x]) => [k, recipeOf(x)]) }
    : typeof v === 'number' ? { t: 'num', v } : typeof v === 'string' ? { t: 'str', v } : { t: 'bool', v });

/** An options argument: known keys with any value, unknown and odd keys, or not an object at all. */
function options(known) {
  const sane = known.filter((k) => SANE[k]);
  const plausible = fc.record(Object.fromEntries(sane.map((k) => [k, SANE[k]])), { requiredKeys: known.includes('taps') ? ['taps'] : [] })
    .map((o) => recipeOf(o));
  const key = fc.oneof(
    { weight: 5, arbitrary: fc.constantFrom(...known) },
    { weight: 1, arbitrary: fc.constantFrom('__proto__', 'constructor', 'toString', 'threads', 'max_tokens', '') },
    { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
  );
  const val = fc.oneof({ weight: 3, arbitrary: scalar }, { weight: 1, arbitrary: value });
  return fc.oneof(
    { weight: sane.length ? 4 : 0, arbitrary: sane.length ? plausible : fc.constant({ t: 'undef' }) },
    { weight: 6, arbitrary: fc.tuple(fc.array(fc.tuple(key, val), { maxLength: 4 }), fc.boolean()).map(([entries, sym]) => ({ t: 'obj', entries, symbolKey: sym && entries.length === 0 })) },
    { weight: 1, arbitrary: fc.constantFrom({ t: 'undef' }, { t: 'null' }) },
    { weight: 1, arbitrary: scalar },
  );
}

const GEN_KEYS = ['maxTokens', 'temperature', 'topK', 'topP', 'seed', 'repeatPenalty', 'repeatLastN', 'minP', 'logitBias', 'ignoreEos', 'stop', 'topLogprobs', 'special', 'signal'];
const SCORE_KEYS = ['topK', 'special'];
const TRACE_KEYS = ['taps', 'special'];
const LOAD_KEYS = ['backend', 'gpuLayers', 'nCtx', 'nBatch', 'nThreads', 'kvType', 'relaxedSimd', 'cache', 'offline', 'persist', 'stallTimeoutMs', 'worker', 'coreUrl', 'file', 'revision', 'hubUrl'];

const call = fc.oneof(
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('info', '_debugLoseDevice')) },
  fc.tuple(fc.constant('tokenize'), fc.oneof(str, scalar), options(['special'])),
  fc.tuple(fc.constant('detokenize'), ids),
  fc.tuple(fc.constant('logits'), ids),
  fc.tuple(fc.constant('score'), input, options(SCORE_KEYS)),
  fc.tuple(fc.constant('trace'), input, options(TRACE_KEYS)),
  fc.tuple(fc.constant('generate'), input, options(GEN_KEYS)),
  { weight: 1, arbitrary: fc.tuple(fc.constant('load'), fc.oneof({ weight: 3, arbitrary: fc.constant({ t: 'str', v: F16 }) }, { weight: 1, arbitrary: scalar }), options(LOAD_KEYS)) },
  { weight: 1, arbitrary: fc.tuple(fc.constant('inspect'), fc.oneof({ weight: 3, arbitrary: fc.constant({ t: 'str', v: F16 }) }, { weight: 1, arbitrary: scalar }), options(LOAD_KEYS.filter((k) => !['cache', 'offline', 'persist', 'relaxedSimd', 'worker'].includes(k)))) },
);

/** Runs one recipe call on the page's model `window.M`; returns how it ended. */
function runCall(recipe) {
  return web.page.evaluate(async ({ recipe, bound }) => {
    const { G, make, settle } = window;
    const m = window.M;
    const [method, ...args] = recipe;
    const a = args.map(make);
    const t0 = performance.now();
    let p;
    switch (method) {
      case 'generate':
        p = (async () => {
          const it = m.generate(a[0], a[1]);
          const got = [];
          // At most 4 tokens: a huge maxTokens must not make the case slow; break cancels.
          for await (const t of it) if (got.push(t.token) >= 4) break;
          return got.length;
        })();
        break;
      case 'load':
        p = (async () => {
          const o = a[1];
          // Keep Model.load's own worker/page choice, but never a custom core or a cache.
          const x = await G.Model.load(a[0], o);
          const n = x.info().hparams?.n_vocab;
          await x.dispose();
          return n;
        })();
        break;
      case 'inspect':
        p = G.Model.inspect(a[0], a[1]).then((r) => r.hparams?.n_vocab);
        break;
      case 'info':
        p = (async () => m.info().hparams.n_vocab)();
        break;
      default:
        p = (async () => { const r = await m[method](...a); return r?.length ?? typeof r; })();
    }
    const r = await settle(p, bound);
    return { ...r, ms: performance.now() - t0, value: r.ok ? String(r.value).slice(0, 40) : undefined };
  }, { recipe, bound: CALL_BOUND_MS });
}

for (const worker of [true, false]) {
  describe(`property-based, ${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test(`${RUNS} random calls settle with success or a documented GgwebError; the model is unharmed (seed ${SEED})`, { timeout: 900_000 }, async () => {
      await web.page.evaluate(async (worker) => {
        window.M = await window.G.Model.load('/shared-models/tiny-gpt2-f16.gguf', { worker, nThreads: 1 });
      }, worker);
      const seen = {};
      await fc.assert(
        fc.asyncProperty(call, async (recipe) => {
          const r = await runCall(recipe);
          const method = recipe[0];
          seen[method] ??= { ok: 0, codes: {} };
          if (r.ok) seen[method].ok++;
          else seen[method].codes[r.code] = (seen[method].codes[r.code] ?? 0) + 1;
          if (process.env.GGWEB_FC_VERBOSE && !r.ok) console.log(method, r.code, r.message.slice(0, 150));
          assert.ok(!r.hang, `${method} did not settle within ${CALL_BOUND_MS} ms`);
          if (!r.ok) {
            assert.equal(r.isGgweb, true, `${method} threw a ${r.name}, not a GgwebError: ${r.message}`);
            assert.ok(ALLOWED[method].includes(r.code), `${method} failed with code '${r.code}' (allowed: ${ALLOWED[method].join(', ')}): ${r.message}`);
          }
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: false, interruptAfterTimeLimit: 800_000 },
      );
      console.log(`property run (${worker ? 'worker' : 'page'}, seed ${SEED}): ${JSON.stringify(seen)}`);
      // Afterwards the abused model's logits equal a fresh model's (1e-4: the prompt cache's
      // documented bound, ggweb.d.ts `logits`).
      const cmp = await web.page.evaluate(async (worker) => {
        const ids = [464, 2068, 7586, 21831, 18045, 625];
        const abused = await window.M.logits(ids);
        const fresh = await window.G.Model.load('/shared-models/tiny-gpt2-f16.gguf', { worker, nThreads: 1 });
        const want = await fresh.logits(ids);
        await fresh.dispose();
        await window.M.dispose();
        let max = 0;
        for (let i = 0; i < want.length; i++) max = Math.max(max, Math.abs(want[i] - abused[i]));
        return { n: abused.length, max };
      }, worker);
      assert.equal(cmp.n, N_VOCAB);
      assert.ok(cmp.max <= 1e-4, `logits differ from a fresh model's by ${cmp.max}`);
    });
  });
}

// --- lifecycle in the default (threaded) worker ------------------------------------------

/** Dedicated workers alive in the browser now (the model's worker.js and its pool's cpu-thread.js). */
async function liveWorkers() {
  const cdp = await web.browser.newBrowserCDPSession();
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    return targetInfos.filter((t) => t.type === 'worker').map((t) => t.url.replace(/^.*\//, ''));
  } finally {
    await cdp.detach();
  }
}

/** Waits (up to `ms`) for the live workers to drop to zero; returns those left. */
async function workersGone(ms = 3000) {
  const t0 = Date.now();
  let left = await liveWorkers();
  while (left.length && Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 50));
    left = await liveWorkers();
  }
  return left;
}

describe('lifecycle in the default threaded worker', () => {
  test('the page is cross-origin isolated and a default load runs 2 threads in a worker (so the cycles below test the pool)', async () => {
    const v = await web.page.evaluate(async () => {
      const m = await window.G.Model.load('/shared-models/tiny-gpt2-f16.gguf');
      const i = m.info();
      await m.dispose();
      return { iso: crossOriginIsolated, inWorker: i.load.worker, threads: i.threads };
    });
    assert.equal(v.iso, true);
    assert.equal(v.inWorker, true);
    assert.equal(v.threads.n, 2, JSON.stringify(v.threads));
    assert.match(v.threads.build, /^pkg-threads/);
    assert.deepEqual(await workersGone(), []);
  });

  test('25 load → generate → dispose cycles leave no worker alive and the page heap flat', { timeout: 600_000 }, async () => {
    const cdp = await web.page.context().newCDPSession(web.page);
    const heap = async () => {
      await cdp.send('HeapProfiler.collectGarbage');
      return (await cdp.send('Runtime.getHeapUsage')).usedSize;
    };
    const left = [];
    let heap5 = 0;
    for (let i = 0; i < 25; i++) {
      const text = await web.page.evaluate(async () => {
        const m = await window.G.Model.load('/shared-models/tiny-gpt2-f16.gguf');
        let s = '';
        for await (const t of m.generate('Hello', { maxTokens: 4, temperature: 0 })) s += t.text;
        await m.dispose();
        return s;
      });
      assert.ok(text.length > 0);
      const l = await workersGone();
      if (l.length) left.push([i, l]);
      if (i === 4) heap5 = await heap();
    }
    const heap25 = await heap();
    await cdp.detach();
    assert.deepEqual(left, [], `cycles that left workers alive: ${JSON.stringify(left)}`);
    // The page keeps nothing per model: 20 more cycles may grow its heap by at most 2 MiB.
    assert.ok(heap25 - heap5 < 2 * 1024 * 1024, `page heap grew by ${heap25 - heap5} bytes over 20 cycles`);
  });

  test('dispose during a generation, twice at once, during logits; a load aborted midway: "disposed"/"aborted", no worker left', { timeout: 120_000 }, async () => {
    const v = await web.page.evaluate(async () => {
      const { G, settle } = window;
      const out = {};
      // During a generation: the iteration ends with 'disposed' (or had ended), no hang.
      let m = await G.Model.load('/shared-models/tiny-gpt2-f16.gguf');
      const it = m.generate('Hello', { maxTokens: 100, temperature: 0, ignoreEos: true });
      await it.next();
      const pending = it.next();
      await m.dispose();
      out.duringGenerate = await settle((async () => { await pending; for await (const t of it) { /* drain */ } return 'ended'; })(), 5000);
      out.statsAfter = await settle(it.stats, 5000);
      // Twice at once, and again later.
      m = await G.Model.load('/shared-models/tiny-gpt2-f16.gguf');
      out.twice = await settle(Promise.all([m.dispose(), m.dispose()]).then(() => m.dispose()).then(() => 'ok'), 5000);
      // During a logits call.
      m = await G.Model.load('/shared-models/tiny-gpt2-f16.gguf');
      const lp = settle(m.logits([464, 2068]), 5000);
      await m.dispose();
      out.duringLogits = await lp;
      // Every method after dispose.
      const calls = {
        info: () => m.info(), tokenize: () => m.tokenize('a'), detokenize: () => m.detokenize([1]), logits: () => m.logits([1]),
        generate: () => m.generate('a').next(), score: () => m.score('a'), trace: () => m.trace('a', { taps: ['attn'] }),
        _debugLoseDevice: () => m._debugLoseDevice(),
      };
      out.after = {};
      for (const [k, f] of Object.entries(calls)) out.after[k] = (await settle((async () => f())(), 5000)).code;
      // A load aborted midway (the server sends 16 KiB every 20 ms).
      const ac = new AbortController();
      const lp2 = settle(G.Model.load('/__test/slow/20/shared-models/tiny-gpt2-f16.gguf', {
        signal: ac.signal, onProgress: (p) => { if (p.loaded > 50000) ac.abort(); },
      }), 10000);
      out.abortedLoad = (await lp2).code;
      return out;
    });
    assert.ok(!v.duringGenerate.hang, 'the generation never ended after dispose');
    assert.ok(v.duringGenerate.ok || v.duringGenerate.code === 'disposed', JSON.stringify(v.duringGenerate));
    assert.ok(!v.statsAfter.hang, 'stats never settled after dispose');
    assert.deepEqual(v.twice, { ok: true, value: 'ok' });
    assert.ok(!v.duringLogits.hang);
    assert.ok(v.duringLogits.ok || v.duringLogits.code === 'disposed', JSON.stringify(v.duringLogits));
    assert.deepEqual(v.after, Object.fromEntries(Object.keys(v.after).map((k) => [k, 'disposed'])));
    assert.equal(v.abortedLoad, 'aborted');
    assert.deepEqual(await workersGone(), []);
  });
});

test('the page saw no uncaught errors', () => {
  assert.deepEqual(web.problems.filter((p) => !/Failed to load resource/.test(p)), []);
});
