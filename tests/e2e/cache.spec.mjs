// Model.cache (list, has, delete, clear, estimate) and a load's `cache`, `offline` and
// `persist` options in headless Chromium, in a Web Worker and on the page thread, against
// tests/e2e/fake-core.js: a stored model is revalidated with the server (If-None-Match /
// If-Modified-Since; 304 keeps it, 200 replaces it), `offline` skips the server, a server
// that fails the revalidation leaves the stored copy in use (info().load.cacheNote says so),
// and a quota too small for the file (CDP Storage.overrideQuotaForOrigin) makes the write
// fail while the load succeeds, with the warning in cacheNote.
//   node --test tests/e2e/cache.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { ARTIFACTS, makeFakeModel, useHarness } from './helpers.mjs';

const FAKE = makeFakeModel();

/** Writes tests/artifacts/<name>: GGUF magic and `size - 4` seeded bytes; returns its FNV-1a (fake-core's info().fnv1a). */
function writeModel(name, size, seed) {
  const b = new Uint8Array(size);
  b.set([0x47, 0x47, 0x55, 0x46]);
  let x = seed;
  for (let i = 4; i < size; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  const tmp = `${ARTIFACTS}${name}.${process.pid}`;
  writeFileSync(tmp, b);
  renameSync(tmp, `${ARTIFACTS}${name}`);
  let h = 0x811c9dc5;
  for (const v of b) h = Math.imul(h ^ v, 0x01000193) >>> 0;
  return h;
}

const web = useHarness({ coreUrl: '/e2e/fake-core.js' });
const { inPage } = web;
/** The test server's origin (known once the harness's `before` has run). */
const origin = () => new URL(web.server.url).origin;

const tally = async (key) => (await fetch(`${web.server.url}__test/tally/${key}`)).json();

for (const worker of [true, false]) {
  describe(worker ? 'in a worker' : 'on the page thread', () => {
    const tag = worker ? 'w' : 'p';
    const cache = `ggweb-cache-spec-${tag}`;

    test('a stored model is listed, revalidated (304 keeps it, 200 replaces it), skipped offline, deleted, cleared', async () => {
      const file = `cache-spec-${tag}.gguf`;
      const v1 = writeModel(file, 200004, 1);
      const key = `cache-${tag}`;
      const path = `/__test/validated/${key}/artifacts/${file}`;
      const url = `${origin()}${path}`;
      const load = (extra = {}) => inPage(worker, `
        const m = await Model.load(arg.path, { ...opts, cache: arg.cache, ...arg.extra });
        const i = m.info();
        await m.dispose();
        return { via: i.load.via, cached: i.load.cached, cacheNote: i.load.cacheNote, fnv1a: i.fnv1a, bytes: i.load.bytes };
      `, { path, cache, extra });

      const empty = await inPage(worker, `
        await Model.cache.clear({ cache: arg });
        return { list: await Model.cache.list({ cache: arg }), names: await caches.keys() };
      `, cache);
      assert.ok(empty.ok, empty.message);
      assert.deepEqual(empty.value.list, []);
      assert.ok(!empty.value.names.includes(cache), 'list() of a missing cache does not create it');

      const t0 = Date.now();
      const first = await load();
      assert.deepEqual(first.value, { via: 'download', cached: true, cacheNote: null, fnv1a: v1, bytes: 200004 });
      const listed = await inPage(worker, `
        return { list: await Model.cache.list({ cache: arg.cache }), has: await Model.cache.has(arg.path, { cache: arg.cache }),
                 hasAbs: await Model.cache.has(arg.url, { cache: arg.cache }), hasOther: await Model.cache.has('/other.gguf', { cache: arg.cache }),
                 hasDefault: await Model.cache.has(arg.url) };
      `, { cache, path, url });
      assert.ok(listed.ok, listed.message);
      const [entry] = listed.value.list;
      assert.equal(listed.value.list.length, 1);
      assert.equal(entry.url, url, 'the key is the absolute URL');
      assert.equal(entry.bytes, 200004);
      assert.ok(entry.storedAt >= t0 - 1000 && entry.storedAt <= Date.now() + 1000, `storedAt ${entry.storedAt}`);
      assert.match(entry.etag, /^"[0-9a-f]+-[0-9a-f]+"$/);
      assert.deepEqual([listed.value.has, listed.value.hasAbs, listed.value.hasOther, listed.value.hasDefault], [true, true, false, false]);

      // Unchanged on the server: a conditional request, a 304, the stored bytes.
      const second = await load();
      assert.deepEqual(second.value, { via: 'cache', cached: false, cacheNote: null, fnv1a: v1, bytes: 200004 });
      let t = await tally(key);
      assert.deepEqual(t.conditional, [null, 'if-none-match,if-modified-since']);
      assert.deepEqual(t.statuses, [200, 304]);

      // offline: the stored copy, the server not asked.
      const third = await load({ offline: true });
      assert.deepEqual(third.value, { via: 'cache', cached: false, cacheNote: null, fnv1a: v1, bytes: 200004 });
      assert.equal((await tally(key)).requests, 2);

      // Changed on the server: a 200, loaded and stored in place of the old copy.
      const v2 = writeModel(file, 300004, 2);
      const fourth = await load();
      assert.deepEqual(fourth.value, { via: 'download', cached: true, cacheNote: null, fnv1a: v2, bytes: 300004 });
      t = await tally(key);
      assert.deepEqual(t.statuses, [200, 304, 200]);
      const after = await inPage(worker, `
        const list = await Model.cache.list({ cache: arg.cache });
        const m = await Model.load(arg.path, { ...opts, cache: arg.cache, offline: true });
        const fnv1a = m.info().fnv1a;
        await m.dispose();
        const del = [await Model.cache.delete(arg.path, { cache: arg.cache }), await Model.cache.delete(arg.path, { cache: arg.cache })];
        const hasAfter = await Model.cache.has(arg.path, { cache: arg.cache });
        const clear = [await Model.cache.clear({ cache: arg.cache }), await Model.cache.clear({ cache: arg.cache })];
        return { list, fnv1a, del, hasAfter, clear, listAfter: await Model.cache.list({ cache: arg.cache }) };
      `, { cache, path });
      assert.ok(after.ok, after.message);
      assert.deepEqual(after.value.list.map((e) => [e.url, e.bytes]), [[url, 300004]]);
      assert.ok(after.value.list[0].storedAt >= entry.storedAt);
      assert.notEqual(after.value.list[0].etag, entry.etag);
      assert.equal(after.value.fnv1a, v2, 'the new version replaced the old one');
      assert.deepEqual(after.value.del, [true, false]);
      assert.equal(after.value.hasAfter, false);
      assert.deepEqual(after.value.clear, [true, false]);
      assert.deepEqual(after.value.listAfter, []);
    });

    test('Last-Modified alone revalidates (If-Modified-Since); a failing server or no validator leaves the stored copy in use, with a note', async () => {
      const file = `cache-spec-lm-${tag}.gguf`;
      const v1 = writeModel(file, 100004, 3);
      const key = `cache-lm-${tag}`;
      const r = await inPage(worker, `
        await Model.cache.clear({ cache: arg.cache });
        const one = async (src) => {
          const m = await Model.load(src, { ...opts, cache: arg.cache });
          const i = m.info();
          await m.dispose();
          return [i.load.via, i.fnv1a, i.load.cacheNote];
        };
        const lm = [await one(arg.path), await one(arg.path)];
        const etag = (await Model.cache.list({ cache: arg.cache }))[0].etag;
        // Stored by hand under the key a load uses (the URL): one the server now fails, one without validators.
        const c = await caches.open(arg.cache);
        const bytes = new Uint8Array(await (await fetch('/artifacts/' + arg.file)).arrayBuffer());
        await c.put(new URL('/__test/status/503', location.href).href, new Response(bytes, { headers: { ETag: '"x"', 'Content-Length': String(bytes.length) } }));
        await c.put(new URL('/__test/status/404', location.href).href, new Response(bytes));
        const failing = await one('/__test/status/503');
        const bare = await one('/__test/status/404');
        const list = (await Model.cache.list({ cache: arg.cache })).map((e) => [new URL(e.url).pathname, e.bytes, e.storedAt, e.etag]);
        await Model.cache.clear({ cache: arg.cache });
        return { lm, etag, failing, bare, list };
      `, { cache, file, path: `/__test/lastmod/${key}/artifacts/${file}` });
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value.lm, [['download', v1, null], ['cache', v1, null]]);
      assert.equal(r.value.etag, null, 'no ETag was sent');
      const t = await tally(key);
      assert.deepEqual(t.conditional, [null, 'if-modified-since']);
      assert.deepEqual(t.statuses, [200, 304]);
      assert.deepEqual(r.value.failing.slice(0, 2), ['cache', v1]);
      assert.match(r.value.failing[2], /^the server answered HTTP 503 when revalidating http:\/\/localhost:\d+\/__test\/status\/503; used the stored copy$/);
      assert.deepEqual(r.value.bare.slice(0, 2), ['cache', v1]);
      assert.match(r.value.bare[2], /^the stored copy of http:\/\/localhost:\d+\/__test\/status\/404 has no ETag or Last-Modified to revalidate with; used as stored$/);
      // Stored by hand: the length measured from the body, no storedAt.
      assert.deepEqual(r.value.list.map((e) => e.slice(0, 3)), [
        [`/__test/lastmod/${key}/artifacts/${file}`, 100004, r.value.list[0][2]], ['/__test/status/503', 100004, null], ['/__test/status/404', 100004, null]]);
      assert.ok(r.value.list[0][2] > 0);
    });

    test('a write over the origin\'s quota fails: the load succeeds, info().load.cacheNote warns, nothing is stored', async () => {
      const file = `cache-spec-quota-${tag}.gguf`;
      const fnv = writeModel(file, 1 << 20, 4);
      const cdp = await web.page.context().newCDPSession(web.page);
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin(), quotaSize: 64 * 1024 });
      try {
        const r = await inPage(worker, `
          await Model.cache.clear({ cache: arg.cache });
          const warnings = [];
          const warn = console.warn;
          console.warn = (...a) => { warnings.push(a.join(' ')); warn(...a); };
          let m;
          try { m = await Model.load(arg.path, { ...opts, cache: arg.cache }); } finally { console.warn = warn; }
          const i = m.info();
          await m.dispose();
          const estimate = await Model.cache.estimate();
          return { load: [i.load.via, i.load.cached, i.fnv1a], note: i.load.cacheNote, warnings,
                   list: await Model.cache.list({ cache: arg.cache }), estimate };
        `, { cache, path: `/artifacts/${file}` });
        assert.ok(r.ok, r.message);
        assert.deepEqual(r.value.load, ['download', false, fnv]);
        assert.match(r.value.note, /^could not store http:\/\/localhost:\d+\/artifacts\/cache-spec-quota-\w\.gguf in the cache "ggweb-cache-spec-\w" \(QuotaExceededError: .*\); the storage quota is full, the next load downloads it again$/);
        assert.deepEqual(r.value.list, []);
        // (estimate()'s quota does not show a CDP override in Chromium 156; the write fails all the same.)
        assert.ok(r.value.estimate.usage >= 0 && r.value.estimate.quota > 0, JSON.stringify(r.value.estimate));
        // The page-thread load warns on the page's console; a worker's warning is the worker's.
        if (!worker) assert.deepEqual(r.value.warnings, [`ggweb: ${r.value.note}`]);
      } finally {
        await cdp.send('Storage.overrideQuotaForOrigin', { origin: origin() });
        await cdp.detach();
      }
    });

    test('persist: true asks navigator.storage.persist(); its answer is info().load.persisted', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg, { ...opts, persist: true });
        const load = m.info().load;
        await m.dispose();
        const m2 = await Model.load(arg, opts);
        const plain = 'persisted' in m2.info().load;
        await m2.dispose();
        return { persisted: load.persisted, note: load.cacheNote, now: await navigator.storage.persisted(), plain, estimate: await Model.cache.estimate() };
      `, FAKE.url);
      assert.ok(r.ok, r.message);
      assert.equal(typeof r.value.persisted, 'boolean');
      assert.equal(r.value.persisted, r.value.now);
      assert.equal(r.value.note, null);
      assert.equal(r.value.plain, false, 'no persisted field without persist');
      assert.equal(r.value.estimate.persisted, r.value.now);
      assert.ok(Number.isFinite(r.value.estimate.usage) && r.value.estimate.quota > 0, JSON.stringify(r.value.estimate));
    });
  });
}

test('the options of Model.cache and of offline/persist are checked strictly', async () => {
  const r = await inPage(false, `
    const codes = {};
    const cases = {
      listKey: () => Model.cache.list({ cach: 'x' }),
      listName: () => Model.cache.list({ cache: 5 }),
      listFalse: () => Model.cache.list({ cache: false }),
      hasNumber: () => Model.cache.has(42),
      hasBadUrl: () => Model.cache.has('http://['),
      hasRevision: () => Model.cache.has('/x.gguf', { revision: 'main' }),
      deleteKey: () => Model.cache.delete('/x.gguf', { signal: 1 }),
      estimateArg: () => Model.cache.estimate({ cache: 'x' }),
      offlineNoCache: () => Model.load('/artifacts/fake-model.gguf', { ...opts, offline: true }),
      offlineType: () => Model.load('/artifacts/fake-model.gguf', { ...opts, cache: true, offline: 'yes' }),
      persistType: () => Model.load('/artifacts/fake-model.gguf', { ...opts, persist: 1 }),
      cacheEmpty: () => Model.load('/artifacts/fake-model.gguf', { ...opts, cache: '' }),
    };
    for (const [k, f] of Object.entries(cases)) {
      try { await f(); codes[k] = 'ok'; } catch (e) { codes[k] = [e.code, e.message]; }
    }
    return codes;
  `);
  assert.ok(r.ok, r.message);
  const v = r.value;
  assert.deepEqual(v.listKey, ['invalid', 'Model.cache.list: unknown option "cach" (known: cache, store)']);
  assert.deepEqual(v.listName, ['invalid', 'Model.cache.list: cache must be a cache name (a non-empty string) or true, got 5']);
  assert.equal(v.listFalse[0], 'invalid');
  assert.deepEqual(v.hasNumber, ['invalid', 'Model.cache.has: the model must be a URL (or a Hub id with { file }), got 42']);
  assert.deepEqual(v.hasBadUrl, ['invalid', 'Model.cache.has: not a valid URL: "http://["']);
  assert.deepEqual(v.hasRevision, ['invalid', 'Model.cache.has: revision is for a Hub id with `file` ("owner/name" plus { file }); no file was given']);
  assert.deepEqual(v.deleteKey, ['invalid', 'Model.cache.delete: unknown option "signal" (known: cache, store, file, revision, hubUrl)']);
  assert.deepEqual(v.estimateArg, ['invalid', 'Model.cache.estimate: unknown option "cache" (known: store)']);
  assert.deepEqual(v.offlineNoCache, ['invalid', 'Model.load: offline: true reads the stored copy, so it needs cache (true or a cache name)']);
  assert.deepEqual(v.offlineType, ['invalid', 'offline must be true or false, got "yes"']);
  assert.deepEqual(v.persistType, ['invalid', 'persist must be true or false, got 1']);
  assert.deepEqual(v.cacheEmpty, ['invalid', 'cache must be true, false, \'opfs\' or a cache name, got ""']);
});

test('cache: true stores in "ggweb-models", the cache Model.cache reads without a name', async () => {
  const r = await inPage(true, `
    await caches.delete('ggweb-models');
    const m = await Model.load(arg, { ...opts, cache: true });
    await m.dispose();
    const names = await caches.keys();
    const list = (await Model.cache.list()).map((e) => [new URL(e.url).pathname, e.bytes]);
    const has = await Model.cache.has(arg);
    const cleared = await Model.cache.clear();
    return { stored: names.includes('ggweb-models'), list, has, cleared, after: await Model.cache.list() };
  `, FAKE.url);
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.value, { stored: true, list: [[FAKE.url, FAKE.size]], has: true, cleared: true, after: [] });
});
