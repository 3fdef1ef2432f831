// Under abuse (issue "no leaked worker, no hang, no spurious busy, strict means strict"): the
// JS layer in headless Chromium, in a Web Worker and on the page thread, against the fake
// core (tests/e2e/fake-core.js), so each case is cheap and its timing is the JS layer's own.
// One regression test per bug found by a seeded abuse run on 2026-12-01 (the numbers are the
// issue's), then loads against servers that misbehave (scripts/serve.mjs test routes).
// The same calls on the real module, a property-based run and the worker-leak cycles are in
// tests/e2e/abuse-real.spec.mjs.
//   node --test tests/e2e/abuse.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { makeFakeModel, useHarness } from './helpers.mjs';

const { url: MODEL } = makeFakeModel();

const web = useHarness({ coreUrl: '/e2e/fake-core.js', nBatch: 3 });

/** The body's value (run in the page by web.inPage), failing the test on an error or a hang. */
async function value(worker, body, arg) {
  const r = await web.inPage(worker, body, arg);
  assert.ok(r.ok, `${r.hang ? 'hung' : `${r.code}: ${r.message}`}`);
  return r.value;
}

for (const worker of [true, false]) {
  describe(`${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test('#2 a next() pending when return() is called settles (done), and so does a second next() in flight', async () => {
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const it = m.generate('slow prompt', { maxTokens: 50 });
        const p = it.next();
        await it.return();
        const pending = await settle(p, 3000);
        // Two next() calls in flight at once: both settle, in order.
        const it2 = m.generate('slow prompt', { maxTokens: 2 });
        const both = await settle(Promise.all([it2.next(), it2.next(), it2.next()]), 3000);
        await m.dispose();
        return { pending, both };
      `, MODEL);
      assert.equal(v.pending.hang, undefined, 'the pending next() never settled');
      assert.ok(v.pending.ok);
      // It may have got the first token before return() ran; otherwise it ends with the iterator.
      assert.ok(v.pending.value.done === true || v.pending.value.value?.token === 97, JSON.stringify(v.pending));
      assert.deepEqual(v.both.value, [
        { value: { seq: 0, token: 97, text: 'a' }, done: false }, { value: { seq: 0, token: 98, text: 'b' }, done: false }, { value: undefined, done: true },
      ]);
    });

    test('#3 abort after a token, start and abort at once, start again: the third runs (no spurious busy), every time', async () => {
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const out = [];
        for (let round = 0; round < 5; round++) {
          const a1 = new AbortController();
          const g1 = m.generate('slow prompt', { maxTokens: 100, signal: a1.signal });
          await g1.next();
          a1.abort();
          const a2 = new AbortController();
          const g2 = m.generate('slow prompt', { maxTokens: 100, signal: a2.signal });
          const p2 = settle(g2.next());
          a2.abort();
          const g3 = m.generate('ok', { maxTokens: 3 });
          const got = [];
          const r3 = await settle((async () => { for await (const t of g3) got.push(t.text); return got.join(''); })());
          out.push([(await p2).code, r3.ok ? r3.value : r3.code, (await g3.stats)?.stop ?? null]);
        }
        // A second live generation is still refused: busy means busy.
        const g4 = m.generate('slow prompt', { maxTokens: 50 });
        await g4.next();
        const busy = await settle(m.generate('x').next());
        await g4.return();
        await m.dispose();
        return { out, busy: busy.code };
      `, MODEL);
      assert.deepEqual(v.out, Array(5).fill(['aborted', 'abc', 'maxTokens']));
      assert.equal(v.busy, 'busy');
    });

    test('#4 a server that never sends headers fails the load with "timeout" within the stall bound; Model.inspect too', async () => {
      const v = await value(worker, `
        const t0 = performance.now();
        const load = await settle(Model.load('/__test/noheaders' + arg, { ...opts, stallTimeoutMs: 1500 }), 10000);
        const t1 = performance.now();
        const inspect = await settle(Model.inspect('/__test/noheaders' + arg, { coreUrl: opts.coreUrl, stallTimeoutMs: 1500 }), 10000);
        const t2 = performance.now();
        return { load, loadMs: t1 - t0, inspect, inspectMs: t2 - t1 };
      `, MODEL);
      assert.equal(v.load.code, 'timeout', JSON.stringify(v.load));
      assert.match(v.load.message, /__test\/noheaders\/artifacts\/fake-model\.gguf: no response within 1500 ms/);
      assert.ok(v.loadMs >= 1400 && v.loadMs < 4500, `load took ${v.loadMs} ms`);
      assert.equal(v.inspect.code, 'timeout', JSON.stringify(v.inspect));
      assert.ok(v.inspectMs >= 1400 && v.inspectMs < 4500, `inspect took ${v.inspectMs} ms`);
    });

    test('#5 stallTimeoutMs beyond setTimeout\'s range (2**31, MAX_VALUE) means no limit, not an instant timeout', async () => {
      const v = await value(worker, `
        const out = [];
        for (const stallTimeoutMs of [2 ** 31, 2 ** 31 - 1, Number.MAX_VALUE, Infinity]) {
          const m = await settle(Model.load('/__test/slow/2' + arg, { ...opts, stallTimeoutMs }), 30000);
          out.push(m.ok ? m.value.info().bytes : m.code);
          if (m.ok) await m.value.dispose();
        }
        return out;
      `, MODEL);
      assert.deepEqual(v, Array(4).fill(3 * 1024 * 1024 + 4));
    });

    test('#6 null as the options argument means no options, for every method that takes options', async () => {
      const v = await value(worker, `
        const r = {};
        // The real module (web/pkg) and the tiny model, which need no options at all.
        const real = await Model.load('/shared-models/tiny-gpt2-f16.gguf', null);
        r.load = real.info().hparams.n_vocab;
        await real.dispose();
        r.inspect = (await Model.inspect('/shared-models/tiny-gpt2-f16.gguf', null)).hparams.n_vocab;
        const m = await Model.load(arg, opts);
        r.tokenize = Array.from(await m.tokenize('Hi', null));
        const got = [];
        for await (const t of m.generate('x', null)) { got.push(t.text); if (got.length === 2) break; }
        r.generate = got.join('');
        r.score = (await m.score('abc', null)).tokens.length;
        r.trace = Object.keys(await m.trace('abc', null));
        await m.dispose();
        return r;
      `, MODEL);
      assert.deepEqual(v.tokenize, [72, 105]);
      assert.equal(v.generate, 'ab');
      assert.equal(v.score, 3);
      assert.deepEqual(v.trace, ['tokens', 'nodes', 'memory']);
      assert.equal(v.load, 50257);
      assert.equal(v.inspect, 50257);
    });

    test('#7 BigInt anywhere is "invalid" with a message that shows it (never a TypeError or "internal")', async () => {
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const cases = {
          logits: () => m.logits([464n]),
          bigint64: () => m.logits(new BigInt64Array([464n])),
          detokenize: () => m.detokenize([1n]),
          stall: () => Model.load(arg, { ...opts, stallTimeoutMs: 1n }),
          nCtx: () => Model.load(arg, { ...opts, nCtx: 64n }),
          backend: () => Model.load(arg, { ...opts, backend: 1n }),
          logitBias: () => m.generate('x', { logitBias: { 5: 1n } }).next(),
          maxTokens: () => m.generate('x', { maxTokens: 1n }).next(),
          scoreOpt: () => m.score('abc', { topK: 1n }),
          prompt: () => m.generate(5n).next(),
        };
        const out = {};
        for (const [k, f] of Object.entries(cases)) {
          const r = await settle(f());
          out[k] = [r.code, r.isGgweb, r.message];
        }
        await m.dispose();
        return out;
      `, MODEL);
      for (const [k, [code, isGgweb, message]] of Object.entries(v)) {
        assert.equal(code, 'invalid', `${k}: ${code} ${message}`);
        assert.equal(isGgweb, true, k);
        assert.match(message, /\dn\b|BigInt/, `${k}: ${message}`);
      }
      assert.equal(v.logits[2], 'logits: token id at index 0 is 464n (a BigInt), not a non-negative integer');
      assert.equal(v.stall[2], 'stallTimeoutMs must be a number of milliseconds >= 0 (0: no limit), got 1n (a BigInt)');
      assert.equal(v.logitBias[2], 'logitBias[5] must be a finite number or -Infinity, got 1n (a BigInt)');
    });

    test('#8 strict means strict: functions, symbols, signals and own __proto__ keys are "invalid", named', async () => {
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const ac = new AbortController();
        const cases = {
          genFn: () => m.generate('x', { threads: () => 1 }).next(),
          topLogprobsFn: () => m.generate('x', { topLogprobs: () => 3 }).next(),
          genSymbol: () => m.generate('x', { stop: [Symbol('s')] }).next(),
          genSignalAsData: () => m.generate('x', { seed: ac.signal }).next(),
          genProto: () => m.generate('x', JSON.parse('{"__proto__": {"maxTokens": 1}}')).next(),
          idsFn: () => m.logits([1, () => 2]),
          idsSymbol: () => m.detokenize([Symbol('x')]),
          idsSignal: () => m.logits([ac.signal]),
          promptFn: () => m.generate(() => 'x').next(),
          scoreFn: () => m.score('abc', { topK: () => 1 }),
          traceSignal: () => m.trace('abc', { taps: [ac.signal] }),
          loadKvFn: () => Model.load(arg, { ...opts, kvType: () => 'f16' }),
          loadCacheFn: () => Model.load(arg, { ...opts, cache: () => true }),
          loadWorkerStr: () => Model.load(arg, { ...opts, worker: 'yes' }),
          loadProto: () => Model.load(arg, JSON.parse('{"__proto__": {"nCtx": 1}}')),
          loadSymbolKey: () => Model.load(arg, { ...opts, [Symbol('k')]: 1 }),
          loadCoreSymbol: () => Model.load(arg, { ...opts, coreUrl: Symbol('u') }),
          tokenizeUnknown: () => m.tokenize('x', { speical: true }),
          tokenizeSpecialStr: () => m.tokenize('x', { special: 'yes' }),
          optionsArray: () => m.score('abc', [1]),
          optionsString: () => m.generate('x', 'fast').next(),
        };
        const out = {};
        for (const [k, f] of Object.entries(cases)) {
          const r = await settle(f());
          out[k] = [r.code, r.message];
        }
        // The model is fine afterwards.
        out.after = Array.from(await m.logits([1, 2]));
        await m.dispose();
        return out;
      `, MODEL);
      const after = v.after;
      delete v.after;
      for (const [k, [code, message]] of Object.entries(v)) assert.equal(code, 'invalid', `${k}: ${code} ${message}`);
      assert.equal(v.genFn[1], 'threads must be a number, string, boolean, array or plain object, got a function (threads)');
      assert.equal(v.genProto[1], 'generate: unknown option "__proto__"');
      assert.match(v.loadProto[1], /^Model\.load: unknown option "__proto__" \(known: /);
      assert.match(v.idsFn[1], /^logits: token id at index 1 is a function/);
      assert.match(v.idsSignal[1], /^logits: token id at index 0 is an AbortSignal/);
      assert.match(v.tokenizeUnknown[1], /^tokenize: unknown option "speical" \(known: special\)$/);
      assert.deepEqual(after, [0.3, 1.3, 2.3, 3.3, 4.3, 5.3, 6.3, 7.3].map((x) => Math.fround(x)));
    });

    test('#9 a DataView is not token ids; tokenize and detokenize follow the busy rule', async () => {
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const dv = await settle(m.detokenize(new DataView(new ArrayBuffer(8))));
        const g = m.generate('slow prompt', { maxTokens: 50 });
        await g.next();
        const tok = await settle(m.tokenize('abc'));
        const detok = await settle(m.detokenize([97]));
        await g.return();
        const afterTok = Array.from(await m.tokenize('ab'));
        const arrayLike = await m.detokenize({ length: 2, 0: 104, 1: 105 });
        await m.dispose();
        return { dv: [dv.code, dv.message], tok: tok.code, detok: detok.code, afterTok, arrayLike };
      `, MODEL);
      assert.deepEqual(v.dv, ['invalid', 'detokenize: token ids must be an array (or typed array) of integers, got a DataView']);
      assert.equal(v.tok, 'busy');
      assert.equal(v.detok, 'busy');
      assert.deepEqual(v.afterTok, [97, 98]);
      assert.equal(v.arrayLike, 'hi');
    });

    // Servers that misbehave: each load fails with its documented code within the stall bound
    // (1.5 s here) plus a margin, and the next load works.
    const HOSTILE = [
      ['no headers ever', '/__test/noheaders', 'timeout', /no response within 1500 ms/],
      ['headers, then silence', '/__test/stall/0', 'timeout', /stalled: no data for 1500 ms after 0 B/],
      ['a body cut mid-stream', '/__test/drop/100000', 'network', /failed after|ended after/],
      ['a redirect loop', '/__test/redirect/0', 'network', /could not fetch .*__test\/redirect\/0/],
      ['an HTML page with status 200', null, 'format', /not a GGUF file: magic bytes "<!do"/],
      ['404', '/__test/status/404', 'http', /^HTTP 404 /],
      ['500', '/__test/status/500', 'http', /^HTTP 500 /],
    ];
    for (const [what, prefix, code, message] of HOSTILE) {
      test(`a hostile server: ${what} → "${code}" within the stall bound, then a good load works`, async () => {
        const url = prefix === null ? '/e2e/harness.html' : prefix.includes('status') ? prefix : prefix + MODEL;
        const v = await value(worker, `
          const t0 = performance.now();
          const r = await settle(Model.load(arg, { ...opts, stallTimeoutMs: 1500 }), 20000);
          const ms = performance.now() - t0;
          const m = await Model.load(${JSON.stringify(MODEL)}, opts);
          const ok = m.info().bytes;
          await m.dispose();
          return { r, ms, ok };
        `, url);
        assert.equal(v.r.code, code, JSON.stringify(v.r));
        assert.equal(v.r.isGgweb, true);
        assert.match(v.r.message, message);
        assert.ok(v.ms < 1500 + 3000, `${what}: settled after ${v.ms} ms`);
        assert.equal(v.ok, 3 * 1024 * 1024 + 4);
      });
    }

    test('a trap inside an async wasm call rejects it with "internal" naming the call, never leaves it pending (issue #40)', async () => {
      // The fake's traps are the real glue's: thrown in a microtask, the export's promise
      // never settling (fake-core.js trapLater); Model.inspect always runs on the calling thread.
      const seen = web.problems.length;
      const v = await value(worker, `
        const m = await Model.load(arg, opts);
        const trapped = await settle(m.logits([4244, 1]), 3000);
        const after = await settle(m.logits([1, 2]), 3000);
        await m.dispose();
        const inspect = await settle(Model.inspect(arg, { coreUrl: opts.coreUrl, nBatch: 4244 }), 3000);
        const inspectAfter = await settle(Model.inspect(arg, { coreUrl: opts.coreUrl }), 3000);
        return { trapped, after: after.ok ? Array.from(after.value) : after, inspect, inspectAfter: inspectAfter.code };
      `, MODEL);
      assert.equal(v.trapped.hang, undefined, 'the trapped logits call never settled');
      assert.deepEqual([v.trapped.code, v.trapped.message], ['internal', 'logits: the wasm module trapped (unreachable); it cannot be used further']);
      // The engine is not left busy: the next call runs (the fake's module is intact).
      assert.deepEqual(v.after, [0.3, 1.3, 2.3, 3.3, 4.3, 5.3, 6.3, 7.3].map(Math.fround));
      assert.equal(v.inspect.hang, undefined, 'the trapped Model.inspect never settled');
      assert.deepEqual([v.inspect.code, v.inspect.message], ['internal', 'Model.inspect: the wasm module trapped (unreachable); it cannot be used further']);
      assert.equal(v.inspectAfter, 'unsupported', 'the fake core refuses a plan, as before');
      assert.deepEqual(web.problems.slice(seen), [], 'the traps reached the page as uncaught errors');
    });
  });
}

test('the page saw no uncaught errors', () => {
  assert.deepEqual(web.problems.filter((p) => !/Failed to load resource/.test(p)), []);
});
