// A model load's memory in headless Chromium, for tests/e2e/load-memory.spec.mjs (124M shape)
// and tests/scale/load-memory.spec.mjs (XL): each load in a browser context of its own, so its
// page, the model's worker and the thread pool's workers are one renderer process that nothing
// else shares. Measured:
// - the renderer process's peak resident memory during the load (Linux /proc: VmHWM after
//   `clear_refs` 5 reset it just before, minus VmRSS then): what the tab costs the machine,
//   page, workers, wasm memory and compiled code together; and how far that peak rose above
//   what stayed after the load (a transient second copy of the weights would show there);
// - the page's JS heap at its highest (CDP Performance.getMetrics JSHeapTotalSize, sampled every
//   20 ms through the load): the page never holds the file;
// - the worker's memory after the load (performance.measureUserAgentSpecificMemory, attributed
//   to worker.js: its wasm memory and JS heap; Chromium answers at once with the blink feature
//   ForceEagerMeasureMemory) and info().wasmMemory.
import { readFileSync, writeFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from './helpers.mjs';

export const MIB = 1024 * 1024;

/** Chromium as the other specs launch it, with measureUserAgentSpecificMemory answering at once. */
export function launchForMemory() {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: [...CHROMIUM_ARGS, '--enable-blink-features=ForceEagerMeasureMemory'] });
}

/** VmRSS and VmHWM of process `pid`, in bytes. */
function vm(pid) {
  const out = {};
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(VmRSS|VmHWM):\s+(\d+) kB/.exec(line);
    if (m) out[m[1]] = Number(m[2]) * 1024;
  }
  return out;
}

async function rendererPids(browser) {
  const cdp = await browser.newBrowserCDPSession();
  try {
    const { processInfo } = await cdp.send('SystemInfo.getProcessInfo');
    return processInfo.filter((p) => p.type === 'renderer').map((p) => p.id);
  } finally {
    await cdp.detach();
  }
}

/**
 * Loads `url` (served by `server`) with `opts` in a new context of `browser` (launchForMemory)
 * and returns { file, loadMs, memory (info().memory), wasmMemory, threads, renderer: { before, peak,
 * after, peakRise, transient }, pageJsPeak, worker: { bytes, js } } (bytes; `peakRise` the
 * renderer's peak minus its resident memory before the load, `transient` the peak minus what
 * stayed). The model is disposed and the context closed before it returns.
 */
export async function measureLoad(browser, server, url, opts = {}) {
  const ctx = await browser.newContext();
  try {
    const page = await ctx.newPage();
    await page.goto(`${server.url}e2e/harness.html`);
    await page.evaluate(async () => { window.G = await import('/ggweb.js'); });
    // Chromium gives no target's pid; its browser UI has renderers of its own too. Every
    // renderer is watched: the page's is the one the load made grow (by hundreds of MB).
    const pids = await rendererPids(browser);
    const before = new Map();
    for (const pid of pids) {
      writeFileSync(`/proc/${pid}/clear_refs`, '5'); // VmHWM := VmRSS
      before.set(pid, vm(pid).VmRSS);
    }
    const cdp = await ctx.newCDPSession(page);
    await cdp.send('Performance.enable');
    let pageJsPeak = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { metrics } = await cdp.send('Performance.getMetrics');
        pageJsPeak = Math.max(pageJsPeak, metrics.find((m) => m.name === 'JSHeapTotalSize').value);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    let r;
    try {
      r = await page.evaluate(async ({ url, opts }) => {
        const m = await window.G.Model.load(url, opts);
        const info = m.info();
        const mem = await performance.measureUserAgentSpecificMemory();
        const of = (scope) => mem.breakdown.filter((b) => b.attribution.some((a) => a.scope === scope && /\/worker\.js$/.test(a.url)))
          .reduce((s, b) => s + b.bytes, 0);
        const out = { file: info.load.bytes, loadMs: info.load.ms, memory: info.memory, wasmMemory: info.wasmMemory, threads: info.threads, worker: of('DedicatedWorkerGlobalScope') };
        window.M = m;
        return out;
      }, { url, opts });
    } finally {
      sampling = false;
      await sampler;
    }
    const rise = (pid) => vm(pid).VmHWM - before.get(pid);
    const pid = pids.reduce((a, b) => (rise(b) > rise(a) ? b : a));
    const after = vm(pid);
    await page.evaluate(() => window.M.dispose());
    const renderer = { before: before.get(pid), peak: after.VmHWM, after: after.VmRSS, peakRise: after.VmHWM - before.get(pid), transient: after.VmHWM - after.VmRSS };
    return { ...r, renderer, pageJsPeak, worker: { bytes: r.worker, js: r.worker - r.wasmMemory.now } };
  } finally {
    await ctx.close();
  }
}

/** 1.1 × the file plus the KV cache and the compute buffer: the goal a load's memory is held to. */
export const goal = (m) => Math.round(1.1 * m.file + m.memory.kv + m.memory.compute);

/** One line of figures in MB (10^6 bytes), for the log and BENCHMARKS.md. */
export function describe(name, m) {
  const mb = (b) => (b / 1e6).toFixed(1);
  return `${name}: file ${mb(m.file)} MB, plan weights ${mb(m.memory.weights)} + KV ${mb(m.memory.kv)} + compute ${mb(m.memory.compute)}; ` +
    `goal (1.1 × file + KV + compute) ${mb(goal(m))}; renderer peak rise ${mb(m.renderer.peakRise)} (transient above the end ${mb(m.renderer.transient)}), ` +
    `worker ${mb(m.worker.bytes)} (wasm ${mb(m.wasmMemory.now)}, JS ${mb(m.worker.js)}), page JS heap peak ${mb(m.pageJsPeak)}; ` +
    `${m.threads.n} thread(s), ${m.threads.build}, load ${Math.round(m.loadMs)} ms`;
}
