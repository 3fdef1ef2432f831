// The JS layer (web/ggweb.js, engine.js, worker.js) in headless Chromium, in a Web Worker
// and on the page's thread, against tests/e2e/fake-core.js (a stand-in for the wasm glue
// with the same surface): streaming loads, progress, HTTP and network errors, abort,
// sources other than URLs, generation and its cancellation, dispose, the Cache API.
// The stand-in makes faults cheap to inject and observe (a hash of every byte fed, counts
// of loaders freed, slow steps on demand); tests/e2e/model.spec.mjs runs the same API on the
// real wasm module and a real model.
//   node --test tests/e2e/api.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, makeFakeModel, openPage, serve } from './helpers.mjs';

const { url: MODEL, size: SIZE, fnv1a: FNV } = makeFakeModel();

let server;
let browser;
let page;
let problems;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
  await page.evaluate(async () => {
    window.G = await import('/ggweb.js');
    window.run = async (fn) => {
      try {
        return { ok: true, value: await fn() };
      } catch (e) {
        return { ok: false, name: e.name, code: e.code, message: e.message, details: e.details, isGgweb: e instanceof window.G.GgwebError };
      }
    };
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Runs `body` in the page, with `Model`, `G` (the module), `opts` (base load options) in scope. */
function inPage(worker, body, arg) {
  return page.evaluate(
    async ({ worker, body, arg }) => {
      const G = window.G;
      const Model = G.Model;
      const opts = { worker, coreUrl: '/e2e/fake-core.js', nBatch: 3 };
      // eslint-disable-next-line no-new-func
      const fn = new Function('G', 'Model', 'opts', 'arg', `return (async () => { ${body} })()`);
      return window.run(() => fn(G, Model, opts, arg));
    },
    { worker, body, arg },
  );
}

for (const worker of [true, false]) {
  describe(`${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test('streams a URL into the loader: all bytes in order, progress, phases, info', async () => {
      const r = await inPage(worker, `
        const events = [];
        const m = await Model.load(arg, { ...opts, nCtx: 256, onProgress: (p) => events.push(p) });
        const info = m.info();
        const inWorker = m.inWorker;
        await m.dispose();
        return { info, events, inWorker };
      `, MODEL);
      assert.ok(r.ok, r.message);
      const { info, events, inWorker } = r.value;
      assert.equal(inWorker, worker);
      assert.equal(info.bytes, SIZE);
      assert.equal(info.fnv1a, FNV);
      assert.deepEqual(info.opts, { nCtx: 256, nBatch: 3, backend: 'cpu' });
      assert.equal(info.load.via, 'download');
      assert.equal(info.load.bytes, SIZE);
      assert.equal(info.load.worker, worker);
      assert.equal(info.load.cached, false);
      // Where the load went: every phase a number of ms, chunks were fed, a single-thread load
      // waits for no pool, and the phases fit inside the engine's own total.
      const ph = info.load.phases;
      assert.deepEqual(Object.keys(ph).sort(), ['buildMs', 'chunks', 'feedMs', 'gcWaitMs', 'openMs', 'readWaitMs', 'threadsMs', 'warmMs', 'wasmMs'].sort());
      assert.ok(Object.values(ph).every((v) => Number.isFinite(v) && v >= 0), JSON.stringify(ph));
      assert.ok(ph.chunks > 0, JSON.stringify(ph));
      assert.equal(ph.threadsMs, 0);
      const sum = ph.wasmMs + ph.openMs + ph.readWaitMs + ph.feedMs + ph.warmMs + ph.gcWaitMs + ph.buildMs;
      assert.ok(sum <= info.load.ms + 1, `phases ${sum} ms > load ${info.load.ms} ms`);
      const dl = events.filter((e) => e.phase === 'download');
      assert.ok(dl.length >= 2, `download progress events: ${dl.length}`);
      assert.deepEqual(dl[0], { loaded: 0, total: SIZE, phase: 'download' });
      for (let i = 1; i < dl.length; i++) {
        assert.ok(dl[i].loaded >= dl[i - 1].loaded, 'progress goes forward');
        assert.equal(dl[i].total, SIZE);
      }
      assert.equal(dl.at(-1).loaded, SIZE);
      assert.deepEqual(events.slice(-2).map((e) => e.phase), ['build', 'ready']);
    });

    test('works without Content-Length (chunked response)', async () => {
      const r = await inPage(worker, `
        const events = [];
        const m = await Model.load('/__test/nolength' + arg, { ...opts, onProgress: (p) => events.push(p) });
        const info = m.info();
        await m.dispose();
        return { info, first: events[0], last: events.filter((e) => e.phase === 'download').at(-1) };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.equal(r.value.info.fnv1a, FNV);
      assert.deepEqual(r.value.first, { loaded: 0, total: null, phase: 'download' });
      assert.deepEqual(r.value.last, { loaded: SIZE, total: SIZE, phase: 'download' });
    });

    test('HTTP error status rejects with code "http" and the URL', async () => {
      const r = await inPage(worker, `return await Model.load('/__test/status/404', opts);`);
      assert.equal(r.ok, false);
      assert.equal(r.isGgweb, true);
      assert.equal(r.code, 'http');
      assert.equal(r.details.status, 404);
      assert.match(r.message, /^HTTP 404 .*fetching http:\/\/localhost:\d+\/__test\/status\/404$/);
    });

    test('a connection dropped mid-stream rejects with code "network" and how far it got', async () => {
      const r = await inPage(worker, `return await Model.load('/__test/drop/1000000' + arg, opts);`, MODEL);
      assert.equal(r.ok, false);
      assert.equal(r.code, 'network', r.message);
      assert.match(r.message, /__test\/drop\/1000000\/artifacts\/fake-model\.gguf/);
      assert.match(r.message, /of 3\.0 MiB/);
    });

    test('fewer bytes than Content-Length, then a clean close, rejects with code "network"', async () => {
      const r = await inPage(worker, `return await Model.load('/__test/short/1000000' + arg, opts);`, MODEL);
      assert.equal(r.ok, false);
      assert.equal(r.code, 'network', r.message);
      assert.match(r.message, /__test\/short\/1000000\/artifacts\/fake-model\.gguf/);
      assert.match(r.message, /of 3\.0 MiB/);
    });

    test('a file that is not GGUF rejects with code "format" and the loader\'s message', async () => {
      const r2 = await inPage(worker, `return await Model.load('/e2e/harness.html', opts);`);
      assert.equal(r2.code, 'format');
      assert.match(r2.message, /e2e\/harness\.html at byte 0: not a GGUF file: magic bytes "<!do" at offset 0/);
    });

    test('invalid options reject with code "invalid", the wasm side\'s message naming the option and value', async () => {
      const r = await inPage(worker, `return await Model.load(arg, { ...opts, nCtx: -4 });`, MODEL);
      assert.equal(r.code, 'invalid');
      assert.equal(r.message, 'WasmLoader options: nCtx must be an integer from 1 to 4294967295, got -4');
      const r2 = await inPage(worker, `return await Model.load(arg, { ...opts, backend: 'tpu' });`, MODEL);
      assert.equal(r2.code, 'invalid');
      const r3 = await inPage(worker, `return await Model.load(arg, { ...opts, nCtx: 9999 });`, MODEL);
      assert.equal(r3.code, 'invalid');
      assert.match(r3.message, /nCtx 9999 exceeds the model's context length 4096/);
    });

    test('AbortSignal cancels a slow download promptly with code "aborted"', async () => {
      const r = await inPage(worker, `
        const ac = new AbortController();
        let seen = 0;
        const t0 = performance.now();
        const p = Model.load('/__test/slow/20' + arg, { ...opts, signal: ac.signal,
          onProgress: (e) => { seen = e.loaded; if (e.loaded > 100000) ac.abort(); } });
        try { await p; return 'loaded?'; } catch (e) {
          return { code: e.code, message: e.message, seen, ms: performance.now() - t0 };
        }
      `, MODEL);
      assert.ok(r.ok);
      assert.equal(r.value.code, 'aborted', r.value.message);
      assert.ok(r.value.seen < SIZE / 2, `aborted after ${r.value.seen} bytes`);
      assert.ok(r.value.ms < 5000, `took ${r.value.ms} ms`);
    });

    test('an already-aborted signal rejects at once', async () => {
      const r = await inPage(worker, `return await Model.load(arg, { ...opts, signal: AbortSignal.abort() });`, MODEL);
      assert.equal(r.code, 'aborted');
    });

    test('File/Blob, ReadableStream, Response and bytes sources', async () => {
      const r = await inPage(worker, `
        const res = await fetch(arg);
        const buf = new Uint8Array(await res.clone().arrayBuffer());
        const out = {};
        const sources = {
          file: () => new File([buf], 'm.gguf'),
          stream: () => new Blob([buf]).stream(),
          response: () => new Response(buf),
          bytes: () => buf,
        };
        for (const [k, make] of Object.entries(sources)) {
          const m = await Model.load(make(), opts);
          const i = m.info();
          out[k] = [i.bytes, i.fnv1a, i.load.via];
          await m.dispose();
        }
        out.bufferIntact = buf.byteLength;
        return out;
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value, {
        file: [SIZE, FNV, 'file'],
        stream: [SIZE, FNV, 'stream'],
        response: [SIZE, FNV, 'stream'],
        bytes: [SIZE, FNV, 'file'],
        bufferIntact: SIZE,
      });
    });

    test('tokenize, detokenize, logits', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        const ids = await m.tokenize('Hi!');
        const text = await m.detokenize([72, 105]);
        const logits = await m.logits(ids);
        let bad;
        try { await m.detokenize([1e6]); } catch (e) { bad = [e.code, e.message]; }
        let neg;
        try { await m.logits([1, -2]); } catch (e) { neg = [e.code, e.message]; }
        await m.dispose();
        return { ids: [ids.constructor.name, ...ids], text, logits: [logits.constructor.name, ...logits], bad, neg };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value.ids, ['Uint32Array', 72, 105, 33]);
      assert.equal(r.value.text, 'Hi');
      // sum = 210 → 21 + i
      assert.deepEqual(r.value.logits, ['Float32Array', 21, 22, 23, 24, 25, 26, 27, 28]);
      assert.deepEqual(r.value.bad, ['invalid', 'detokenize: token id 1000000 is out of range (vocab 65536)']);
      assert.deepEqual(r.value.neg, ['invalid', 'logits: token id at index 1 is -2, not a non-negative integer']);
    });

    test('generate streams tokens, then stats; options are validated', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        const got = [];
        const it = m.generate('Hello', { maxTokens: 5, seed: 7, temperature: 0 });
        for await (const t of it) got.push(t);
        const stats = await it.stats;
        let bad;
        try { for await (const t of m.generate('x', { topP: 2 })) {} } catch (e) { bad = [e.code, e.message]; }
        let empty;
        try { for await (const t of m.generate('')) {} } catch (e) { empty = e.code; }
        await m.dispose();
        return { got, stats, bad, empty };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value.got, [
        { seq: 0, token: 97, text: 'a' }, { seq: 0, token: 98, text: 'b' }, { seq: 0, token: 99, text: 'c' },
        { seq: 0, token: 100, text: 'd' }, { seq: 0, token: 101, text: 'e' },
      ]);
      assert.equal(r.value.stats.promptTokens, 5);
      assert.equal(r.value.stats.tokens, 5);
      assert.equal(r.value.stats.stop, 'maxTokens');
      assert.deepEqual(r.value.bad, ['invalid', 'generate: generation options: topP must be a number from 0 to 1, got 2']);
      assert.equal(r.value.empty, 'invalid');
    });

    test('generation: abort throws "aborted", break stops quietly, a second run is "busy", the next works', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        const ac = new AbortController();
        const got = [];
        let aborted;
        try {
          for await (const t of m.generate('slow prompt', { maxTokens: 1000, signal: ac.signal })) {
            got.push(t.text);
            if (got.length === 3) ac.abort();
          }
        } catch (e) { aborted = e.code; }
        let n = 0;
        for await (const t of m.generate('slow', { maxTokens: 1000 })) { if (++n === 2) break; }
        const a = m.generate('slow', { maxTokens: 50 });
        const first = await a.next();
        let busy;
        try { await m.generate('x').next(); } catch (e) { busy = e.code; }
        await a.return();
        const again = [];
        for await (const t of m.generate('ok', { maxTokens: 3 })) again.push(t.text);
        await m.dispose();
        return { got, aborted, n, first: first.value, busy, again: again.join('') };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value.got, ['a', 'b', 'c']);
      assert.equal(r.value.aborted, 'aborted');
      assert.equal(r.value.n, 2);
      assert.deepEqual(r.value.first, { seq: 0, token: 97, text: 'a' });
      assert.equal(r.value.busy, 'busy');
      assert.equal(r.value.again, 'abc');
    });

    test('generation control: at most 4 tokens ahead of the reader, stats after break/return/abort, a paused run resumes and disposes', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        const pause = (ms) => new Promise((r) => setTimeout(r, ms));
        const out = {};
        // Read 3, stop reading for a while: the model computes 4 more and waits (it would
        // otherwise run to maxTokens). break then ends it; stats carry the counts.
        let it = m.generate('Hello', { maxTokens: 1000 });
        let n = 0;
        for await (const t of it) { if (++n === 3) { await pause(300); break; } }
        out.afterBreak = await it.stats;
        // return() on a reader that read nothing at all.
        it = m.generate('Hello', { maxTokens: 1000 });
        await pause(200);
        await it.return();
        out.afterReturn = await it.stats;
        // Abort: the iteration throws 'aborted', stats still resolve.
        const ac = new AbortController();
        it = m.generate('Hello', { maxTokens: 1000, signal: ac.signal });
        await it.next();
        await pause(100);
        ac.abort();
        out.abortCode = await it.next().then(() => 'none', (e) => e.code);
        out.afterAbort = await it.stats;
        // A paused reader loses nothing: every token in order once it reads again.
        it = m.generate('Hello', { maxTokens: 20 });
        const got = [];
        for await (const t of it) { got.push(t.text); if (got.length === 2) await pause(200); }
        out.resumed = got.join('');
        out.resumedStats = await it.stats;
        // Dispose while a run waits for its reader: it ends, stats settle, nothing hangs.
        it = m.generate('Hello', { maxTokens: 1000 });
        await it.next();
        await pause(100);
        await m.dispose();
        out.afterDispose = await Promise.race([it.stats.then((s) => s?.stop ?? null), pause(3000).then(() => 'hang')]);
        return out;
      `, MODEL);
      assert.ok(r.ok, r.message);
      const v = r.value;
      const pick = (s) => s && { promptTokens: s.promptTokens, tokens: s.tokens, stop: s.stop };
      assert.deepEqual(pick(v.afterBreak), { promptTokens: 5, tokens: 3 + 4, stop: 'cancelled' });
      assert.ok(v.afterBreak.genMs >= 0 && v.afterBreak.promptMs >= 0, JSON.stringify(v.afterBreak));
      assert.deepEqual(pick(v.afterReturn), { promptTokens: 5, tokens: 4, stop: 'cancelled' });
      assert.equal(v.abortCode, 'aborted');
      assert.deepEqual(pick(v.afterAbort), { promptTokens: 5, tokens: 1 + 4, stop: 'cancelled' });
      assert.equal(v.resumed, 'abcdefghijklmnopqrst');
      assert.deepEqual(pick(v.resumedStats), { promptTokens: 5, tokens: 20, stop: 'maxTokens' });
      // Disposed while waiting: the run ended as cancelled ('done' came first), or its
      // worker was ended first (stats null); never a hang.
      assert.ok(v.afterDispose === 'cancelled' || v.afterDispose === null, String(v.afterDispose));
    });

    test('generation.toReadableStream(): the items, pulled on demand; cancelling the stream cancels the run; reusePrompt is checked', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        const out = {};
        let g = m.generate('Hello', { maxTokens: 5 });
        const s = g.toReadableStream();
        out.isStream = s instanceof ReadableStream;
        const items = [];
        const reader = s.getReader();
        for (;;) { const { value, done } = await reader.read(); if (done) break; items.push(value); }
        out.items = items;
        out.stats = (await g.stats).stop;
        // Piped through a TransformStream, then cancelled after 2 items.
        g = m.generate('Hello', { maxTokens: 1000 });
        const texts = g.toReadableStream().pipeThrough(new TransformStream({ transform: (t, c) => c.enqueue(t.text) }));
        const rd = texts.getReader();
        out.piped = [(await rd.read()).value, (await rd.read()).value];
        await rd.cancel();
        const st = await g.stats;
        out.cancelled = [st.stop, st.tokens <= 2 + 4 + 1];
        // An error errors the stream.
        const bad = m.generate('x', { topP: 2 }).toReadableStream().getReader();
        out.bad = await bad.read().then(() => 'none', (e) => [e.code, e.message]);
        out.reuse = await m.generate('x', { reusePrompt: 1 }).next().then(() => 'none', (e) => [e.code, e.message]);
        // reusePrompt: false is accepted (the fake core has no cache: 0 either way).
        g = m.generate('Hello', { maxTokens: 2, reusePrompt: false });
        for await (const t of g) {}
        out.noReuse = (await g.stats).cachedTokens;
        await m.dispose();
        return out;
      `, MODEL);
      assert.ok(r.ok, r.message);
      const v = r.value;
      assert.equal(v.isStream, true);
      assert.deepEqual(v.items.map((t) => t.text).join(''), 'abcde');
      assert.deepEqual(v.items[0], { seq: 0, token: 97, text: 'a' });
      assert.equal(v.stats, 'maxTokens');
      assert.deepEqual(v.piped, ['a', 'b']);
      assert.deepEqual(v.cancelled, ['cancelled', true]);
      assert.deepEqual(v.bad, ['invalid', 'generate: generation options: topP must be a number from 0 to 1, got 2']);
      assert.deepEqual(v.reuse, ['invalid', 'generate: generation options: reusePrompt must be true or false, got 1']);
      assert.equal(v.noReuse, 0);
    });

    test('after dispose every call rejects with code "disposed"', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, opts);
        await m.dispose();
        await m.dispose(); // twice is fine
        // Every public method (Model.prototype's own, so a new one cannot be missed here).
        const calls = {
          info: () => m.info(), tokenize: () => m.tokenize('a'), detokenize: () => m.detokenize([1]),
          logits: () => m.logits([1]), generate: () => m.generate('a'), _debugLoseDevice: () => m._debugLoseDevice(),
          score: () => m.score('a'), trace: () => m.trace('a', { taps: ['attn'] }),
          run: () => m.run('a'), patch: () => m.patch('a', 'b', { at: 'z', answer: 1, against: 2 }),
          logitLens: () => m.logitLens('a'), attribute: () => m.attribute('a', { answer: 1, against: 2 }),
          saliency: () => m.saliency('a', { of: { loss: 'mean' }, method: 'gradient' }), loadSae: () => m.loadSae('/sae/'),
          train: () => m.train('a', { steps: 1 }), save: () => m.save(), dropLora: () => m.dropLora(),
          saveLora: () => m.saveLora(),
        };
        const methods = Object.getOwnPropertyNames(Model.prototype)
          .filter((k) => k !== 'constructor' && typeof Object.getOwnPropertyDescriptor(Model.prototype, k).value === 'function');
        const codes = {};
        for (const [k, f] of Object.entries(calls)) {
          try { await f(); codes[k] = 'ok'; } catch (e) { codes[k] = [e.code, e.message]; }
        }
        return { codes, methods: methods.sort(), disposed: m.disposed, inWorker: m.inWorker };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value.methods, ['_debugLoseDevice', 'attribute', 'detokenize', 'dispose', 'dropLora', 'generate', 'info', 'loadSae',
        'logitLens', 'logits', 'patch', 'run', 'saliency', 'save', 'saveLora', 'score', 'tokenize', 'trace', 'train']);
      assert.deepEqual(r.value.codes, Object.fromEntries(['info', 'tokenize', 'detokenize', 'logits', 'generate', '_debugLoseDevice', 'score', 'trace',
        'run', 'patch', 'logitLens', 'attribute', 'saliency', 'loadSae', 'train', 'save', 'dropLora', 'saveLora']
        .map((k) => [k, ['disposed', `${k}: the model was disposed`]])));
      assert.equal(r.value.disposed, true);
      assert.equal(r.value.inWorker, worker, 'the getters still answer');
    });

    test('a missing wasm module rejects with code "unsupported"', async () => {
      const r = await inPage(worker, `return await Model.load(arg, { ...opts, coreUrl: '/e2e/no-such-core.js' });`, MODEL);
      assert.equal(r.code, 'unsupported');
      assert.match(r.message, /could not import the wasm glue http:\/\/localhost:\d+\/e2e\/no-such-core\.js/);
    });

    test('cache: true stores a complete download and serves the next load from the Cache API', async () => {
      const r = await inPage(worker, `
        await caches.delete('ggweb-test');
        const url = new URL(arg, location.href).href;
        let dropped;
        try { await Model.load('/__test/drop/500000' + arg, { ...opts, cache: 'ggweb-test' }); } catch (e) { dropped = e.code; }
        const c = await caches.open('ggweb-test');
        const partial = (await c.keys()).length;
        const m1 = await Model.load(arg, { ...opts, cache: 'ggweb-test' });
        const i1 = m1.info().load;
        await m1.dispose();
        const stored = await c.match(url);
        const storedLen = stored ? (await stored.arrayBuffer()).byteLength : 0;
        const m2 = await Model.load(arg, { ...opts, cache: 'ggweb-test' });
        const i2 = m2.info();
        await m2.dispose();
        await caches.delete('ggweb-test');
        return { dropped, partial, i1: [i1.via, i1.cached], storedLen, i2: [i2.load.via, i2.fnv1a] };
      `, MODEL);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value, {
        dropped: 'network', partial: 0, i1: ['download', true], storedLen: SIZE, i2: ['cache', FNV],
      });
    });
  });
}

test('on the page thread, a failed or aborted load frees its loader', async () => {
  const r = await inPage(false, `
    const fake = await import('/e2e/fake-core.js');
    const before = { ...fake.stats };
    try { await Model.load('/__test/drop/200000' + arg, opts); } catch {}
    try { await Model.load('/e2e/harness.html', opts); } catch {}
    const m = await Model.load(arg, opts);
    await m.dispose();
    const s = fake.stats;
    return { loaders: s.loaders - before.loaders, freed: s.freed - before.freed,
             models: s.models - before.models, modelsFreed: s.modelsFreed - before.modelsFreed };
  `, MODEL);
  assert.ok(r.ok, r.message);
  // drop: freed; bad magic: feed threw, freed; success: finish consumed the loader.
  assert.deepEqual(r.value, { loaders: 3, freed: 2, models: 1, modelsFreed: 1 });
});

test('opening the backend gets the stall timeout: code "timeout", the late loader freed, the next load works', async () => {
  const r = await inPage(false, `
    const fake = await import('/e2e/fake-core.js');
    const before = { ...fake.stats };
    const t0 = performance.now();
    let err;
    try { await Model.load(arg, { ...opts, nBatch: 4242, stallTimeoutMs: 300 }); } catch (e) { err = [e.code, e.message]; }
    const ms = performance.now() - t0;
    await new Promise((r) => setTimeout(r, 1600));
    const late = { loaders: fake.stats.loaders - before.loaders, freed: fake.stats.freed - before.freed };
    const m = await Model.load(arg, opts);
    let text = '';
    for await (const t of m.generate('hi', { maxTokens: 3 })) text += t.text;
    await m.dispose();
    return { err, fast: ms < 1400, late, text };
  `, MODEL);
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.value.err, ['timeout', 'opening the cpu backend: no answer from the browser within 300 ms']);
  assert.ok(r.value.fast, 'the load failed before the factory answered');
  assert.deepEqual(r.value.late, { loaders: 1, freed: 1 });
  assert.equal(r.value.text, 'abc');
});

test('a worker blocked while opening the CPU backend is ended after 5 s and the load runs again in a new one', async () => {
  const r = await inPage(true, `
    const warnings = [];
    const warn = console.warn;
    console.warn = (...a) => { warnings.push(a.join(' ')); warn(...a); };
    const t0 = performance.now();
    try {
      const m = await Model.load(arg, { ...opts, nBatch: 4243 });
      const ms = performance.now() - t0;
      let text = '';
      for await (const t of m.generate('hi', { maxTokens: 3 })) text += t.text;
      const load = m.info().load;
      await m.dispose();
      // The blocked create ran once (the counter's first request), the second one went through.
      const tally = await (await fetch('/__test/tally/open-hang')).json();
      return { restarts: load.workerRestarts, ms, text, requests: tally.requests, warnings };
    } finally {
      console.warn = warn;
    }
  `, MODEL);
  assert.ok(r.ok, r.message);
  assert.equal(r.value.restarts, 1);
  assert.equal(r.value.requests, 2);
  assert.equal(r.value.text, 'abc');
  assert.ok(r.value.ms >= 5000 && r.value.ms < 15000, `the load took ${r.value.ms} ms`);
  assert.deepEqual(r.value.warnings, ["ggweb: opening the cpu backend: the ggweb worker did not answer within 5000 ms " +
    "(blocked starting the CPU thread pool's Web Workers); loading again in a new worker"]);
});

test('the fake core has the real glue\'s surface (web/pkg/ggweb_core.js), so no fallback is exercised in its place', async () => {
  const real = await import('../../web/pkg/ggweb_core.js');
  const fake = await import('./fake-core.js');
  // The fake's own counters aside; wasm-bindgen's internals (`__wrap`, `__destroy_into_raw`) aside.
  const exported = (m) => Object.keys(m).filter((k) => k !== 'stats').sort();
  assert.deepEqual(exported(fake), exported(real));
  const surface = (C) => [...Object.getOwnPropertyNames(C.prototype), ...Object.getOwnPropertyNames(C).map((n) => `static ${n}`)]
    .filter((n) => !/(^|\s)__/.test(n)).sort();
  for (const cls of ['WasmLoader', 'WasmModel', 'WasmInspector', 'WasmSae', 'WasmSaeLoader', 'WasmSaveStream']) assert.deepEqual(surface(fake[cls]), surface(real[cls]), cls);
  assert.equal(typeof fake.WasmLoader.create, 'function');
});

test('the page saw no uncaught errors', () => {
  assert.deepEqual(problems.filter((p) => !/Failed to load resource/.test(p)), []);
});

test('every error code the JS layer can give is documented in ggweb.d.ts, the README and the demo', async () => {
  const { readFileSync } = await import('node:fs');
  const { ERROR_CODES } = await import('../../web/errors.js');
  const dts = readFileSync(new URL('../../web/ggweb.d.ts', import.meta.url), 'utf8');
  const union = /export type GgwebErrorCode =([\s\S]*?);\n/.exec(dts)[1];
  const documented = [...union.matchAll(/\/\*\*[\s\S]*?\*\/\s*\|\s*'(\w+)'/g)].map((m) => m[1]);
  assert.deepEqual(documented, [...ERROR_CODES], 'each code in the d.ts union, in order, with a doc comment');
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const rows = [...readme.matchAll(/^\| `(\w+)` \| [^|]+\|/gm)].map((m) => m[1]);
  assert.deepEqual([...rows].sort(), [...ERROR_CODES].sort(), 'one README table row per code');
  // The demo explains each code in words above the message ('aborted' is no error there: the
  // user pressed Cancel or Stop, and the status line says so).
  const demo = readFileSync(new URL('../../web/demo.js', import.meta.url), 'utf8');
  const explain = /const EXPLAIN = \{([\s\S]*?)\n\};/.exec(demo)[1];
  assert.deepEqual([...explain.matchAll(/^ {2}(\w+): '/gm)].map((m) => m[1]).sort(), ERROR_CODES.filter((c) => c !== 'aborted').sort(), 'demo.js EXPLAIN');
});
