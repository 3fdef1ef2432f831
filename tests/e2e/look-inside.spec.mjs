// TransformerLens's workflow through the JS API in headless Chromium (web/pkg, CPU), against
// TransformerLens 3.x and SAELens 6.x themselves (tests/fixtures/tiny-f32.tl-ref.json + .bin,
// tests/fixtures/tiny-sae/, made by tests/fixtures/make_tl_ref.py): `run` with every hook
// case (zero/scale/add/set, head/pos/index selections, typed-array values), `patch`'s four
// sweeps, `logitLens`, `attribute`, `loadSae` + `encode`, a steered `generate` with `hooks`;
// bad hooks and SAE files are typed errors and the model stays usable. In a worker and on
// the page thread, and on WebGPU (SwiftShader).
//   node --test tests/e2e/look-inside.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.tl-ref.json`, 'utf8'));
const BIN = readFileSync(`${ROOT}tests/fixtures/${REF.bin}`);
const BLOCKS = new Float32Array(BIN.buffer, BIN.byteOffset, BIN.byteLength / 4);
const block = (name) => {
  const { offset, shape } = REF.blocks[name];
  return { shape, data: BLOCKS.subarray(offset, offset + shape.reduce((a, b) => a * b, 1)) };
};
// The bound for hooked logits, patching cells, lens logprobs, attribution and SAE values.
const TOL = 1e-4;

const web = useHarness();

// On WebGPU (SwiftShader, ~0.3 s a pass on CI's cores) the sweeps' ~180 passes were 60% of
// an 80 s test: there it runs the two sweeps whose cells take the two hook paths, a position
// ('attn_out': Set at pos 0 of a pass started at the residual) and a head ('z'), and the first
// steered generation; 'resid_pre' (no hook) and 'mlp_out' (attn_out's path at another point)
// run on the CPU here and, with the kernels they share, in tests/webgpu/tl_hooks_webgpu.rs on
// lavapipe.
const ALL_ATS = ['resid_pre', 'attn_out', 'mlp_out', 'z'];
const webgpuOnly = (backend) => (backend === 'webgpu' ? { ats: ['attn_out', 'z'], steer: REF.steer.slice(0, 1) } : { ats: ALL_ATS, steer: REF.steer });

/** Everything, in one page call per transport. */
async function lookInside(worker, backend) {
  const { ats, steer } = webgpuOnly(backend);
  return web.page.evaluate(async ({ REF, worker, backend, ats, steer }) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker, backend, relaxedSimd: false, nThreads: 1 });
    if (m.info().backend !== (backend === 'webgpu' ? 'webgpu' : 'cpu')) throw new Error(`on ${m.info().backend}`);
    const cols = REF.logit_ids;
    const nVocab = m.info().hparams.nVocab;
    const pick = (logits) => {
      const out = [];
      for (let p = 0; p < logits.length / nVocab; p++) for (const c of cols) out.push(logits[p * nVocab + c]);
      return out;
    };
    const hooked = [];
    for (const c of REF.hooks) {
      // Array values cross as Float32Arrays, as a capture's data would.
      const hooks = c.hooks.map((h) => (Array.isArray(h.value) ? { ...h, value: new Float32Array(h.value) } : h));
      const r = await m.run(REF.prompt, { hooks });
      hooked.push(pick(r.logits));
    }
    const captured = await m.run(REF.prompt, { capture: ['blocks.*.hook_resid_post'] });
    const cache = Object.fromEntries(Object.entries(captured.cache).map(([k, v]) => [k, { shape: v.shape, data: Array.from(v.data) }]));
    const patch = {};
    for (const at of ats) {
      const r = await m.patch(REF.clean, REF.corrupted, { at, answer: REF.answer, against: REF.against });
      patch[at] = { shape: r.shape, cells: Array.from(r.cells), cleanDiff: r.cleanDiff, corruptedDiff: r.corruptedDiff };
    }
    const lens = await m.logitLens(REF.prompt, { topK: REF.lens.top_k });
    const a = await m.attribute(REF.clean, { answer: REF.answer, against: REF.against });
    const sae = await m.loadSae('/tests/fixtures/tiny-sae/');
    const enc = await sae.encode(REF.prompt, { topK: REF.sae.top_k });
    const row = await sae.decoderRow(3);
    const steered = [];
    for (const s of steer) {
      const toks = [];
      for await (const t of m.generate(s.prompt, { hooks: s.hooks, maxTokens: s.tokens.length, temperature: 0, ignoreEos: true })) toks.push(t.token);
      steered.push(toks);
    }
    const errors = [];
    for (const hooks of [[{ at: 'blocks.9.hook_resid_pre', op: 'zero' }], [{ at: 'blocks.0.attn.hook_z', op: 'zero', head: 4 }],
      [{ at: 'hook_embed', op: 'add', value: [1, 2] }], [{ at: 'hook_embed', op: 'zero', heads: 0 }], 'nope']) {
      try {
        await m.run(REF.prompt, { hooks });
        errors.push('ran');
      } catch (e) {
        errors.push({ code: e.code, message: e.message });
      }
    }
    try {
      for await (const t of m.generate(REF.prompt, { hooks: [{ at: 'hook_embed', op: 'zero', pos: 0 }] })) errors.push(t);
    } catch (e) {
      errors.push({ code: e.code, message: e.message });
    }
    try {
      await m.loadSae({ cfg: { d_in: 32, d_sae: 64, metadata: { hook_name: 'hook_embed' } }, weights: new Uint8Array(4) });
    } catch (e) {
      errors.push({ code: e.code, message: e.message });
    }
    // A well-formed SAE for another hook width: refused when loaded.
    try {
      const cfg = await (await fetch('/tests/fixtures/tiny-sae/cfg.json')).json();
      const weights = new Uint8Array(await (await fetch('/tests/fixtures/tiny-sae/sae_weights.safetensors')).arrayBuffer());
      await m.loadSae({ cfg: { ...cfg, metadata: { ...cfg.metadata, hook_name: 'blocks.1.mlp.hook_post' } }, weights });
      errors.push('loaded');
    } catch (e) {
      errors.push({ code: e.code, message: e.message });
    }
    await sae.dispose();
    try {
      await sae.encode(REF.prompt);
    } catch (e) {
      errors.push({ code: e.code, message: e.message });
    }
    const after = await m.score(REF.prompt);
    await m.dispose();
    return {
      hooked, cache, patch, steered, errors, scored: after.logprobs.length,
      lens: { layers: lens.layers, top: lens.top, logprobs: lens.logprobs.map((l) => Array.from(l)) },
      attribution: { ...a, heads: Array.from(a.heads), attnBias: Array.from(a.attnBias), mlps: Array.from(a.mlps) },
      sae: { top: enc.top, l0: Array.from(enc.l0), mse: Array.from(enc.mse), row: row.length, dIn: sae.dIn, hookName: sae.hookName },
    };
  }, { REF, worker, backend, ats, steer });
}

const close = (got, want, what) => {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) <= TOL, `${what}[${i}]: ${got[i]} vs ${want[i]}`);
};

for (const [worker, backend] of [[true, 'cpu'], [false, 'cpu'], [true, 'webgpu']]) {
  test(`run, patch, logitLens, attribute, loadSae and a steered generate equal TransformerLens (${backend}, ${worker ? 'worker' : 'page thread'})`, async () => {
    const r = await lookInside(worker, backend);
    REF.hooks.forEach((_, i) => close(r.hooked[i], block(`hooks/${i}/logits`).data, `hooks/${i}`));
    assert.deepEqual(Object.keys(r.cache), ['blocks.0.hook_resid_post', 'blocks.1.hook_resid_post', 'blocks.2.hook_resid_post']);
    for (const [k, v] of Object.entries(r.cache)) {
      const want = block(`capture/${k}`);
      assert.deepEqual(v.shape, want.shape);
      close(v.data, want.data, k);
    }
    const { ats, steer } = webgpuOnly(backend);
    assert.deepEqual(Object.keys(r.patch), ats);
    for (const at of ats) {
      const want = block(`patch/${at}`);
      assert.deepEqual(r.patch[at].shape, want.shape, at);
      close(r.patch[at].cells, want.data, `patch ${at}`);
      assert.ok(Math.abs(r.patch[at].cleanDiff - REF.patch.clean_diff) <= TOL);
    }
    assert.equal(r.lens.layers, 4);
    const lp = block('lens/logprobs').data;
    r.lens.logprobs.forEach((l, layer) => close(l, lp.subarray(layer * 9, layer * 9 + 9), `lens layer ${layer}`));
    r.lens.top.forEach((layer, l) => layer.forEach((pos, p) => assert.deepEqual(pos.map((t) => t.token), REF.lens.top_ids[l][p], `lens ${l}/${p}`)));
    const A = REF.attribution;
    close([r.attribution.embed, r.attribution.posEmbed, r.attribution.lnBias, r.attribution.total], [A.embed, A.posEmbed, A.lnBias, A.logit_diff], 'attribution');
    close(r.attribution.heads, block('attribution/heads').data, 'heads');
    close(r.attribution.attnBias, block('attribution/attn_bias').data, 'attnBias');
    close(r.attribution.mlps, block('attribution/mlps').data, 'mlps');
    assert.deepEqual([r.sae.dIn, r.sae.hookName, r.sae.row], [32, 'blocks.1.hook_resid_pre', 32]);
    r.sae.top.forEach((pos, p) => assert.deepEqual(pos.map((t) => t.index), REF.sae.top_ids[p], `sae top ${p}`));
    close(r.sae.top.flatMap((pos) => pos.map((t) => t.value)), block('sae/top_values').data, 'sae values');
    assert.deepEqual(r.sae.l0, Array.from(block('sae/l0').data));
    close(r.sae.mse, block('sae/mse').data, 'sae mse');
    assert.equal(r.steered.length, steer.length);
    steer.forEach((s, i) => assert.deepEqual(r.steered[i], s.tokens, `steered generation ${i}`));
    const [noPoint, head, len, typo, notArray, genPos, badSae, otherWidth, disposed] = r.errors;
    assert.deepEqual([noPoint.code, head.code, len.code, typo.code, notArray.code, genPos.code], Array(6).fill('invalid'), JSON.stringify(r.errors));
    assert.match(noPoint.message, /no hook point named 'blocks\.9\.hook_resid_pre'/);
    assert.match(head.message, /head 4 is out of range \(0\.\.4\)/);
    assert.match(len.message, /an 'add' value has 2 numbers, the slice at one position has 32/);
    assert.match(typo.message, /unknown option "heads"/);
    assert.match(notArray.message, /hooks must be an array/);
    assert.match(genPos.message, /'pos' is not allowed here/);
    assert.equal(badSae.code, 'format', badSae.message);
    assert.match(badSae.message, /safetensors/);
    assert.equal(otherWidth.code, 'invalid', JSON.stringify(otherWidth));
    assert.match(otherWidth.message, /d_in is 32 but 'blocks\.1\.mlp\.hook_post' has 128 values per position/);
    assert.equal(disposed.code, 'disposed');
    assert.equal(r.scored, REF.prompt.length - 1, 'the model is usable afterwards');
  });
}
