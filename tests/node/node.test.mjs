// ggweb in Node.js (20+), as an app's unit tests or a server would use it: the packed package
// (npm pack of this repository) installed into an empty project, `import { Model } from 'ggweb'`,
// then Model.load from a file path, a file: URL, a Uint8Array and an ArrayBuffer. The wasm is
// read from the installed package with fs (fetch cannot read file: URLs); one thread. Checked:
// Hugging Face's greedy tokens and logits within 1e-4 (as in the browser), and a typed error
// for a missing file.
//
//   node --test tests/node/node.test.mjs     (after scripts/build-wasm.sh; GGWEB_TARBALL=<npm pack output> to skip packing)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, HF, MODELS_DIR, ROOT } from '../e2e/helpers.mjs';
import { installPacked, packedTarball } from '../bundlers/packed.mjs';

assert.ok(MODELS_DIR, 'the shared tiny GPT-2 (tiny-gpt2-f32.gguf) is needed: set GGWEB_MODELS_DIR');

// Runs in the project that installed the package, so 'ggweb' resolves through its "exports".
const PROBE = `
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Model, GgwebError } from 'ggweb';

const [model, rowsFile, promptsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson);
const rows = new Float32Array(new Uint8Array(readFileSync(rowsFile)).buffer);
const n = 50257;
const bytes = readFileSync(model);
const sources = {
  path: [model, { worker: false }],
  fileUrl: [pathToFileURL(model), { worker: false }],
  uint8array: [new Uint8Array(bytes), { worker: false }],
  arrayBuffer: [bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength), {}],
};
const out = {};
for (const [k, [src, opts]] of Object.entries(sources)) {
  const m = await Model.load(src, opts);
  const r = { info: m.info(), inWorker: m.inWorker, greedy: [], maxDiff: [] };
  for (const p of prompts) {
    const ids = [];
    for await (const t of m.generate(p.text, { maxTokens: p.greedy_ids.length, temperature: 0 })) ids.push(t.token);
    r.greedy.push(ids);
    const l = await m.logits(p.ids);
    const ref = rows.subarray(p.row.index * n, (p.row.index + 1) * n);
    let d = l.length === n ? 0 : Infinity;
    for (let i = 0; i < n; i++) d = Math.max(d, Math.abs(l[i] - ref[i]));
    r.maxDiff.push(d);
  }
  await m.dispose();
  out[k] = r;
}
try {
  await Model.load(model + '.missing');
  out.missing = 'loaded';
} catch (e) {
  out.missing = { isGgweb: e instanceof GgwebError, code: e.code, message: e.message };
}
console.log(JSON.stringify(out));
`;

test('Node.js: the packed package loads a model from a path, a file: URL and bytes; HF greedy tokens, logits within 1e-4', () => {
  const proj = join(ARTIFACTS, 'node-proj');
  rmSync(proj, { recursive: true, force: true });
  mkdirSync(proj, { recursive: true });
  writeFileSync(join(proj, 'package.json'), '{"type":"module","private":true}');
  writeFileSync(join(proj, 'probe.mjs'), PROBE);
  installPacked(proj, packedTarball());
  const model = join(MODELS_DIR, 'tiny-gpt2-f32.gguf');
  const rows = join(ROOT, 'tests', 'fixtures', 'tiny-gpt2.hf-rows.bin');
  const stdout = execFileSync(process.execPath, ['probe.mjs', model, rows, JSON.stringify(HF.prompts)], { cwd: proj, encoding: 'utf8', timeout: 180000 }); // a hang (e.g. a handle keeping Node alive) fails
  const out = JSON.parse(stdout.trim().split('\n').pop());
  for (const k of ['path', 'fileUrl', 'uint8array', 'arrayBuffer']) {
    const r = out[k];
    assert.equal(r.inWorker, false, `${k}: Node has no Web Worker: the model runs on the calling thread`);
    assert.equal(r.info.arch, 'gpt2');
    assert.equal(r.info.load.bytes, statSync(model).size, `${k}: the whole file was read`);
    HF.prompts.forEach((p, i) => {
      assert.deepEqual(r.greedy[i], p.greedy_ids, `${k}, ${p.key}: HF's greedy ids`);
      // 1e-4: F32 weights, f32 arithmetic in another summation order than PyTorch's (the browser's bound too).
      assert.ok(r.maxDiff[i] <= 1e-4, `${k}, ${p.key}: max |logit - HF| ${r.maxDiff[i]}`);
    });
    assert.equal(r.info.threads.n, 1);
    assert.ok(['pkg', 'pkg-relaxed'].includes(r.info.threads.build), `${k}: build ${r.info.threads.build}`);
    assert.match(r.info.threads.reason, /Node\.js/);
    console.log(`node ${process.version}, ${k}: via ${r.info.load.via}, ${r.info.load.bytes} bytes, build ${r.info.threads.build}, ` +
      `greedy = HF for ${HF.prompts.length} prompts, max |logit - HF| ${Math.max(...r.maxDiff).toExponential(2)}`);
  }
  assert.deepEqual([out.missing.isGgweb, out.missing.code], [true, 'invalid'], JSON.stringify(out.missing));
  assert.match(out.missing.message, /tiny-gpt2-f32\.gguf\.missing/);
});
