// The Origin Private File System (issue 40 item 2, issue 39 item 3) in headless Chromium, with
// the real core (web/pkg, CPU, one thread), in a Web Worker and on the page thread:
// - `cache: 'opfs'`: the first load downloads and stores tiny-f32.gguf, the second says
//   via 'opfs' (after a 304 from the server) and gives the same logits exactly; offline
//   reads it without the server; a new version on the server (200) replaces it;
//   Model.cache.list/has/delete/estimate with { store };
// - a download aborted halfway (or cut by the server) is never taken for the model;
// - a quota too small for the file (CDP Storage.overrideQuotaForOrigin): the load works and
//   cacheNote says why nothing was stored;
// - checkpoints: model.save / saveLora({ to: 'opfs', name }) after 3 training steps load back
//   with Model.load('opfs:name') / { lora: 'opfs:name' } giving the tuned logits; with
//   optimizer: true, 3 updates, the checkpoint, 3 more == 6 updates (AdamW full, SGD-momentum
//   LoRA), losses and logits exactly, and another optimizer refused;
// - typed errors: unknown store, a missing checkpoint, a bad name, OPFS missing ('unsupported').
//   node --test tests/e2e/opfs.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync, statSync, utimesSync } from 'node:fs';
import { ARTIFACTS, ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.train-ref.json`, 'utf8'));
const SIZE = statSync(`${ROOT}tests/fixtures/tiny-f32.gguf`).size;

const web = useHarness({ relaxedSimd: false, nThreads: 1 });
const { inPage } = web;
const origin = () => new URL(web.server.url).origin;

/** Runs `body` and fails the test with the page's error when it threw. */
async function ok(worker, body, arg) {
  const r = await inPage(worker, body, arg);
  assert.ok(r.ok, `${r.code}: ${r.message}`);
  return r.value;
}

for (const worker of [true, false]) {
  describe(worker ? 'in a worker' : 'on the page thread', () => {
    const tag = worker ? 'w' : 'p';

    test("cache: 'opfs' stores the download; the next load streams from OPFS with the same logits; list/has/delete/estimate by store", async () => {
      const path = `/__test/validated/opfs-${tag}/tests/fixtures/tiny-f32.gguf`;
      const url = `${origin()}${path}`;
      const r = await ok(worker, `
        await Model.cache.clear({ store: 'opfs' });
        const load = async (extra = {}) => {
          const m = await Model.load(arg.path, { ...opts, cache: 'opfs', ...extra });
          const i = m.info().load;
          const logits = Array.from(await m.logits(arg.held));
          await m.dispose();
          return { via: i.via, cached: i.cached, cacheNote: i.cacheNote, bytes: i.bytes, logits };
        };
        const first = await load();
        const second = await load();
        const offline = await load({ offline: true });
        const listOpfs = await Model.cache.list({ store: 'opfs' });
        const listAll = await Model.cache.list();
        const listCache = await Model.cache.list({ store: 'cache' });
        const has = [await Model.cache.has(arg.path, { store: 'opfs' }), await Model.cache.has(arg.url), await Model.cache.has(arg.path, { store: 'cache' })];
        const est = await Model.cache.estimate({ store: 'opfs' });
        // What a tab closed mid-download leaves: a partial file under the model's key.
        const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-models');
        const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(arg.url)));
        const key = Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
        await dir.getFileHandle(key + '.gguf.abandoned.part', { create: true });
        const deleted = [await Model.cache.delete(arg.path, { store: 'opfs' }), await Model.cache.delete(arg.path, { store: 'opfs' })];
        const left = [];
        for await (const name of dir.keys()) if (name.startsWith(key)) left.push(name);
        const hasAfter = await Model.cache.has(arg.path, { store: 'opfs' });
        const third = await load();
        const cleared = [await Model.cache.clear({ store: 'opfs' }), (await Model.cache.list({ store: 'opfs' })).length];
        return { first, second, offline, listOpfs, listAll, listCache, has, est: { store: est.store, bytes: est.bytes, quota: est.quota }, deleted, left, hasAfter, third: third.via, cleared };
      `, { path, url, held: REF.held });
      assert.deepEqual({ ...r.first, logits: undefined }, { via: 'download', cached: true, cacheNote: null, bytes: SIZE, logits: undefined });
      assert.deepEqual({ ...r.second, logits: undefined }, { via: 'opfs', cached: false, cacheNote: null, bytes: SIZE, logits: undefined });
      assert.equal(r.first.logits.length, 50257);
      assert.deepEqual(r.second.logits, r.first.logits, 'the model read from OPFS gives the downloaded one\'s logits exactly');
      assert.equal(r.offline.via, 'opfs');
      assert.deepEqual(r.offline.logits, r.first.logits);
      assert.equal(r.listOpfs.length, 1);
      const [e] = r.listOpfs;
      assert.deepEqual({ url: e.url, bytes: e.bytes, store: e.store }, { url, bytes: SIZE, store: 'opfs' });
      assert.match(e.etag, /^"[0-9a-f]+-[0-9a-f]+"$/);
      assert.ok(e.storedAt > Date.now() - 600000 && e.storedAt <= Date.now() + 1000, `storedAt ${e.storedAt}`);
      assert.deepEqual(r.listAll.filter((x) => x.store === 'opfs'), r.listOpfs, 'list() without store lists OPFS too, each entry with its store');
      assert.ok(r.listAll.every((x) => x.store === 'opfs' || x.store === 'cache'));
      assert.ok(!r.listCache.some((x) => x.url === url), 'the Cache API holds no copy');
      assert.deepEqual(r.has, [true, true, false]);
      assert.deepEqual({ store: r.est.store, bytes: r.est.bytes }, { store: 'opfs', bytes: SIZE });
      assert.ok(r.est.quota > 0);
      assert.deepEqual(r.deleted, [true, false]);
      assert.deepEqual(r.left, [], 'delete removes the record, the file and partial downloads');
      assert.equal(r.hasAfter, false);
      assert.equal(r.third, 'download', 'after delete the next load downloads again');
      assert.deepEqual(r.cleared, [true, 0]);
    });

    test('a new version on the server (200 to the revalidation) replaces the stored copy', async () => {
      const file = `opfs-spec-${tag}.gguf`;
      copyFileSync(`${ROOT}tests/fixtures/tiny-f32.gguf`, `${ARTIFACTS}${file}`);
      const path = `/__test/validated/opfs-new-${tag}/artifacts/${file}`;
      const load = () => ok(worker, `
        const m = await Model.load(arg, { ...opts, cache: 'opfs' });
        const i = m.info().load;
        await m.dispose();
        return { via: i.via, cached: i.cached, list: (await Model.cache.list({ store: 'opfs' })).map((e) => e.etag) };
      `, path);
      await ok(worker, "await Model.cache.clear({ store: 'opfs' });");
      const first = await load();
      const kept = await load();
      // A later modification time: the server's ETag and Last-Modified change, so it answers 200.
      const later = new Date(Date.now() + 60000);
      utimesSync(`${ARTIFACTS}${file}`, later, later);
      const replaced = await load();
      const after = await load();
      assert.deepEqual([first.via, first.cached, first.list.length], ['download', true, 1]);
      assert.deepEqual([kept.via, kept.list], ['opfs', first.list], '304: the stored copy');
      assert.deepEqual([replaced.via, replaced.cached, replaced.list.length], ['download', true, 1], '200: downloaded and stored again');
      assert.notEqual(replaced.list[0], first.list[0], 'the record holds the new ETag');
      assert.equal(after.via, 'opfs');
      await ok(worker, "await Model.cache.clear({ store: 'opfs' });");
    });

    test('a download aborted halfway or cut by the server is never taken for the model', async () => {
      const slow = `/__test/slow/5/tests/fixtures/tiny-f32.gguf?${tag}`;
      const cut = `/__test/drop/3000000/tests/fixtures/tiny-f32.gguf?${tag}`;
      const r = await ok(worker, `
        await Model.cache.clear({ store: 'opfs' });
        const ctl = new AbortController();
        let seen = 0;
        const aborted = await Model.load(arg.slow, { ...opts, cache: 'opfs', signal: ctl.signal,
          onProgress: (p) => { seen = p.loaded; if (p.loaded > 1 << 20) ctl.abort(); } }).then(() => 'loaded', (e) => e.code);
        const dropped = await Model.load(arg.cut, { ...opts, cache: 'opfs' }).then(() => 'loaded', (e) => e.code);
        const stored = [await Model.cache.has(arg.slow, { store: 'opfs' }), await Model.cache.has(arg.cut, { store: 'opfs' }), (await Model.cache.list({ store: 'opfs' })).length];
        const m = await Model.load(arg.slow, { ...opts, cache: 'opfs' });
        const via = m.info().load.via;
        const n = (await m.logits([1, 2, 3])).length;
        await m.dispose();
        const after = await Model.cache.has(arg.slow, { store: 'opfs' });
        await Model.cache.clear({ store: 'opfs' });
        return { aborted, seen, dropped, stored, via, n, after };
      `, { slow, cut });
      assert.equal(r.aborted, 'aborted');
      assert.ok(r.seen > 1 << 20 && r.seen < SIZE, `aborted after ${r.seen} bytes`);
      assert.equal(r.dropped, 'network');
      assert.deepEqual(r.stored, [false, false, 0], 'neither partial download is stored');
      assert.equal(r.via, 'download', 'the load after the aborted one downloads the whole file');
      assert.equal(r.n, 50257);
      assert.equal(r.after, true, 'the whole download is stored');
    });

    test('a quota too small for the file: the load works, cacheNote says why, nothing is stored', async () => {
      const cdp = await web.page.context().newCDPSession(web.page);
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin(), quotaSize: 256 * 1024 });
      try {
        const r = await ok(worker, `
          await Model.cache.clear({ store: 'opfs' });
          const m = await Model.load(arg, { ...opts, cache: 'opfs' });
          const i = m.info().load;
          const n = (await m.logits([1, 2, 3])).length;
          await m.dispose();
          return { via: i.via, cached: i.cached, note: i.cacheNote, n, has: await Model.cache.has(arg, { store: 'opfs' }) };
        `, `/tests/fixtures/tiny-f32.gguf?quota-${tag}`);
        assert.deepEqual({ via: r.via, cached: r.cached, n: r.n, has: r.has }, { via: 'download', cached: false, n: 50257, has: false });
        assert.match(r.note, /^could not store http:\/\/localhost:\d+\/tests\/fixtures\/tiny-f32\.gguf\?quota-\w in the Origin Private File System \(QuotaExceededError: .*\); the storage quota is full, the next load downloads it again$/);
      } finally {
        await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin() });
        await cdp.detach();
      }
    });

    test("checkpoints: save / saveLora({ to: 'opfs', name }) load back with 'opfs:name' and give the tuned logits", async () => {
      const r = await ok(worker, `
        const seqs = arg.sequences.map((s) => new Uint32Array(s));
        const m = await Model.load('/tests/fixtures/tiny-f32.gguf', opts);
        const before = Array.from(await m.logits(arg.held));
        for await (const s of m.train(seqs, { seqLen: 16, batchSize: 2, steps: 3, optimizer: { type: 'adamw', lr: 3e-3 } })) void s;
        const tuned = Array.from(await m.logits(arg.held));
        const saved = await m.save({ type: 'f32', to: 'opfs', name: 'ck-${tag}' });
        const size = (await m.save({ type: 'f32' })).length;
        await m.dispose();
        const back = await Model.load('opfs:ck-${tag}', opts);
        const backVia = back.info().load.via;
        const got = Array.from(await back.logits(arg.held));
        await back.dispose();

        const b = await Model.load('/tests/fixtures/tiny-f32.gguf', opts);
        for await (const s of b.train(seqs, { seqLen: 16, steps: 3, seed: 1, optimizer: { type: 'adamw', lr: 2e-2 }, lora: { rank: 4, targets: ['attn_qkv', 'ffn_up'] } })) void s;
        const loraTuned = Array.from(await b.logits(arg.held));
        const loraSaved = await b.saveLora({ to: 'opfs', name: 'lora-${tag}' });
        const loraSize = (await b.saveLora()).length;
        await b.dispose();
        const withLora = await Model.load('/tests/fixtures/tiny-f32.gguf', { ...opts, lora: 'opfs:lora-${tag}' });
        const loraGot = Array.from(await withLora.logits(arg.held));
        await withLora.dispose();
        // There is no API to delete checkpoints: drop them here, so later tests' quota is theirs.
        await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
        const worst = (a, c) => Math.max(...a.map((x, i) => Math.abs(x - c[i])));
        return { saved, size, backVia, moved: worst(tuned, before), worst: worst(got, tuned), loraSaved, loraSize, loraMoved: worst(loraTuned, before), loraWorst: worst(loraGot, loraTuned) };
      `, { sequences: REF.sequences, held: REF.held });
      assert.deepEqual(r.saved, { to: 'opfs', name: `ck-${tag}`, bytes: r.size });
      assert.equal(r.size, SIZE);
      assert.equal(r.backVia, 'opfs');
      assert.ok(r.moved > 0.05, `training moved the logits by ${r.moved}`);
      assert.ok(r.worst <= 1e-4, `the checkpoint's logits differ from the tuned model's by ${r.worst}`);
      assert.deepEqual(r.loraSaved, { to: 'opfs', name: `lora-${tag}`, bytes: r.loraSize });
      assert.ok(r.loraMoved > 0.05, `LoRA training moved the logits by ${r.loraMoved}`);
      assert.ok(r.loraWorst <= 1e-4, `the OPFS adapter's logits differ from the tuned model's by ${r.loraWorst}`);
      console.log(`${tag}: checkpoint ${r.size} bytes within ${r.worst.toExponential(2)}, adapter ${r.loraSize} bytes within ${r.loraWorst.toExponential(2)}`);
    });

    test("optimizer checkpoints: save / saveLora({ optimizer: true, to: 'opfs' }) resume as one run", async () => {
      const r = await ok(worker, `
        const seqs = arg.sequences.map((s) => new Uint32Array(s));
        const run = async (m, o) => { const out = []; for await (const s of m.train(seqs, o)) out.push([s.step, s.loss, s.tokens]); return out; };
        const full = (steps) => ({ seqLen: 16, batchSize: 2, steps, optimizer: { type: 'adamw', lr: 3e-3 } });
        const lora = (steps) => ({ seqLen: 16, batchSize: 2, steps, seed: 3, optimizer: { type: 'sgd', lr: 0.1, momentum: 0.9 }, lora: { rank: 2, targets: ['attn_qkv', 'ffn_down'] } });
        const code = (p) => p.then(() => 'ok', (e) => \`\${e.code}: \${e.message}\`);
        const base = '/tests/fixtures/tiny-f32.gguf';

        const whole = await Model.load(base, opts);
        const all = await run(whole, full(6));
        const want = Array.from(await whole.logits(arg.held));
        await whole.dispose();
        const a = await Model.load(base, opts);
        await run(a, full(3));
        const saved = await a.save({ type: 'f32', optimizer: true, to: 'opfs', name: 'opt-${tag}' });
        const plainSize = (await a.save({ type: 'f32' })).length;
        await a.dispose();
        const back = await Model.load('opfs:opt-${tag}', opts);
        const wrong = await code(run(back, { ...full(1), optimizer: { type: 'sgd', lr: 0.1 } }));
        const tail = await run(back, full(3));
        const got = Array.from(await back.logits(arg.held));
        await back.dispose();

        const lw = await Model.load(base, opts);
        const lall = await run(lw, lora(6));
        const lwant = Array.from(await lw.logits(arg.held));
        await lw.dispose();
        const la = await Model.load(base, opts);
        await run(la, lora(3));
        await la.saveLora({ optimizer: true, to: 'opfs', name: 'opt-lora-${tag}' });
        await la.dispose();
        const lb = await Model.load(base, { ...opts, lora: 'opfs:opt-lora-${tag}' });
        const ltail = await run(lb, lora(3));
        const lgot = Array.from(await lb.logits(arg.held));
        await lb.dispose();
        await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
        const same = (x, y) => x.length === y.length && x.every((v, i) => v === y[i]);
        return { all, tail, saved, plainSize, wrong, logitsSame: same(got, want), lall, ltail, loraSame: same(lgot, lwant) };
      `, { sequences: REF.sequences, held: REF.held });
      // The checkpoint holds m and v beside the weights.
      assert.ok(r.saved.bytes > r.plainSize, `checkpoint ${r.saved.bytes} bytes, plain ${r.plainSize}`);
      assert.match(r.wrong, /^invalid: .*optimizer state of AdamW, and optimizer asks for SGD/);
      assert.deepEqual(r.tail, r.all.slice(3), 'updates 4..6 after the OPFS checkpoint against the run of 6');
      assert.ok(r.logitsSame, 'the resumed model\'s logits are not the uninterrupted run\'s');
      assert.deepEqual(r.ltail, r.lall.slice(3), 'LoRA updates 4..6 after the adapter checkpoint');
      assert.ok(r.loraSame, 'the resumed adapter\'s logits are not the uninterrupted run\'s');
      // AdamW's losses are PyTorch's (the reference's first 6 updates), within 1e-4.
      const want = REF.cases.find((c) => c.name === 'adamw').losses;
      r.tail.forEach(([step, loss]) => assert.ok(Math.abs(loss - want[step - 1]) <= 1e-4 * want[step - 1], `step ${step}: ${loss} against ${want[step - 1]}`));
      console.log(`${tag}: resumed from OPFS (checkpoint ${r.saved.bytes} bytes) as one run, losses and logits exactly`);
    });

    test('typed errors: a bad store, a missing checkpoint, a bad name, OPFS missing', async () => {
      const r = await ok(worker, `
        const code = (p) => p.then(() => 'ok', (e) => \`\${e.code}: \${e.message}\`);
        const out = {
          store: await code(Model.cache.list({ store: 'disk' })),
          storeAndCache: await code(Model.cache.has('/x.gguf', { store: 'opfs', cache: 'c' })),
          missing: await code(Model.load('opfs:no-such-checkpoint', opts)),
          missingLora: await code(Model.load('/tests/fixtures/tiny-f32.gguf', { ...opts, lora: 'opfs:no-such-adapter' })),
          badName: await code(Model.load('opfs:a/b', opts)),
        };
        const m = await Model.load('/tests/fixtures/tiny-f32.gguf', opts);
        out.saveNoName = await code(m.save({ type: 'f32', to: 'opfs' }));
        out.saveTo = await code(m.save({ type: 'f32', to: 'disk', name: 'x' }));
        out.nameAlone = await code(m.save({ name: 'x' }));
        out.loraTo = await code(m.saveLora({ to: 'opfs', name: '..' }));
        out.usable = (await m.logits([1, 2, 3])).length;
        await m.dispose();
        // OPFS missing (as in a browser without it): hidden on the page's navigator.storage.
        Object.defineProperty(navigator.storage, 'getDirectory', { value: undefined, configurable: true });
        try {
          out.noOpfsList = await code(Model.cache.list({ store: 'opfs' }));
          out.noOpfsLoad = await code(Model.load('opfs:x', { ...opts, worker: false }));
          const p = await Model.load('/tests/fixtures/tiny-f32.gguf', { ...opts, worker: false, cache: 'opfs' });
          out.noOpfsCache = [p.info().load.via, p.info().load.cacheNote];
          await p.dispose();
        } finally {
          delete navigator.storage.getDirectory;
        }
        return out;
      `);
      assert.match(r.store, /^invalid: Model\.cache\.list: store must be 'cache' or 'opfs', got "disk"/);
      assert.match(r.storeAndCache, /^invalid: Model\.cache\.has: cache names a Cache API cache; it does not go with store: 'opfs'/);
      assert.match(r.missing, /^invalid: Model\.load\('opfs:no-such-checkpoint'\): no checkpoint named "no-such-checkpoint" in the Origin Private File System/);
      assert.match(r.missingLora, /^invalid: Model\.load: lora: no checkpoint named "no-such-adapter"/);
      assert.match(r.badName, /^invalid: Model\.load: "opfs:a\/b": name must be a file name/);
      assert.match(r.saveNoName, /^invalid: save: to: 'opfs': name must be a file name .*got undefined/);
      assert.match(r.saveTo, /^invalid: save: to must be 'opfs'/);
      assert.match(r.nameAlone, /^invalid: save: name goes with to: 'opfs'/);
      assert.match(r.loraTo, /^invalid: saveLora: to: 'opfs': name must be a file name/);
      assert.equal(r.usable, 50257, 'the model runs after the refusals');
      assert.match(r.noOpfsList, /^unsupported: Model\.cache\.list: the Origin Private File System \(navigator\.storage\.getDirectory\) is not available here/);
      assert.match(r.noOpfsLoad, /^unsupported: Model\.load\('opfs:x'\): the Origin Private File System/);
      assert.equal(r.noOpfsCache[0], 'download');
      assert.match(r.noOpfsCache[1], /^cache: 'opfs': the Origin Private File System \(navigator\.storage\.getDirectory\) is not available here .*; loaded without it$/);
    });
  });
}

// A checkpoint larger than the memory left (issue 39 item 3: "streamed, never whole in JS
// memory"), on the page thread, where the test reaches the engine's wasm module: with the
// model's headroom capped at 8 MiB (debug_set_host_headroom) after 3 AdamW updates, the whole
// optimizer checkpoint (weights, m and v: 21.6 MB) is refused with its sizes, while to: 'opfs'
// writes it a chunk at a time (the header, then about 1 MiB of one tensor at a time) and the
// wasm memory does not grow by the file; it loads back with 'opfs:name' and 3 more updates
// give the uninterrupted 6-update run's losses and logits exactly. With a storage quota below
// the file, the write fails with 'unsupported' naming the quota, and neither the checkpoint nor
// a '.part' of it is left.
test("a checkpoint larger than the memory left is written to OPFS in pieces and resumes as one run; a full quota leaves nothing", async () => {
  const HEADROOM = 8 << 20;
  const r = await ok(false, `
    const core = await import('/pkg/ggweb_core.js');
    const seqs = arg.sequences.map((s) => new Uint32Array(s));
    const run = async (m, o) => { const out = []; for await (const s of m.train(seqs, o)) out.push([s.step, s.loss, s.tokens]); return out; };
    const full = (steps) => ({ seqLen: 16, batchSize: 2, steps, optimizer: { type: 'adamw', lr: 3e-3 } });
    const code = (p) => p.then(() => 'ok', (e) => \`\${e.code}: \${e.message}\`);
    const base = '/tests/fixtures/tiny-f32.gguf';
    const dirNames = async () => { const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-checkpoints', { create: true }); const n = []; for await (const k of d.keys()) n.push(k); return n.sort(); };

    const whole = await Model.load(base, opts);
    const all = await run(whole, full(6));
    const want = Array.from(await whole.logits(arg.held));
    await whole.dispose();
    const a = await Model.load(base, opts);
    await run(a, full(3));
    const out = {};
    core.debug_set_host_headroom(arg.headroom);
    try {
      out.refused = await code(a.save({ type: 'f32', optimizer: true }));
      out.memBefore = core.wasm_memory_bytes();
      out.saved = await a.save({ type: 'f32', optimizer: true, to: 'opfs', name: 'big' });
      out.memAfter = core.wasm_memory_bytes();
    } finally {
      core.debug_set_host_headroom(undefined);
    }
    out.names = await dirNames();
    out.fileSize = (await (await (await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-checkpoints')).getFileHandle('big')).getFile()).size;
    await a.dispose();
    const back = await Model.load('opfs:big', opts);
    out.tail = await run(back, full(3));
    const got = Array.from(await back.logits(arg.held));
    out.logitsSame = got.length === want.length && got.every((v, i) => v === want[i]);
    out.all = all;
    out.usable = (await back.logits([1, 2, 3])).length;
    await back.dispose();
    await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
    return out;
  `, { sequences: REF.sequences, held: REF.held, headroom: HEADROOM });
  // A quota of 4 MiB: the header and the first chunks are written, then a write fails.
  const cdp = await web.page.context().newCDPSession(web.page);
  await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin(), quotaSize: 4 << 20 });
  let q;
  try {
    q = await ok(false, `
      const code = (p) => p.then(() => 'ok', (e) => \`\${e.code}: \${e.message}\`);
      const names = async () => { const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-checkpoints', { create: true }); const n = []; for await (const k of d.keys()) n.push(k); return n.sort(); };
      const m = await Model.load('/tests/fixtures/tiny-f32.gguf', opts);
      for await (const s of m.train([new Uint32Array(arg)], { seqLen: 16, steps: 1, optimizer: { type: 'adamw', lr: 3e-3 } })) void s;
      const before = await names();
      const write = await code(m.save({ type: 'f32', optimizer: true, to: 'opfs', name: 'over-quota' }));
      const after = await names();
      const usable = (await m.logits([1, 2, 3])).length;
      await m.dispose();
      await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
      return { before, write, after, usable };
    `, REF.sequences[0]);
  } finally {
    await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin() });
    await cdp.detach();
  }
  assert.deepEqual(q.before, []);
  assert.match(q.write, /^unsupported: save: could not write "over-quota" to the Origin Private File System \(the storage quota is full\): QuotaExceededError: .*; nothing was written$/);
  assert.deepEqual(q.after, [], 'nothing (no .part) left after the failed write');
  assert.equal(q.usable, 50257, 'the model runs after the failed write');
  assert.match(r.refused, /^unsupported: save: the \d+-byte file does not fit in memory \(8388608 bytes of the budget are left\); type 'f16' takes less; \{ to: 'opfs', name \} writes it in pieces$/);
  const size = Number(/the (\d+)-byte file/.exec(r.refused)[1]);
  assert.ok(size > 2 * HEADROOM, `the checkpoint is ${size} bytes`);
  assert.deepEqual(r.saved, { to: 'opfs', name: 'big', bytes: size });
  assert.equal(r.fileSize, size);
  assert.deepEqual(r.names, ['big'], 'no .part left beside the checkpoint');
  assert.ok(r.memAfter - r.memBefore <= HEADROOM, `the wasm memory grew by ${r.memAfter - r.memBefore} bytes writing a ${size}-byte file`);
  assert.deepEqual(r.tail, r.all.slice(3), 'updates 4..6 after the streamed checkpoint against the run of 6');
  assert.ok(r.logitsSame, 'the resumed model\'s logits are not the uninterrupted run\'s');
  assert.equal(r.usable, 50257);
  console.log(`page: a ${size}-byte checkpoint written in pieces under an 8 MiB headroom (wasm memory +${r.memAfter - r.memBefore} bytes), resumed as one run`);
});
