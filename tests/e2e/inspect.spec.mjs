// Model.inspect (issue #17, item 3) in headless Chromium: the GGUF header alone, read with
// Range requests (or a streamed download cancelled after it), gives the same hyperparameters
// and memory plan as a later Model.load's info(), on the CPU and split with WebGPU
// (SwiftShader); the server saw only the header's bytes; a header whose KV cache cannot fit
// in wasm32's 4 GiB says fits: false with the reason; a truncated header is 'format'; an
// unknown option 'invalid'; no worker and no threaded build is started for it. The
// `ggweb/tokenizer` entry's Tokenizer.load over the same header path, on the page and in a worker.
//   node --test tests/e2e/inspect.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { MODELS_DIR, launch, openPage, serve } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the llama.cpp-made tiny models (tests/fixtures/llamacpp) are needed');
const FILES = ['tiny-gpt2-f32.gguf', 'tiny-gpt2-f16.gguf', 'tiny-gpt2-q8_0.gguf', 'tiny-gpt2-q4_0.gguf'];
const size = (f) => statSync(`${MODELS_DIR}/${f}`).size;
// source.js INSPECT_FIRST_RANGE: one request covers these headers (about 1.77 MB).
const FIRST_RANGE = 2 << 20;
const OPTS = { nCtx: 128, nBatch: 16 };

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
        return { ok: false, code: e.code, message: e.message, isGgweb: e instanceof window.G.GgwebError };
      }
    };
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Runs `body` in the page with `Model` and `arg` in scope, through window.run. */
function inPage(body, arg) {
  return page.evaluate(({ body, arg }) => {
    // eslint-disable-next-line no-new-func
    const fn = new Function('Model', 'arg', `return (async () => { ${body} })()`);
    return window.run(() => fn(window.G.Model, arg));
  }, { body, arg });
}

async function tally(key) {
  return (await fetch(`${server.url}__test/tally/${key}`)).json();
}

test('inspect reads only the header and plans what a load then allocates (CPU)', async () => {
  for (const file of FILES) {
    const key = `cpu-${file.replace(/\W/g, '')}`;
    const r = await inPage(`
      const ins = await Model.inspect(arg.url, arg.opts);
      const m = await Model.load(arg.plain, arg.opts);
      const info = m.info();
      await m.dispose();
      return { ins, info };
    `, { url: `/__test/counted/${key}/shared-models/${file}`, plain: `/shared-models/${file}`, opts: OPTS });
    assert.ok(r.ok, `${file}: ${r.message}`);
    const { ins, info } = r.value;
    assert.deepEqual(ins.hparams, info.hparams, file);
    assert.equal(ins.backend, 'cpu');
    assert.deepEqual(
      { weights: ins.memory.weights, kv: ins.memory.kv, compute: ins.memory.compute, kvType: ins.memory.kvType },
      { weights: info.memory.weights, kv: info.memory.kv, compute: info.memory.compute, kvType: info.memory.kvType },
      file,
    );
    assert.equal(ins.memory.total, info.memory.weights + info.memory.kv + info.memory.compute);
    assert.deepEqual(ins.memory.byBackend, info.split.bytesPerBackend, file);
    assert.equal(ins.fits.ok, true, ins.fits.reason);
    assert.ok(ins.fits.wasmSpaceLeft > 3 * 2 ** 30, `a fresh instance has most of 4 GiB left: ${ins.fits.wasmSpaceLeft}`);
    // The tensors: every one, their types summed.
    // Embeddings (token, position), 12 per block, the output norm (weight, bias) and output.weight.
    assert.equal(ins.tensors.length, 5 + 12 * info.hparams.n_layer, `${file}: ${ins.tensors.map((t) => t.name)}`);
    const byType = {};
    for (const t of ins.tensors) {
      byType[t.type] ??= { count: 0, bytes: 0 };
      byType[t.type].count += 1;
      byType[t.type].bytes += t.bytes;
    }
    assert.deepEqual(ins.types, byType);
    const quant = file.match(/-(\w+)\.gguf$/)[1];
    assert.ok(ins.types[quant]?.count > 0, `${file}: ${JSON.stringify(ins.types)}`);
    assert.deepEqual(ins.tensors.find((t) => t.name === 'token_embd.weight').ne, [info.hparams.n_embd, info.hparams.n_vocab]);
    // What the server sent: one Range request of the first size, nothing of the weights after it.
    const t = await tally(key);
    assert.deepEqual(t.ranges, [`bytes=0-${FIRST_RANGE - 1}`], file);
    // At most that range; all of it only if the server read the file faster than the page
    // cancelled (CI once read 1,966,080 of 2,097,152 bytes before the cancel arrived).
    assert.ok(t.bytes >= ins.source.bytesRead && t.bytes <= FIRST_RANGE, `${file}: ${t.bytes} bytes served, ${ins.source.bytesRead} read`);
    // The page stopped reading (and cancelled the body) once the tensor infos were in.
    // (The header ends within one alignment of dataOffset: its padding need not be read.)
    assert.ok(ins.source.bytesRead >= ins.file.dataOffset - ins.file.alignment && ins.source.bytesRead <= FIRST_RANGE, JSON.stringify(ins.source));
    assert.deepEqual([ins.source.ranged, ins.source.requests, ins.source.size], [true, 1, size(file)]);
    assert.deepEqual([ins.file.size, ins.file.alignment], [size(file), 32]);
    assert.ok(t.bytes < size(file) / 3, `${file}: ${t.bytes} of ${size(file)} bytes served`);
  }
});

test('no worker and no threaded build is started for an inspection', async () => {
  const r = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name));
  // The page has loaded models in workers by now (the test above): look at a fresh page.
  const { page: p2 } = await openPage(browser, `${server.url}e2e/harness.html`);
  const names = await p2.evaluate(async (url) => {
    const G = await import('/ggweb.js');
    await G.Model.inspect(url, { nThreads: 4 });
    return performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname);
  }, '/shared-models/tiny-gpt2-q8_0.gguf');
  await p2.close();
  assert.ok(r.length > 0);
  assert.ok(names.includes('/pkg/ggweb_core_bg.wasm'), names.join(' '));
  assert.deepEqual(names.filter((n) => /worker|threads/.test(n)), [], names.join(' '));
});

test('a server without Range: the download is cancelled once the header is in', async () => {
  const file = FILES[0]; // the F32 file, 28 MB
  const r = await inPage('return Model.inspect(arg);', `/__test/norange/nr/shared-models/${file}`);
  assert.ok(r.ok, r.message);
  assert.deepEqual([r.value.source.ranged, r.value.source.requests], [false, 1]);
  assert.equal(r.value.hparams.n_layer, 2);
  // The route sends ~12 MB/s (scripts/serve.mjs): the header is in after ~0.1 s, and the
  // transfer stops then: the rest of the file is never sent. On a loaded machine the cancel
  // can meet one more chunk in flight, so the count is read until it holds for 300 ms.
  let t = await tally('nr');
  for (let i = 0; i < 10; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const now = await tally('nr');
    if (now.bytes === t.bytes) break;
    t = now;
  }
  assert.ok(t.bytes < size(file), `${t.bytes} of ${size(file)} bytes read by the server`);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await tally('nr')).bytes, t.bytes, 'the server kept sending after the cancel');
});

test('File/Blob and bytes sources give the same report as the URL', async () => {
  const r = await inPage(`
    const bytes = new Uint8Array(await (await fetch(arg)).arrayBuffer());
    const a = await Model.inspect(arg);
    const b = await Model.inspect(new Blob([bytes]));
    const c = await Model.inspect(bytes);
    return [a, b, c].map((x) => ({ hparams: x.hparams, memory: x.memory, via: x.source.via, read: x.source.bytesRead }));
  `, '/shared-models/tiny-gpt2-q4_0.gguf');
  assert.ok(r.ok, r.message);
  const [a, b, c] = r.value;
  assert.deepEqual([b.hparams, c.hparams], [a.hparams, a.hparams]);
  assert.deepEqual([b.memory, c.memory], [a.memory, a.memory]);
  assert.deepEqual([a.via, b.via, c.via], ['download', 'file', 'bytes']);
  assert.ok(b.read <= FIRST_RANGE, `${b.read}`); // a Blob is sliced like a range
});

test('WebGPU split: the plan per backend equals the loaded model split', async () => {
  const opts = { backend: 'webgpu', gpuLayers: 1, nCtx: 16, nBatch: 8 };
  const r = await inPage(`
    const ins = await Model.inspect(arg.url, arg.opts);
    const m = await Model.load(arg.url, arg.opts);
    const info = m.info();
    await m.dispose();
    return { ins, info };
  `, { url: '/shared-models/tiny-gpt2-f32.gguf', opts });
  assert.ok(r.ok, r.message);
  const { ins, info } = r.value;
  assert.equal(ins.backend, 'webgpu');
  assert.deepEqual(Object.keys(ins.memory.byBackend).sort(), ['CPU', 'WebGPU']);
  assert.deepEqual(ins.memory.byBackend, info.split.bytesPerBackend);
  assert.deepEqual([ins.memory.weights, ins.memory.kv, ins.memory.compute], [info.memory.weights, info.memory.kv, info.memory.compute]);
  assert.equal(ins.fits.ok, true, ins.fits.reason);
  assert.ok(ins.fits.limits.WebGPU.maxBufferSize >= 2 ** 28, JSON.stringify(ins.fits.limits));
});

// The Q8_0 file's header made to describe a model with a context of 2^22 that is consistent
// with itself (a lying header is a format error, SECURITY.md): gpt2.context_length raised, and
// position_embd.weight given 2^22 rows and moved past every other tensor (4 GiB on), so no two
// overlap. The KV cache for that context is 2 x n_layer x n_embd x 2^22 x 4 bytes = 4 GiB, over
// wasm32's space. Only the header travels (a stream: no file size to hold the tensors to).
const HUGE_CTX = 1 << 22;
const hugeHeader = `
    const head = new Uint8Array(await (await fetch(arg, { headers: { Range: 'bytes=0-${FIRST_RANGE - 1}' } })).arrayBuffer());
    const dv = new DataView(head.buffer);
    const find = (text) => {
      const key = new TextEncoder().encode(text);
      for (let i = 0; i + key.length <= head.length; i++) if (key.every((b, j) => head[i + j] === b)) return i + key.length;
      throw new Error('not in the header: ' + text);
    };
    const ctx = find('gpt2.context_length');
    if (dv.getUint32(ctx, true) !== 4) throw new Error('gpt2.context_length is not a u32');
    dv.setUint32(ctx + 4, ${HUGE_CTX}, true);
    // tensor info: name, n_dims (u32), ne (u64 each), type (u32), offset (u64)
    const ti = find('position_embd.weight');
    const nDims = dv.getUint32(ti, true);
    if (nDims !== 2) throw new Error('position_embd.weight is not 2-D');
    dv.setBigUint64(ti + 4 + 8, BigInt(${HUGE_CTX}), true);
    dv.setBigUint64(ti + 4 + 8 * nDims + 4, 1n << 32n, true);
`;

test('a header whose KV cache cannot fit in wasm32 says fits: false, before any weight', async () => {
  const r = await inPage(hugeHeader + `
    return Model.inspect(new Blob([head]).stream());
  `, '/shared-models/tiny-gpt2-q8_0.gguf');
  assert.ok(r.ok, r.message);
  const ins = r.value;
  assert.equal(ins.hparams.n_ctx_train, HUGE_CTX);
  assert.equal(ins.fits.ok, false);
  assert.equal(ins.memory.kv, 2 * ins.hparams.n_layer * ins.hparams.n_embd * HUGE_CTX * 4);
  assert.equal(ins.memory.compute, null);
  // The first limit it meets: one 2 GiB KV tensor is over what a 32-bit allocation holds.
  assert.equal(ins.fits.reason, 'model too large: needs 2147483648 bytes (its largest tensor, 2147483648 bytes, exceeds what one 32-bit allocation can hold), the memory budget is 2147483647 bytes');
  assert.ok(ins.fits.wasmSpaceLeft < 2 ** 32);
  // Model.load refuses the same header with code 'unsupported' at the same point.
  const l = await inPage(hugeHeader + `
    return Model.load(new Blob([head]).stream(), { worker: false });
  `, '/shared-models/tiny-gpt2-q8_0.gguf');
  assert.equal(l.code, 'unsupported', l.message);
});

test('a truncated or malformed header rejects with code format, as a load does', async () => {
  for (const cut of [0, 24, 1000, 100000]) {
    const r = await inPage(`
      const bytes = new Uint8Array(await (await fetch(arg.url)).arrayBuffer()).slice(0, arg.cut);
      const ins = await Model.inspect(new Blob([bytes])).catch((e) => e);
      const load = await Model.load(bytes, { worker: false }).catch((e) => e);
      return { ins: [ins.code, ins.message], load: [load.code, load.message] };
    `, { url: '/shared-models/tiny-gpt2-q8_0.gguf', cut });
    assert.ok(r.ok, r.message);
    assert.equal(r.value.ins[0], 'format', `cut ${cut}: ${r.value.ins[1]}`);
    assert.equal(r.value.load[0], 'format', `cut ${cut}: ${r.value.load[1]}`);
  }
  const bad = await inPage("return Model.inspect(new TextEncoder().encode('not a gguf file at all, no'));");
  assert.deepEqual([bad.ok, bad.code, bad.isGgweb], [false, 'format', true], bad.message);
});

// The `ggweb/tokenizer` entry (issue #40 item 4) reads a model's tokenizer through the same
// header path: only the first range of the file, no worker, and on the page and in a module
// worker the ids of Hugging Face's tokenizer (tokenizer_ref.json) and of the model's own
// tokenize, with offsets equal in both.
test('ggweb/tokenizer: the header\'s tokenizer from one range, the model\'s ids, on the page and in a worker', async () => {
  const ref = JSON.parse(readFileSync(new URL('../fixtures/tokenizer_ref.json', import.meta.url), 'utf8')).cases;
  const texts = ref.map((c) => c.text);
  const file = 'tiny-gpt2-f32.gguf';
  const r = await page.evaluate(async ({ texts, url, plain }) => window.run(async () => {
    const { Tokenizer } = await import('/tokenizer.js');
    const tok = await Tokenizer.load(url);
    const page = texts.map((t) => ({ ids: Array.from(tok.encode(t)), special: Array.from(tok.encode(t, { special: true })), offsets: Array.from(tok.encode(t, { offsets: true }).offsets) }));
    // A module worker that imports the entry itself and reads the shipped vocabulary.
    const src = `import { Tokenizer } from '${location.origin}/tokenizer.js';
      onmessage = async ({ data }) => {
        try {
          const tok = await Tokenizer.gpt2();
          postMessage({ ok: true, out: data.map((t) => ({ ids: Array.from(tok.encode(t)), offsets: Array.from(tok.encode(t, { offsets: true }).offsets), count: tok.count(t) })) });
        } catch (e) { postMessage({ ok: false, message: e.message }); }
      };`;
    const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
    const inWorker = await new Promise((resolve, reject) => {
      w.onmessage = ({ data }) => (data.ok ? resolve(data.out) : reject(new Error(data.message)));
      w.onerror = (e) => reject(new Error(`worker: ${e.message}`));
      w.postMessage(texts);
    });
    w.terminate();
    // The model's own tokenizer (in its worker) on the same texts.
    const m = await window.G.Model.load(plain);
    const model = [];
    for (const t of texts) model.push({ ids: Array.from(await m.tokenize(t)), special: Array.from(await m.tokenize(t, { special: true })) });
    await m.dispose();
    const bad = [];
    for (const u of ['/tokenizer.js', '/no-such-file.gguf']) bad.push(await Tokenizer.load(u).then(() => null, (e) => [e.code, e.message]));
    return { page, inWorker, model, bad };
  }), { texts, url: `/__test/counted/tok-f32/shared-models/${file}`, plain: `/shared-models/${file}` });
  assert.ok(r.ok, r.message);
  const { page: onPage, inWorker, model, bad } = r.value;
  const tally = await (await fetch(`${server.url}__test/tally/tok-f32`)).json();
  assert.deepEqual(tally.ranges, [`bytes=0-${FIRST_RANGE - 1}`], 'one Range request');
  assert.ok(tally.bytes <= FIRST_RANGE && tally.bytes < size(file), `${tally.bytes} bytes read`);
  ref.forEach((c, i) => {
    assert.deepEqual(onPage[i].ids, c.ids, `page: ${JSON.stringify(c.text)}`);
    assert.deepEqual(onPage[i].special, c.special_ids ?? c.ids, `page, special: ${JSON.stringify(c.text)}`);
    assert.deepEqual(model[i], { ids: onPage[i].ids, special: onPage[i].special }, `model.tokenize: ${JSON.stringify(c.text)}`);
    assert.deepEqual(inWorker[i], { ids: c.ids, offsets: onPage[i].offsets, count: c.ids.length }, `worker: ${JSON.stringify(c.text)}`);
    assert.equal(onPage[i].offsets.at(-1) ?? 0, c.text.length);
  });
  assert.equal(bad[0][0], 'format', bad[0][1]);
  assert.equal(bad[1][0], 'http', bad[1][1]);
  // The 404 asked for above is the page's only expected console error.
  for (let i = problems.length - 1; i >= 0; i--) if (problems[i].includes('/no-such-file.gguf')) problems.splice(i, 1);
});

test('options are checked strictly: unknown key and bad values are invalid', async () => {
  const url = '/shared-models/tiny-gpt2-q8_0.gguf';
  for (const [opts, pattern] of [
    [{ nctx: 16 }, /Model\.inspect: unknown option "nctx"/],
    [{ onProgress: true }, /unknown option "onProgress"/],
    [{ kvType: 'f8' }, /kvType/],
    [{ nCtx: 0 }, /nCtx/],
    [{ backend: 'gpu' }, /backend/],
    [{ nCtx: 1 << 20 }, /n_ctx 1048576 exceeds the model's context length/],
  ]) {
    const r = await page.evaluate(async ({ url, opts }) => {
      if (opts.onProgress) opts.onProgress = () => {};
      return window.run(() => window.G.Model.inspect(url, opts));
    }, { url, opts });
    assert.deepEqual([r.ok, r.code], [false, 'invalid'], `${JSON.stringify(opts)}: ${r.message}`);
    assert.match(r.message, pattern);
  }
  assert.deepEqual(problems.filter((p) => !p.includes('favicon.ico')), []);
});
