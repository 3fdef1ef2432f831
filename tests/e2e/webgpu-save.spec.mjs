// save / saveLora / Model.load(base, { lora }) on WebGPU models in the browser (issue 39
// items 2-3), in headless Chromium on SwiftShader, in the worker: the weights and adapters are
// read back from the GPU a chunk at a time (map_async awaited), so
// - an untrained fixture saved from a WebGPU model is the CPU model's save byte for byte (F32
//   as it is held, F16 converted on the way out), to bytes and to OPFS;
// - a LoRA adapter trained on the CPU, loaded onto a WebGPU base (Model.load(base, { backend:
//   'webgpu', lora })), gives the CPU's tuned logits within 1e-3 (the WebGPU tolerance of
//   split.spec.mjs); the WebGPU model's saveLora is the CPU's adapter byte for byte, and its
//   merged save the CPU's merged save byte for byte;
// - a model trained on WebGPU saves files that give its in-memory tuned logits back, loaded by
//   the CPU within 1e-4: one WebGPU model trains a LoRA adapter (2 AdamW updates), `saveLora()`
//   applied with `Model.load(base, { lora })`; then, the adapter dropped, every weight
//   (2 AdamW updates), `save({ type: 'f32' })` loaded back. Short on purpose (one WebGPU model,
//   batch 1, seqLen 8, nothing read back on the GPU but the tuned logits): SwiftShader's first
//   graph on a new model costs ~15 s at load 12, and the page's bound is 2 minutes.
//   node --test tests/e2e/webgpu-save.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.train-ref.json`, 'utf8'));
const TOL = 1e-3;

const web = useHarness({ relaxedSimd: false, nThreads: 1 });

/** Runs `body` in the page and fails the test with the page's error when it threw. */
async function ok(body, arg) {
  const r = await web.inPage(true, body, arg);
  assert.ok(r.ok, `${r.code}: ${r.message}`);
  return r.value;
}

const PRELUDE = `
  const seqs = arg.sequences.map((s) => new Uint32Array(s));
  const base = '/tests/fixtures/tiny-f32.gguf';
  const gpu = { ...opts, backend: 'webgpu', nCtx: 64 };
  const cpu = { ...opts, backend: 'cpu', nCtx: 64 };
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const worst = (a, b) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));
  const train = async (m, o) => { for await (const s of m.train(seqs, o)) void s; };
  const opfsBytes = async (name) => new Uint8Array(await (await (await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-checkpoints')).getFileHandle(name)).getFile().then((f) => f.arrayBuffer()));
`;

test('a WebGPU model saves the CPU model\'s file byte for byte (F32, F16, to bytes and to OPFS)', async () => {
  const r = await ok(`${PRELUDE}
    const g = await Model.load(base, gpu);
    const c = await Model.load(base, cpu);
    const out = { backend: g.info().backend };
    for (const type of ['f32', 'f16']) {
      const a = await g.save({ type });
      const b = await c.save({ type });
      out[type] = { size: a.length, same: same(a, b) };
    }
    out.opfs = await g.save({ type: 'f16', to: 'opfs', name: 'gpu-f16' });
    out.opfsSame = same(await opfsBytes('gpu-f16'), await c.save({ type: 'f16' }));
    out.fixture = same(await g.save({ type: 'f32' }), new Uint8Array(await (await fetch(base)).arrayBuffer()));
    await g.dispose();
    await c.dispose();
    await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
    return out;
  `, { sequences: REF.sequences });
  assert.equal(r.backend, 'webgpu');
  assert.deepEqual(r.f32.same, true, 'F32');
  assert.deepEqual(r.f16.same, true, 'F16');
  assert.ok(r.f16.size < r.f32.size);
  assert.equal(r.fixture, true, 'the untrained F32 fixture saves as itself from WebGPU');
  assert.equal(r.opfs.bytes, r.f16.size);
  assert.equal(r.opfsSame, true, 'to: opfs');
});

test('LoRA on a WebGPU base: a CPU-trained adapter loads with the CPU\'s logits and saves back byte for byte', async () => {
  const r = await ok(`${PRELUDE}
    const lora = { seqLen: 16, batchSize: 2, steps: 3, seed: 3, optimizer: { type: 'adamw', lr: 2e-2 }, lora: { rank: 4, targets: ['attn_qkv', 'ffn_down'] } };
    const c = await Model.load(base, cpu);
    const before = Array.from(await c.logits(arg.held));
    await train(c, lora);
    const cpuTuned = Array.from(await c.logits(arg.held));
    const adapter = await c.saveLora();
    const merged = await c.save({ type: 'f32' });
    await c.dispose();

    const g = await Model.load(base, { ...gpu, lora: adapter });
    const out = { backend: g.info().backend, moved: worst(cpuTuned, before) };
    out.loaded = worst(Array.from(await g.logits(arg.held)), cpuTuned);
    out.adapterSame = same(await g.saveLora(), adapter);
    out.mergedSame = same(await g.save({ type: 'f32' }), merged);
    out.dropped = (await g.dropLora()) && worst(Array.from(await g.logits(arg.held)), before);
    await g.dispose();
    return out;
  `, { sequences: REF.sequences, held: REF.held });
  assert.equal(r.backend, 'webgpu');
  assert.ok(r.moved > 0.05, `LoRA training moved the CPU logits by ${r.moved}`);
  assert.ok(r.loaded <= TOL, `the adapter on the WebGPU base: ${r.loaded} from the CPU's tuned logits`);
  assert.equal(r.adapterSame, true, 'saveLora of the WebGPU model is the CPU adapter');
  assert.equal(r.mergedSame, true, 'the merged save of the WebGPU model is the CPU\'s');
  assert.ok(r.dropped !== false && r.dropped <= TOL, `dropLora on WebGPU: ${r.dropped} from the base logits`);
  console.log(`WebGPU: the CPU's adapter on the GPU base within ${r.loaded.toExponential(2)} of the CPU's logits`);
});

test('files of a model trained on WebGPU give its tuned logits back on the CPU (saveLora + Model.load(base, { lora }), save f32)', async () => {
  const t0 = Date.now();
  const r = await ok(`${PRELUDE}
    const short = seqs.map((s) => s.slice(0, 8));
    const run = async (m, o) => { const l = []; for await (const s of m.train(short, o)) l.push(s.loss); return l; };
    const logits = async (m) => Array.from(await m.logits(arg.held));
    const c = await Model.load(base, cpu);
    const before = await logits(c);
    await c.dispose();

    const g = await Model.load(base, gpu);
    const out = { backend: g.info().backend };
    // A LoRA adapter trained on WebGPU, saved, applied to the base file on the CPU.
    out.loraLosses = await run(g, { seqLen: 8, batchSize: 1, steps: 2, seed: 3, optimizer: { type: 'adamw', lr: 2e-2 }, lora: { rank: 4, targets: ['attn_qkv', 'ffn_down'] } });
    const loraTuned = await logits(g);
    const adapter = await g.saveLora();
    out.dropped = await g.dropLora();
    // Then every weight (the base's, never written by LoRA) trained on WebGPU, saved as F32.
    out.fullLosses = await run(g, { seqLen: 8, batchSize: 1, steps: 2, optimizer: { type: 'adamw', lr: 1e-2 } });
    const tuned = await logits(g);
    const file = await g.save({ type: 'f32' });
    await g.dispose();

    const ca = await Model.load(base, { ...cpu, lora: adapter });
    out.lora = { moved: worst(loraTuned, before), loaded: worst(await logits(ca), loraTuned) };
    await ca.dispose();
    const cf = await Model.load(file, cpu);
    out.full = { moved: worst(tuned, before), loaded: worst(await logits(cf), tuned) };
    await cf.dispose();
    return out;
  `, { sequences: REF.sequences, held: REF.held });
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  assert.equal(r.backend, 'webgpu');
  assert.equal(r.dropped, true);
  assert.equal(r.loraLosses.length, 2);
  assert.equal(r.fullLosses.length, 2);
  // B starts at 0 and dropLora restores the base: both runs' first loss is the base model's.
  assert.ok(Math.abs(r.loraLosses[0] - r.fullLosses[0]) <= 1e-6 * r.fullLosses[0], `first losses ${r.loraLosses} ${r.fullLosses}`);
  assert.ok(r.lora.moved > 0.05, `LoRA training on WebGPU moved the logits by ${r.lora.moved}`);
  assert.ok(r.full.moved > 0.05, `full training on WebGPU moved the logits by ${r.full.moved}`);
  assert.ok(r.lora.loaded <= 1e-4, `the WebGPU-trained adapter on the base (CPU): ${r.lora.loaded} from the tuned logits`);
  assert.ok(r.full.loaded <= 1e-4, `the WebGPU-trained F32 file (CPU): ${r.full.loaded} from the tuned logits`);
  console.log(`WebGPU-trained (${secs} s): adapter on the base ${r.lora.loaded.toExponential(2)} from the tuned logits (training moved them ${r.lora.moved.toFixed(3)}); F32 file ${r.full.loaded.toExponential(2)} (moved ${r.full.moved.toFixed(3)})`);
});
