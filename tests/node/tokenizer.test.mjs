// The `ggweb/tokenizer` entry (web/tokenizer.js, web/pkg-tokenizer/) in Node: GPT-2's
// tokenizer without a model. Checked over a varied corpus (tests/fixtures/tokenizer_ref.json:
// 633 texts, unicode, emoji, CJK, whitespace runs, <|endoftext|>): the same ids as Hugging
// Face's tokenizer, as a loaded model's `tokenize` and as npm gpt-3-encoder (which differs
// from Hugging Face on a few texts, named below: there we follow Hugging Face); offsets that
// tile the text; `Tokenizer.load` of a model file's header from a path, bytes and a Blob;
// typed errors. Also the size of what the entry loads (wasm + JS before compression).
//   node --test tests/node/tokenizer.test.mjs     (after scripts/build-wasm.sh)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { MODELS_DIR, ROOT } from '../e2e/helpers.mjs';
import { Model } from '../../web/ggweb.js';
import { GgwebError, Tokenizer } from '../../web/tokenizer.js';

const gpt3 = createRequire(import.meta.url)('gpt-3-encoder');
assert.ok(MODELS_DIR, 'the shared tiny GPT-2 (tiny-gpt2-f32.gguf) is needed: set GGWEB_MODELS_DIR');
const MODEL = `${MODELS_DIR}/tiny-gpt2-f32.gguf`;
const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tokenizer_ref.json`, 'utf8'));
const EOT = 50256;
const list = (a) => Array.from(a);
const short = (s) => JSON.stringify(s.length > 50 ? `${s.slice(0, 50)}…` : s);

/** `fn`'s rejection or throw as { code, message, isGgweb }. */
async function failure(fn) {
  try {
    await fn();
  } catch (e) {
    return { code: e.code, message: e.message, isGgweb: e instanceof GgwebError };
  }
  assert.fail('expected a failure');
}

/**
 * The tiling property of `offsets` for `text`: token i starts where the last span ended,
 * unless a character is split across tokens (the spans then overlap on that character
 * only); each run of tokens over one stretch decodes to exactly that stretch; the spans end
 * at text.length. Returns how many characters were split.
 */
function checkTiling(tok, text, ids, offsets) {
  assert.equal(offsets.length, ids.length * 2);
  let end = 0;
  let split = 0;
  for (let i = 0; i < ids.length;) {
    const s = offsets[2 * i];
    let e = offsets[2 * i + 1];
    assert.equal(s, end, `${short(text)}: token ${i} starts at ${s}, the last span ended at ${end}`);
    assert.ok(e > s, `${short(text)}: token ${i} is empty`);
    let j = i + 1;
    while (j < ids.length && offsets[2 * j] < e) e = Math.max(e, offsets[2 * j++ + 1]);
    if (j - i > 1) split++;
    assert.equal(tok.decode(ids.subarray(i, j)), text.slice(s, e), `${short(text)}: tokens ${i}..${j}`);
    end = e;
    i = j;
  }
  assert.equal(end, text.length, short(text));
  return split;
}

test('Tokenizer.gpt2(): Hugging Face\'s ids on the reference corpus, gpt-3-encoder\'s where it agrees with them', async () => {
  const tok = await Tokenizer.gpt2();
  assert.equal(tok.nVocab, 50257);
  assert.equal(tok.eos, EOT);
  assert.ok(REF.cases.length >= 600);
  const gpt3Off = [];
  for (const c of REF.cases) {
    const ids = tok.encode(c.text);
    assert.ok(ids instanceof Uint32Array);
    assert.deepEqual(list(ids), c.ids, short(c.text));
    assert.deepEqual(list(tok.encode(c.text, { special: true })), c.special_ids ?? c.ids, `${short(c.text)} (special)`);
    assert.equal(tok.count(c.text), c.ids.length);
    assert.equal(tok.decode(ids), c.text);
    if (gpt3.encode(c.text).join() !== c.ids.join()) gpt3Off.push(c.text);
  }
  // gpt-3-encoder's regex and byte handling differ from GPT-2's on these (a vertical tab, a
  // "\n\n" before "'d", U+3000-like spaces, astral CJK); everywhere else it gives our ids.
  assert.ok(gpt3Off.length <= 4, `gpt-3-encoder differs from Hugging Face on ${gpt3Off.length} texts: ${gpt3Off.map(short).join(', ')}`);
  // Extra texts: ours equals gpt-3-encoder's on each.
  for (const text of ['Hello world', ' leading and trailing  ', '你好，世界 こんにちは 안녕하세요', '👍🏽 👨‍👩‍👧 🤗🤗', 'naïve café Ω ≈ ∑', "it's I'm we'll", 'tabs\tand\nnewlines\r\n', '1234567890 3.14159']) {
    assert.deepEqual(list(tok.encode(text)), gpt3.encode(text), short(text));
  }
  // <|endoftext|> is text unless `special`.
  assert.deepEqual(list(tok.encode('a<|endoftext|>b', { special: true })), [64, EOT, 65]);
  assert.deepEqual(list(tok.encode('a<|endoftext|>b')), [64, 27, 91, 437, 1659, 5239, 91, 29, 65]);
  assert.equal(tok.count('a<|endoftext|>b'), 9);
  assert.equal(tok.decode([64, EOT, 65]), 'a<|endoftext|>b');
});

test('the same ids as a loaded model\'s tokenize, and Tokenizer.load reads the model file\'s tokenizer from a path, bytes or a Blob', async () => {
  const bytes = readFileSync(MODEL);
  const { openAsBlob } = await import('node:fs');
  const toks = {
    path: await Tokenizer.load(MODEL),
    bytes: await Tokenizer.load(new Uint8Array(bytes)),
    blob: await Tokenizer.load(await openAsBlob(MODEL)),
  };
  const model = await Model.load(MODEL, { worker: false });
  try {
    const texts = REF.cases.map((c) => c.text);
    for (const special of [false, true]) {
      const want = [];
      for (const t of texts) want.push(list(await model.tokenize(t, { special })));
      for (const [k, tok] of Object.entries(toks)) {
        assert.deepEqual(texts.map((t) => list(tok.encode(t, { special }))), want, `${k}, special ${special}`);
      }
    }
    assert.equal(toks.path.decode([15496, 11, 616, 1438, 318]), await model.detokenize([15496, 11, 616, 1438, 318]));
  } finally {
    await model.dispose();
  }
});

test('offsets: [start, end) in UTF-16 units, tiling the text; a split character is shared by its tokens', async () => {
  const tok = await Tokenizer.gpt2();
  let split = 0;
  for (const c of REF.cases) {
    for (const special of [false, true]) {
      const r = tok.encode(c.text, { special, offsets: true });
      assert.ok(r.ids instanceof Uint32Array && r.offsets instanceof Uint32Array);
      assert.deepEqual(list(r.ids), list(tok.encode(c.text, { special })));
      split += checkTiling(tok, c.text, r.ids, r.offsets);
    }
  }
  assert.ok(split >= 10, `${split} split characters in the corpus`);
  // A word's leading space is in its span.
  assert.deepEqual(tok.encode('Hello world', { offsets: true }), { ids: new Uint32Array([15496, 995]), offsets: new Uint32Array([0, 5, 5, 11]) });
  // 🤗 (2 UTF-16 units, 4 bytes) in 3 tokens: " \xf0\x9f", "\xa4", "\x97" each span " 🤗" or "🤗".
  const hug = tok.encode('a 🤗!', { offsets: true });
  assert.deepEqual(list(hug.ids), gpt3.encode('a 🤗!'));
  assert.deepEqual(list(hug.offsets), [0, 1, 1, 4, 2, 4, 2, 4, 4, 5]);
  // A special token's span is its text; é (1 unit, 2 bytes) after CJK.
  const sp = tok.encode('x<|endoftext|>日本é', { special: true, offsets: true });
  assert.equal(sp.ids[1], EOT);
  assert.deepEqual(list(sp.offsets.subarray(0, 4)), [0, 1, 1, 14]);
  checkTiling(tok, 'x<|endoftext|>日本é', sp.ids, sp.offsets);
  assert.deepEqual(tok.encode('', { offsets: true }), { ids: new Uint32Array(0), offsets: new Uint32Array(0) });
});

test('typed errors: no GPT-2 tokenizer is format, bad arguments invalid, a disposed tokenizer disposed', async () => {
  // A GGUF file with no tokenizer: its header is valid, tokenizer.ggml.model is missing.
  const noTok = new Uint8Array([...new TextEncoder().encode('GGUF'), 3, 0, 0, 0, ...new Uint8Array(16), ...new Uint8Array(8)].slice(0, 32));
  let r = await failure(() => Tokenizer.load(noTok));
  assert.equal(r.code, 'format', r.message);
  assert.ok(r.isGgweb);
  assert.match(r.message, /^Tokenizer\.load: .*tokenizer\.ggml\.model/);
  r = await failure(() => Tokenizer.load(new TextEncoder().encode('not a GGUF file at all')));
  assert.equal(r.code, 'format');
  assert.match(r.message, /not a GGUF file/);
  // The first bytes of a model only: the header is incomplete.
  r = await failure(() => Tokenizer.load(readFileSync(MODEL).subarray(0, 100_000)));
  assert.equal(r.code, 'format', r.message);
  r = await failure(() => Tokenizer.load(`${ROOT}tests/fixtures/no-such-file.gguf`));
  assert.equal(r.code, 'invalid', r.message);
  for (const bad of [42, null, {}]) assert.equal((await failure(() => Tokenizer.load(bad))).code, 'invalid');
  assert.equal((await failure(() => Tokenizer.load(MODEL, { nCtx: 4 }))).code, 'invalid');
  const ac = new AbortController();
  ac.abort();
  assert.equal((await failure(() => Tokenizer.load(MODEL, { signal: ac.signal }))).code, 'aborted');
  assert.equal((await failure(() => new Tokenizer())).code, 'invalid');

  const tok = await Tokenizer.gpt2();
  r = await failure(() => tok.decode([15496, 50257]));
  assert.equal(r.code, 'invalid');
  assert.match(r.message, /token id 50257 at position 1 is out of range \(vocabulary of 50257\)/);
  assert.equal((await failure(() => tok.decode([1.5]))).code, 'invalid');
  assert.equal((await failure(() => tok.encode(7))).code, 'invalid');
  assert.equal((await failure(() => tok.encode('x', { offset: true }))).code, 'invalid');
  assert.equal((await failure(() => tok.encode('x', { special: 'yes' }))).code, 'invalid');
  assert.equal((await failure(() => tok.count(null))).code, 'invalid');
  // Still usable after each of those.
  assert.deepEqual(list(tok.encode('Hello')), [15496]);
  tok.dispose();
  assert.equal((await failure(() => tok.count('x'))).code, 'disposed');
});

test('the entry is small: its wasm and JS are at most 400 KB before compression', () => {
  // What `import { Tokenizer } from 'ggweb/tokenizer'` loads (its static imports), and the wasm.
  const files = ['tokenizer.js', 'errors.js', 'hub.js', 'input.js', 'node-fs.js', 'source.js', 'cache.js', 'opfs.js',
    'pkg-tokenizer/ggweb_tokenizer.js', 'pkg-tokenizer/ggweb_tokenizer_bg.wasm'];
  const sizes = Object.fromEntries(files.map((f) => [f, statSync(`${ROOT}web/${f}`).size]));
  const total = Object.values(sizes).reduce((a, b) => a + b, 0);
  console.log(`ggweb/tokenizer: ${total} bytes of wasm and JS (${JSON.stringify(sizes)}); vocabulary ${statSync(`${ROOT}web/pkg-tokenizer/gpt2-vocab.gguf`).size} bytes`);
  assert.ok(total <= 400_000, `${total} bytes`);
  // Its imports are exactly those files: nothing of the model's engine, worker or builds.
  const seen = new Set();
  const walk = (f) => {
    if (seen.has(f)) return;
    seen.add(f);
    const src = readFileSync(`${ROOT}web/${f}`, 'utf8');
    for (const m of src.matchAll(/^import [^;]*? from '\.\/([^']+)';$/gms)) walk(f.includes('/') ? `${f.split('/')[0]}/${m[1]}` : m[1]);
  };
  walk('tokenizer.js');
  assert.deepEqual([...seen].sort(), files.filter((f) => !f.endsWith('.wasm')).sort());
});
