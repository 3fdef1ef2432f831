// One forward + backward against one forward in headless Chromium (issue 37's speed point):
// `model.run(ids)` and `model.run(ids, { grad })` (a logit difference, wrt hook_embed) on the
// CPU, one thread, the plain SIMD128 build (web/pkg: bash scripts/build-wasm.sh), alternately.
// Timed by the CPU time (user + system, /proc) of this Chromium's processes around each call,
// which a loaded machine inflates far less than the wall time (also printed). Linux only.
//
//   node scripts/grad-bench-browser.mjs [MODEL=/dot-models/124m-q8_0.gguf] [N=64] [REPS=5] [PATCH_N=0]
//
// PATCH_N > 0 also times `model.patch` over a prompt of PATCH_N tokens at `resid_pre` and `z`:
// the exact sweep once, attribution REPS times (the median), as grad_bench does natively.
import { readdirSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { serve, CHROMIUM, CHROMIUM_ARGS } from '../tests/e2e/helpers.mjs';

const [model = '/dot-models/124m-q8_0.gguf', n = '64', reps = '5', patchN = '0'] = process.argv.slice(2);
const MARK = `GGWEB_GRAD_BENCH=${process.pid}`;
const TICK = 100; // USER_HZ

/** CPU ms of this bench's Chromium: the process started with MARK in its environment (the
 * zygote and renderers start with a clean one) and every process descended from it. */
function chromiumCpuMs() {
  const procs = new Map();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'latin1').split(') ')[1].split(' ');
      procs.set(pid, { ppid: f[1], ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone
    }
  }
  const ours = new Set();
  for (const pid of procs.keys()) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(MARK)) ours.add(pid);
    } catch {
      // not ours to read
    }
  }
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, p] of procs) {
      if (!ours.has(pid) && ours.has(p.ppid)) {
        ours.add(pid);
        grew = true;
      }
    }
  }
  let ticks = 0;
  for (const pid of ours) ticks += procs.get(pid).ticks;
  return (ticks * 1000) / TICK;
}

const server = await serve();
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: CHROMIUM_ARGS,
  env: { ...process.env, GGWEB_GRAD_BENCH: String(process.pid) },
});
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}e2e/harness.html`);
  await page.evaluate(
    async ({ model, n }) => {
      const { Model } = await import('/ggweb.js');
      window.m = await Model.load(model, { worker: true, relaxedSimd: false, nThreads: 1 });
      window.ids = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % 50257);
      window.grad = { of: { logitDiff: { answer: 262, against: 13, pos: -1 } }, wrt: ['hook_embed'] };
      await window.m.run(window.ids);
      await window.m.run(window.ids, { grad: window.grad });
    },
    { model, n: Number(n) },
  );
  const time = async (withGrad) => {
    const [c0, w0] = [chromiumCpuMs(), performance.now()];
    await page.evaluate(async (g) => {
      await (g ? window.m.run(window.ids, { grad: window.grad }) : window.m.run(window.ids));
      return 0;
    }, withGrad);
    return [chromiumCpuMs() - c0, performance.now() - w0];
  };
  const fwd = [], bwd = [];
  for (let i = 0; i < Number(reps); i++) {
    fwd.push(await time(false));
    bwd.push(await time(true));
  }
  const med = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  const span = (v) => `${Math.min(...v).toFixed(0)}–${Math.max(...v).toFixed(0)}`;
  const cpu = (v) => v.map((x) => x[0]);
  const wall = (v) => v.map((x) => x[1]);
  const ratios = fwd.map((f, i) => bwd[i][0] / f[0]);
  console.log(`${model}, ${n} tokens, 1 thread, ${reps} pairs (CPU ms of Chromium's processes; wall ms)`);
  console.log(`  forward  ${med(cpu(fwd)).toFixed(0)} (${span(cpu(fwd))}); wall ${med(wall(fwd)).toFixed(0)} (${span(wall(fwd))})`);
  console.log(`  fwd+bwd  ${med(cpu(bwd)).toFixed(0)} (${span(cpu(bwd))}); wall ${med(wall(bwd)).toFixed(0)} (${span(wall(bwd))})`);
  console.log(`  fwd+bwd / forward per pair (CPU): median ${med(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`);
  if (Number(patchN) > 0) {
    // grad_bench's prompts: clean, and corrupted in its middle token.
    await page.evaluate((p) => {
      window.clean = Array.from({ length: p }, (_, i) => (i * 104729 + 5) % 50257);
      window.corrupted = window.clean.slice();
      window.corrupted[p >> 1] = (window.corrupted[p >> 1] + 1) % 50257;
    }, Number(patchN));
    const patch = async (at, method) => {
      const [c0, w0] = [chromiumCpuMs(), performance.now()];
      await page.evaluate(async ({ at, method }) => {
        await window.m.patch(window.clean, window.corrupted, { at, answer: 262, against: 13, method });
        return 0;
      }, { at, method });
      return [chromiumCpuMs() - c0, performance.now() - w0];
    };
    console.log(`patch sweeps, ${patchN} tokens (exact: one run; attribution: the median of ${reps})`);
    for (const at of ['resid_pre', 'z']) {
      await patch(at, 'attribution'); // warm-up: its gradient run's first plan
      const exact = await patch(at, 'exact');
      const atp = [];
      for (let i = 0; i < Number(reps); i++) atp.push(await patch(at, 'attribution'));
      const a = med(cpu(atp));
      console.log(
        `  ${at.padEnd(10)} exact ${exact[0].toFixed(0)} CPU ms (wall ${exact[1].toFixed(0)}), attribution ${a.toFixed(0)} (${span(cpu(atp))}; wall ${med(wall(atp)).toFixed(0)}): ${(exact[0] / a).toFixed(1)}x faster`,
      );
    }
  }
} finally {
  await browser.close();
  await server.close();
}
