// Hub ids: Model.load('owner/name', { file, revision, hubUrl }) and Model.inspect read
// {hubUrl}/{owner}/{name}/resolve/{revision}/{file}, following the Hub's redirect to its
// CDN. Offline: scripts/serve.mjs's /__test/hub/ mimics the Hub's layout (302 to
// /__test/hub-cdn/, Range, 401/404 with X-Error-Code); the default hub is only ever named,
// never fetched (a copy stored under its URL is loaded with `offline: true`).
//   node --test tests/e2e/hub.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MODELS_DIR, makeFakeModel, useHarness } from './helpers.mjs';

const FAKE = makeFakeModel(); // tests/artifacts/fake-model.gguf: repo ggweb-test/artifacts
const FILE = FAKE.url.replace('/artifacts/', '');

const web = useHarness({ coreUrl: '/e2e/fake-core.js', hubUrl: '/__test/hub' });
const { inPage } = web;

const tally = async () => (await fetch(`${web.server.url}__test/tally/hub-cdn`)).json();

for (const worker of [true, false]) {
  describe(worker ? 'in a worker' : 'on the page thread', () => {
    test('a Hub id with file loads through /resolve/ and the redirect; revision picks the branch', async () => {
      const before = (await tally()).requests;
      const r = await inPage(worker, `
        const out = [];
        for (const revision of [undefined, 'v1']) {
          const m = await Model.load('ggweb-test/artifacts', { ...opts, file: arg, revision });
          const i = m.info();
          out.push([i.fnv1a, i.load.bytes, i.load.via]);
          await m.dispose();
        }
        return out;
      `, FILE);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value, [[FAKE.fnv1a, FAKE.size, 'download'], [FAKE.fnv1a, FAKE.size, 'download']]);
      assert.equal((await tally()).requests - before, 2, 'each load reached the CDN route once');
    });

    test('an unknown revision, file or repo is code http naming the resolved URL', async () => {
      const r = await inPage(worker, `
        const codes = [];
        for (const [repo, o] of [['ggweb-test/artifacts', { revision: 'nope' }], ['ggweb-test/artifacts', { file: 'missing.gguf' }],
                                 ['someone/private-repo', {}]]) {
          try { await Model.load(repo, { ...opts, file: arg, ...o }); codes.push('ok'); } catch (e) { codes.push([e.code, e.message, e.details.status, e.details.url]); }
        }
        return codes;
      `, FILE);
      assert.ok(r.ok, r.message);
      const base = `${web.server.url.replace(/\/$/, '')}/__test/hub`;
      assert.deepEqual(r.value, [
        ['http', `HTTP 404 Not Found fetching ${base}/ggweb-test/artifacts/resolve/nope/${FILE} (Hub repo ggweb-test/artifacts, file "${FILE}", revision "nope": is each spelt right?)`,
          404, `${base}/ggweb-test/artifacts/resolve/nope/${FILE}`],
        ['http', `HTTP 404 Not Found fetching ${base}/ggweb-test/artifacts/resolve/main/missing.gguf (Hub repo ggweb-test/artifacts, file "missing.gguf", revision "main": is each spelt right?)`,
          404, `${base}/ggweb-test/artifacts/resolve/main/missing.gguf`],
        ['http', `HTTP 401 Unauthorized fetching ${base}/someone/private-repo/resolve/main/${FILE} (Hub repo someone/private-repo: missing, private or gated; ggweb sends no token)`,
          401, `${base}/someone/private-repo/resolve/main/${FILE}`],
      ]);
    });

    test('with cache, the key is the /resolve/ URL (not the CDN\'s), found by Model.cache with the same Hub options', async () => {
      const r = await inPage(worker, `
        const cache = 'ggweb-hub-spec';
        await Model.cache.clear({ cache });
        const o = { file: arg, hubUrl: '/__test/hub', cache };
        const m1 = await Model.load('ggweb-test/artifacts', { ...opts, ...o });
        const v1 = m1.info().load.via;
        await m1.dispose();
        const m2 = await Model.load('ggweb-test/artifacts', { ...opts, ...o });
        const v2 = [m2.info().load.via, m2.info().load.cacheNote];
        await m2.dispose();
        const list = (await Model.cache.list({ cache })).map((e) => e.url);
        const has = [await Model.cache.has('ggweb-test/artifacts', o), await Model.cache.has('ggweb-test/artifacts', { ...o, revision: 'v1' })];
        await Model.cache.clear({ cache });
        return { v1, v2, list, has };
      `, FILE);
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.value, {
        v1: 'download', v2: ['cache', null], list: [`${web.server.url}__test/hub/ggweb-test/artifacts/resolve/main/${FILE}`], has: [true, false],
      });
    });
  });
}

test('Model.inspect reads a Hub file\'s header with Range requests through the redirect', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed');
  const before = await tally();
  // The real wasm inspector (the fake core cannot plan); tests/fixtures/ is repo ggweb-test/fixtures.
  const r = await web.page.evaluate(() => window.run(() => window.G.Model.inspect('ggweb-test/fixtures',
    { file: 'llamacpp/tiny-gpt2-q8_0.gguf', hubUrl: '/__test/hub', revision: 'main' })));
  assert.ok(r.ok, r.message);
  const direct = await web.page.evaluate(() => window.run(() => window.G.Model.inspect('/tests/fixtures/llamacpp/tiny-gpt2-q8_0.gguf')));
  assert.ok(direct.ok, direct.message);
  assert.deepEqual(r.value.hparams, direct.value.hparams);
  assert.deepEqual(r.value.memory, direct.value.memory);
  assert.equal(r.value.source.ranged, true);
  assert.equal(r.value.source.complete, true);
  const t = await tally();
  assert.equal(t.requests - before.requests, r.value.source.requests);
  assert.deepEqual(t.ranges.slice(before.ranges.length)[0], 'bytes=0-2097151');
  const missing = await web.page.evaluate(() => window.run(() => window.G.Model.inspect('ggweb-test/fixtures',
    { file: 'nope.gguf', hubUrl: '/__test/hub' })));
  assert.equal(missing.code, 'http');
  assert.match(missing.message, /^HTTP 404 Not Found fetching http:\/\/localhost:\d+\/__test\/hub\/ggweb-test\/fixtures\/resolve\/main\/nope\.gguf /);
});

test('the default hub is https://huggingface.co: a copy stored under that URL loads offline, without a request', async () => {
  const r = await inPage(false, `
    const cache = 'ggweb-hub-default';
    const url = 'https://huggingface.co/QuantFactory/gpt2-GGUF/resolve/main/gpt2.Q8_0.gguf';
    const bytes = new Uint8Array(await (await fetch(arg)).arrayBuffer());
    await (await caches.open(cache)).put(url, new Response(bytes, { headers: { ETag: '"abc"' } }));
    const o = { file: 'gpt2.Q8_0.gguf', cache };
    const has = [await Model.cache.has('QuantFactory/gpt2-GGUF', o), await Model.cache.has('QuantFactory/gpt2-GGUF', { ...o, revision: 'main' }),
                 await Model.cache.has('QuantFactory/gpt2-GGUF', { ...o, revision: 'refs/pr/1' })];
    const m = await Model.load('QuantFactory/gpt2-GGUF', { coreUrl: opts.coreUrl, worker: false, ...o, offline: true });
    const i = m.info();
    await m.dispose();
    await Model.cache.clear({ cache });
    return { has, via: i.load.via, note: i.load.cacheNote, fnv1a: i.fnv1a };
  `, FAKE.url);
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.value, { has: [true, true, false], via: 'cache', note: null, fnv1a: FAKE.fnv1a });
});

test('without file, "owner/name" stays a relative URL; Hub options are checked strictly', async () => {
  const r = await inPage(false, `
    const out = {};
    const cases = {
      relative: () => Model.load('ggweb-test/artifacts', { coreUrl: opts.coreUrl }),
      revisionAlone: () => Model.load('ggweb-test/artifacts', { revision: 'main' }),
      hubUrlAlone: () => Model.inspect('ggweb-test/artifacts', { hubUrl: '/__test/hub' }),
      fileWithUrl: () => Model.load('https://example.com/a/b.gguf', { file: 'b.gguf' }),
      fileWithPath: () => Model.load('/ggweb-test/artifacts', { file: 'b.gguf' }),
      threeParts: () => Model.load('a/b/c', { file: 'b.gguf' }),
      dotRepo: () => Model.inspect('./b', { file: 'b.gguf' }),
      fileDotDot: () => Model.load('a/b', { file: '../b.gguf' }),
      fileNumber: () => Model.load('a/b', { file: 5 }),
      fileEmpty: () => Model.load('a/b', { file: '' }),
      revisionEmpty: () => Model.load('a/b', { file: 'x.gguf', revision: '' }),
      hubFtp: () => Model.load('a/b', { file: 'x.gguf', hubUrl: 'ftp://example.com' }),
      hubBad: () => Model.inspect('a/b', { file: 'x.gguf', hubUrl: 'http://[' }),
      blobWithFile: () => Model.load(new Blob(['GGUF']), { file: 'x.gguf' }),
    };
    for (const [k, f] of Object.entries(cases)) {
      try { await f(); out[k] = 'ok'; } catch (e) { out[k] = [e.code, e.message]; }
    }
    return out;
  `);
  assert.ok(r.ok, r.message);
  const v = r.value;
  assert.deepEqual(v.relative[0], 'http');
  assert.match(v.relative[1], /^HTTP 404 Not Found fetching http:\/\/localhost:\d+\/e2e\/ggweb-test\/artifacts$/);
  assert.deepEqual(v.revisionAlone, ['invalid', 'Model.load: revision is for a Hub id with `file` ("owner/name" plus { file }); no file was given']);
  assert.deepEqual(v.hubUrlAlone, ['invalid', 'Model.inspect: hubUrl is for a Hub id with `file` ("owner/name" plus { file }); no file was given']);
  const notId = (what, s) => ['invalid', `${what}: with \`file\`, the source must be a Hub id "owner/name" (letters, digits, - _ .), got ${s}`];
  assert.deepEqual(v.fileWithUrl, notId('Model.load', '"https://example.com/a/b.gguf"'));
  assert.deepEqual(v.fileWithPath, notId('Model.load', '"/ggweb-test/artifacts"'));
  assert.deepEqual(v.threeParts, notId('Model.load', '"a/b/c"'));
  assert.deepEqual(v.dotRepo, notId('Model.inspect', '"./b"'));
  assert.deepEqual(v.blobWithFile, notId('Model.load', 'a Blob'));
  const badFile = (s) => ['invalid', `Model.load: file must be a path in the repository such as "gpt2.Q8_0.gguf", got ${s}`];
  assert.deepEqual(v.fileDotDot, badFile('"../b.gguf"'));
  assert.deepEqual(v.fileNumber, badFile('5'));
  assert.deepEqual(v.fileEmpty, badFile('""'));
  assert.deepEqual(v.revisionEmpty, ['invalid', 'Model.load: revision must be a branch, tag or commit such as "main" (a valid git ref name), got ""']);
  assert.deepEqual(v.hubFtp, ['invalid', 'Model.load: hubUrl must be an http(s) URL without query or fragment, got "ftp://example.com"']);
  assert.deepEqual(v.hubBad, ['invalid', 'Model.inspect: hubUrl is not a valid URL: "http://["']);
});
