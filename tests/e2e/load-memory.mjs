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
// - the worker's: its wasm memory after the load (info().wasmMemory; linear memory only grows,
//   so that is its peak) plus its JS heap and ArrayBuffer backing stores after the load (CDP
//   Runtime.getHeapUsage on the worker's target). Not sampled during the load: with a CDP
//   session on the worker, Chromium 156 keeps the fetched chunks' buffers until a later GC
//   (measured: 70 MB of them, an 85 MB transient in the renderer, both ~0 without the
//   session), so the worker's peak is read from the renderer's instead (it holds the worker):
//   no transient there means the worker never held more than it keeps.
//   (performance.measureUserAgentSpecificMemory gives the worker's total too, but headless
//   Chromium 156 answers it only after 60 s.)
import { readFileSync, writeFileSync } from 'node:fs';
import { launch } from './helpers.mjs';

export const MIB = 1024 * 1024;

/**
 * What a load must hold to, besides the page's heap: the wasm memory (the model's own: weights,
 * KV cache, compute buffer, tokenizer) within goal(m); the worker's JS side (the fetched chunks
 * awaiting V8's GC, which collects them when its external memory grows, not per chunk) under
 * half the file; the renderer's rise beyond the wasm memory (the runtime's own ~20 MB, those
 * chunks) under 0.9 × the file: no second copy of the weights, not even a transient one.
 * Returns the failures, in words (empty when it holds).
 */
export function checkLoad(m) {
  const bad = [];
  const g = goal(m);
  if (m.wasmMemory.now > g) bad.push(`wasm memory ${m.wasmMemory.now} > goal ${g}`);
  if (m.pageJsPeak > 8 * MIB) bad.push(`the page's JS heap reached ${m.pageJsPeak}`);
  if (!(m.worker.js > 0 && m.worker.js <= 0.5 * m.file)) bad.push(`the worker's JS heap and buffers ${m.worker.js}, file ${m.file}`);
  if (m.renderer.peakRise - m.wasmMemory.now > 0.9 * m.file) bad.push(`the renderer rose ${m.renderer.peakRise}, wasm memory ${m.wasmMemory.now}, file ${m.file}`);
  return bad;
}

/** Chromium as the other specs launch it. */
export const launchForMemory = launch;

/**
 * The JS heap (totalSize) plus ArrayBuffer backing stores of the dedicated worker whose URL
 * ends in /worker.js, through the browser's CDP session (Target.sendMessageToTarget: Playwright
 * opens sessions on pages only).
 */
async function workerHeap(browser) {
  const cdp = await browser.newBrowserCDPSession();
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const target = targetInfos.find((t) => t.type === 'worker' && /\/worker\.js$/.test(t.url));
    if (!target) throw new Error('no worker.js target');
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: target.targetId, flatten: false });
    const reply = new Promise((resolve) => {
      cdp.on('Target.receivedMessageFromTarget', (e) => {
        const m = JSON.parse(e.message);
        if (m.id === 1) resolve(m);
      });
    });
    await cdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id: 1, method: 'Runtime.getHeapUsage' }) });
    const { result } = await reply;
    await cdp.send('Target.detachFromTarget', { sessionId });
    return result.totalSize + result.backingStorageSize;
  } finally {
    await cdp.detach().catch(() => {});
  }
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
 * and returns { file, loadMs, phases (info().load.phases), memory (info().memory), wasmMemory, threads, renderer: { before, peak,
 * after, peakRise, transient }, pageJsPeak, worker: { bytes: wasm memory + js, js } } (bytes; `peakRise` the
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
        const out = { file: info.load.bytes, loadMs: info.load.ms, phases: info.load.phases, memory: info.memory, wasmMemory: info.wasmMemory, threads: info.threads };
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
    const workerJs = await workerHeap(browser);
    await page.evaluate(() => window.M.dispose());
    const renderer = { before: before.get(pid), peak: after.VmHWM, after: after.VmRSS, peakRise: after.VmHWM - before.get(pid), transient: after.VmHWM - after.VmRSS };
    return { ...r, renderer, pageJsPeak, worker: { bytes: r.wasmMemory.now + workerJs, js: workerJs } };
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
    `worker ${mb(m.worker.bytes)} (wasm ${mb(m.wasmMemory.now)}, JS heap + buffers ${mb(m.worker.js)}), page JS heap peak ${mb(m.pageJsPeak)}; ` +
    `${m.threads.n} thread(s), ${m.threads.build}, load ${Math.round(m.loadMs)} ms (of it waiting for the chunks' GC ${Math.round(m.phases.gcWaitMs)} ms)`;
}
