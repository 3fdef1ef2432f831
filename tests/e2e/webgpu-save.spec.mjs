// save / saveLora / Model.load(base, { lora }) on WebGPU models in the browser (issue 39
// items 2-3), in headless Chromium on SwiftShader, in the worker: the weights and adapters are
// read back from the GPU a chunk at a time (map_async awaited), so
// - an untrained fixture saved from a WebGPU model is the CPU model's save byte for byte (F32
//   as it is held, F16 converted on the way out), to bytes and to OPFS;
// - a LoRA adapter trained on the CPU, loaded onto a WebGPU base (Model.load(base, { backend:
//   'webgpu', lora })), gives the CPU's tuned logits within 1e-3 (the WebGPU tolerance of
//   split.spec.mjs); the WebGPU model's saveLora is the CPU's adapter byte for byte, and its
//   merged save the CPU's merged save byte for byte;
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
