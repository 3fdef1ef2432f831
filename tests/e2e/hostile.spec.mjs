// Hostile files through the real module in headless Chromium: llama.cpp's tiny GPT-2 F16
// GGUF (../shared/models), cut short at points across its header and data, with every
// field of its header mutated (magic, version, counts, each key/value's key length, type
// and value, each tensor info's name length, dims, type and offset), with hyperparameters
// that imply huge or overflowing sizes, and with tensors that contradict the
// hyperparameters. Each goes through `Model.load` and must be refused with a GgwebError of
// code `format` (the file's fault: never `internal`, never a wasm trap, never "model too
// large" for a file that lies); then a good model loads and generates Hugging Face's greedy
// tokens in the same page.
//   node --test tests/e2e/hostile.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { HF, MODELS_DIR, launch, openPage, serve } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const URL_F16 = '/shared-models/tiny-gpt2-f16.gguf';
const FILE = readFileSync(`${MODELS_DIR}/tiny-gpt2-f16.gguf`);

// --- where each header field is (GGUF v3: little-endian) ---

const SCALAR = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

/** Offsets of every field of the header: { kvs: [...], tensors: [...], headerEnd }. */
function parseHeader(buf) {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let at = 0;
  const u32 = () => { const v = dv.getUint32(at, true); at += 4; return v; };
  const u64 = () => { const v = Number(dv.getBigUint64(at, true)); at += 8; return v; };
  const str = () => { const lenAt = at; const n = u64(); const s = buf.subarray(at, at + n).toString('utf8'); at += n; return { lenAt, s }; };
  assert.equal(buf.subarray(0, 4).toString('latin1'), 'GGUF');
  at = 4;
  const version = u32();
  const nTensors = u64();
  const nKv = u64();
  const kvs = [];
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) {
      const t = u32(); const n = u64();
      for (let i = 0; i < n; i++) skip(t);
      return;
    }
    at += SCALAR[type];
  };
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const typeAt = at;
    const type = u32();
    const valueAt = at;
    let arr = null;
    if (type === 9) {
      const t = u32(); const n = u64();
      arr = { typeAt: valueAt, lenAt: valueAt + 4, elemType: t, n };
      at = valueAt;
    }
    skip(type);
    kvs.push({ key: key.s, keyLenAt: key.lenAt, typeAt, type, valueAt, arr });
  }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const nDimsAt = at;
    const nDims = u32();
    const neAt = at;
    const ne = Array.from({ length: nDims }, u64);
    const typeAt = at;
    const type = u32();
    const offsetAt = at;
    const offset = u64();
    tensors.push({ name: name.s, nameLenAt: name.lenAt, nDimsAt, nDims, neAt, ne, typeAt, type, offsetAt, offset });
  }
  return { version, nTensors, nKv, kvs, tensors, headerEnd: at };
}

const H = parseHeader(FILE);

// --- the cases: { name, cut?, patches: [[offset, byte array]] } ---

const le32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v >>> 0); return [...b]; };
const le64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return [...b]; };
const U64_MAX = (1n << 64n) - 1n;

function cases() {
  const out = [];
  const add = (name, patches, cut) => out.push({ name, patches, cut });
  // Truncations: inside each fixed field, inside the key/values and tensor infos, at the end
  // of the header, inside the data, one byte short.
  const kvMid = H.kvs[Math.floor(H.kvs.length / 2)];
  const tMid = H.tensors[Math.floor(H.tensors.length / 2)];
  const cuts = [0, 1, 3, 4, 6, 8, 15, 16, 23, 24, 30, H.kvs[0].typeAt, kvMid.valueAt + 1, H.tensors[0].nameLenAt,
    tMid.neAt + 3, tMid.offsetAt + 7, H.headerEnd, H.headerEnd + 17, FILE.length >> 1, FILE.length - 1];
  for (const c of cuts) add(`truncated at ${c} of ${FILE.length}`, [], c);
  // The fixed fields.
  add('magic GGUX', [[3, [0x58]]]);
  for (const v of [0, 1, 4, 0xffffffff]) add(`version ${v}`, [[4, le32(v)]]);
  for (const v of [0n, BigInt(H.nTensors - 1), BigInt(H.nTensors + 1), 1n << 40n, U64_MAX]) add(`tensor count ${v}`, [[8, le64(v)]]);
  for (const v of [0n, BigInt(H.nKv - 1), BigInt(H.nKv + 1), 1n << 40n, U64_MAX]) add(`kv count ${v}`, [[16, le64(v)]]);
  // Every key/value: its key length, its type, and its value where it is a length or a size.
  for (const kv of H.kvs) {
    add(`${kv.key}: key length 2^40`, [[kv.keyLenAt, le64(1n << 40n)]]);
    add(`${kv.key}: key length u64::MAX`, [[kv.keyLenAt, le64(U64_MAX)]]);
    add(`${kv.key}: value type 13`, [[kv.typeAt, le32(13)]]);
    if (kv.type === 8) add(`${kv.key}: string length 2^40`, [[kv.valueAt, le64(1n << 40n)]]);
    if (kv.arr) {
      add(`${kv.key}: array element type 13`, [[kv.arr.typeAt, le32(13)]]);
      add(`${kv.key}: array element type array`, [[kv.arr.typeAt, le32(9)]]);
      add(`${kv.key}: array length 2^40`, [[kv.arr.lenAt, le64(1n << 40n)]]);
      add(`${kv.key}: array length + 1`, [[kv.arr.lenAt, le64(BigInt(kv.arr.n + 1))]]);
    }
    // Hyperparameters: zero, huge, u32::MAX, one off (each contradicts the tensors).
    if (kv.key.startsWith('gpt2.') && kv.type === 4) {
      const v = FILE.readUInt32LE(kv.valueAt);
      for (const x of [0, v + 1, v - 1, 1 << 30, 0x80000000, 0xffffffff]) add(`${kv.key} ${x} (file: ${v})`, [[kv.valueAt, le32(x)]]);
    }
    if (kv.key === 'gpt2.attention.layer_norm_epsilon') {
      for (const x of [0, -1, 1, NaN, Infinity]) {
        const b = Buffer.alloc(4); b.writeFloatLE(x);
        add(`${kv.key} ${x}`, [[kv.valueAt, [...b]]]);
      }
    }
  }
  // Every tensor info: name length, dims, each dimension, type, offset.
  for (const t of H.tensors) {
    add(`${t.name}: name length 2^40`, [[t.nameLenAt, le64(1n << 40n)]]);
    add(`${t.name}: name length 64`, [[t.nameLenAt, le64(64)]]);
    add(`${t.name}: 5 dims`, [[t.nDimsAt, le32(5)]]);
    add(`${t.name}: 0 dims`, [[t.nDimsAt, le32(0)]]);
    t.ne.forEach((n, i) => {
      add(`${t.name}: ne[${i}] ${n} -> ${n * 2}`, [[t.neAt + 8 * i, le64(n * 2)]]);
      add(`${t.name}: ne[${i}] ${n} -> 2^62`, [[t.neAt + 8 * i, le64(1n << 62n)]]);
      add(`${t.name}: ne[${i}] ${n} -> -1`, [[t.neAt + 8 * i, le64(U64_MAX)]]);
    });
    if (t.ne.length === 2 && t.ne[0] !== t.ne[1]) {
      add(`${t.name}: dims swapped`, [[t.neAt, le64(t.ne[1])], [t.neAt + 8, le64(t.ne[0])]]);
    }
    add(`${t.name}: type 99`, [[t.typeAt, le32(99)]]);
    // F16 → F32 doubles the bytes (tensors overlap, or pass the end); F32 → I32 keeps them,
    // so only the loader's check that every node is runnable can refuse it. (F32 → F16 is
    // not hostile: such a file is valid and runs.)
    add(`${t.name}: type ${t.type === 1 ? 'f32' : 'i32'}`, [[t.typeAt, le32(t.type === 1 ? 0 : 26)]]);
    add(`${t.name}: offset + 1`, [[t.offsetAt, le64(t.offset + 1)]]);
    add(`${t.name}: offset 2^60`, [[t.offsetAt, le64(1n << 60n)]]);
  }
  // Tensors the hyperparameters do not describe: a block past block_count, a lost one.
  const rename = (from, to) => {
    const t = H.tensors.find((x) => x.name === from);
    assert.ok(t && from.length === to.length, from);
    return [[t.nameLenAt + 8, [...Buffer.from(to)]]];
  };
  add('blk.1 renamed blk.7', rename('blk.1.attn_qkv.weight', 'blk.7.attn_qkv.weight'));
  add('a block index of usize::MAX', rename('blk.1.attn_output.weight', 'blk.18446744073709551615'));
  add('token_embd renamed', rename('token_embd.weight', 'token_embd.weighs'));
  return out;
}

let server;
let browser;
let page;
let problems;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
  await page.evaluate(async (url) => {
    window.G = await import('/ggweb.js');
    window.BASE = new Uint8Array(await (await fetch(url)).arrayBuffer());
  }, URL_F16);
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Loads each case (built in the page from the good file) and returns how each failed. */
function loadAll(list, worker) {
  return page.evaluate(async ({ list, worker }) => {
    const out = [];
    for (const c of list) {
      const bytes = window.BASE.slice(0, c.cut ?? window.BASE.length);
      for (const [at, b] of c.patches) bytes.set(b, at);
      try {
        const m = await window.G.Model.load(bytes, { worker, relaxedSimd: false, nBatch: 8 });
        await m.dispose();
        out.push({ name: c.name, loaded: true });
      } catch (e) {
        out.push({ name: c.name, code: e.code, message: e.message, isGgweb: e instanceof window.G.GgwebError, ctor: e?.constructor?.name });
      }
    }
    return out;
  }, { list, worker });
}

const ALL = cases();

test(`${ALL.length} crafted files are each refused as the file's fault, then a good model runs`, { timeout: 600_000 }, async () => {
  // Enough cases to reach each field (counted so that a parser change that drops some shows).
  assert.ok(H.kvs.length >= 15 && H.tensors.length >= 20, `${H.kvs.length} kvs, ${H.tensors.length} tensors`);
  assert.ok(ALL.length > 300, `${ALL.length} cases`);
  const got = await loadAll(ALL, false);
  const bad = got.filter((r) => r.loaded || r.code !== 'format' || !r.isGgweb || /model too large|RuntimeError|unreachable|panicked/i.test(r.message));
  assert.deepEqual(bad, [], `${bad.length} of ${got.length} not refused as format errors:\n${bad.slice(0, 20).map((r) => JSON.stringify(r)).join('\n')}`);
  // The lies about sizes are named as what they are.
  const msg = (name) => got.find((r) => r.name === name).message;
  assert.match(msg('gpt2.block_count 4294967295 (file: 2)'), /block_count 4294967295/);
  assert.match(msg('gpt2.context_length 4294967295 (file: 128)'), /position_embd\.weight/);
  assert.match(msg('a block index of usize::MAX'), /blk\.1\.attn_output\.weight/);
  assert.match(msg('magic GGUX'), /magic/i);
  // The same in a worker, for a sample (one of each kind), then the page is still fine.
  const sample = ALL.filter((_, i) => i % 17 === 0);
  const inWorker = await loadAll(sample, true);
  const badW = inWorker.filter((r) => r.loaded || r.code !== 'format' || !r.isGgweb);
  assert.deepEqual(badW, [], JSON.stringify(badW.slice(0, 10)));

  // A good model afterwards, in the same page: HF's greedy tokens.
  const [hello] = HF.prompts;
  for (const worker of [false, true]) {
    const r = await page.evaluate(async ({ worker, text, n }) => {
      const m = await window.G.Model.load(window.BASE, { worker, relaxedSimd: false, nBatch: 8 });
      const ids = [];
      for await (const t of m.generate(text, { maxTokens: n, temperature: 0, seed: 1 })) ids.push(t.token);
      await m.dispose();
      return ids;
    }, { worker, text: hello.text, n: 8 });
    assert.deepEqual(r, hello.greedy_ids.slice(0, 8), `greedy after the hostile files (worker ${worker})`);
  }
  // (The favicon's 404 is the harness page's, not ours.)
  assert.deepEqual(problems.filter((p) => !/Failed to load resource/.test(p)), []);
});

test('options that cannot work are refused as invalid, and huge ones do not allocate', async () => {
  const r = await page.evaluate(async () => {
    const code = async (o) => {
      try { const m = await window.G.Model.load(window.BASE, { worker: false, relaxedSimd: false, ...o }); await m.dispose(); return 'ok'; } catch (e) { return [e.code, e.message]; }
    };
    return {
      nCtx: await code({ nCtx: 2 ** 31 }),
      nBatch0: await code({ nBatch: 0 }),
      // n_batch is capped at n_ctx (128): a huge one is fine and sizes nothing from its value.
      nBatchHuge: await code({ nBatch: 2 ** 31 - 1 }),
    };
  });
  assert.equal(r.nCtx[0], 'invalid', JSON.stringify(r.nCtx));
  assert.match(r.nCtx[1], /nCtx|n_ctx/);
  assert.equal(r.nBatch0[0], 'invalid', JSON.stringify(r.nBatch0));
  assert.equal(r.nBatchHuge, 'ok', JSON.stringify(r.nBatchHuge));
});
