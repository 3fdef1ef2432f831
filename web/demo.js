// The demo page (index.html): pick a model, load it with progress, generate with streaming;
// the interpretability panels (look inside, patching, steering) are in demo-inside.js, the
// fine-tune panel in demo-tune.js.
// URL parameters: ?model=<url> presets the URL field; ?core=<url> swaps the wasm glue
// module (the browser tests use a stand-in to exercise the page without a model).
import { Model, GgwebError, formatBytes } from './ggweb.js';
import { initInside } from './demo-inside.js';
import { initTune } from './demo-tune.js';

// A public GGUF of OpenAI's GPT-2 124M (Q8_0, ~170 MB), converted by llama.cpp.
const DEFAULT_URL = 'https://huggingface.co/QuantFactory/gpt2-GGUF/resolve/main/gpt2.Q8_0.gguf';
const TINY_URL = new URL('../tests/fixtures/tiny-f16.gguf', document.baseURI).href;

const params = new URLSearchParams(location.search);
const coreUrl = params.get('core') ?? undefined;
const $ = (id) => document.getElementById(id);

const el = {
  version: $('version'), url: $('model-url'), file: $('model-file'), tinyStatus: $('tiny-status'),
  backend: $('backend'), gpuLayers: $('gpu-layers'), gpuLayersOut: $('gpu-layers-out'), gpuNote: $('gpu-note'),
  nCtx: $('n-ctx'), cache: $('use-cache'), worker: $('use-worker'),
  loadBtn: $('load-btn'), cancelLoadBtn: $('cancel-load-btn'), progress: $('load-progress'), loadStatus: $('load-status'),
  info: $('model-info'), infoList: $('info-list'),
  prompt: $('prompt'), maxTokens: $('max-tokens'), temperature: $('temperature'), topK: $('top-k'), topP: $('top-p'), seed: $('seed'),
  genBtn: $('gen-btn'), stopBtn: $('stop-btn'), genStats: $('gen-stats'), outPrompt: $('out-prompt'), outText: $('out-text'),
  insideText: $('inside-text'),
  error: $('error'),
  inspectResult: $('inspect-result'), inspectWarning: $('inspect-warning'),
};

let model = null;
let droppedFile = null;
let loadAbort = null;
let genAbort = null;
/** What loaded `model` ({ source, options }): the fine-tune panel loads the original again from it. */
let loadedFrom = null;

// The interpretability panels; while one uses the model, loading and generating wait.
const inside = initInside({
  model: () => model,
  showError: (e) => showError(e),
  clearError: () => clearError(),
  lock(on) {
    el.loadBtn.disabled = on;
    el.genBtn.disabled = on || !model;
    tune.setEnabled(!on && !!model);
  },
});
// The fine-tune panel; while it trains or compares, the other panels wait.
const tune = initTune({
  model: () => model,
  loaded: () => loadedFrom,
  lock(on) {
    el.loadBtn.disabled = on;
    el.genBtn.disabled = on || !model;
    inside.setEnabled(!on && !!model);
  },
});
// The loaded Model, for the browser console (and the browser tests, which compare the
// panels with direct calls).
window.ggwebDemo = { get model() { return model; } };

el.url.value = params.get('model') ?? DEFAULT_URL;

// --- errors, in words -------------------------------------------------------------------

const EXPLAIN = {
  http: 'The server refused the download. Check the URL.',
  network: 'The download failed. Check the connection; a model on another site must be served with CORS headers (Hugging Face does).',
  timeout: 'The download stalled: the server stopped sending. Try again later.',
  device_lost: 'The GPU was lost (a driver reset, or the browser reclaimed it). Load the model again; Auto falls back to the CPU.',
  format: 'This file is not a GGUF model that ggweb can read.',
  unsupported: 'Not possible here: this browser lacks the feature (WebGPU), or the model does not fit in memory.',
  invalid: 'A setting is out of range.',
  busy: 'The model is busy with another request.',
  disposed: 'The model was unloaded.',
  worker: 'The Web Worker that runs the model failed. Try unticking "Run in a Web Worker".',
  internal: 'ggweb hit an internal error; reload the page to start over.',
};

/** For a model over the memory budget ('unsupported' with details.needed and .budget): what does not fit, by how much. */
function overBudget(e) {
  const d = e?.details;
  if (e?.code !== 'unsupported' || !(d?.needed > 0) || !(d?.budget > 0)) return null;
  return `The model does not fit in memory here: it needs ${formatBytes(d.needed)}, the budget is ${formatBytes(d.budget)} ` +
    `(${formatBytes(d.needed - d.budget)} over). Pick a smaller model or context, or the GPU.`;
}

function showError(e) {
  const code = e instanceof GgwebError ? e.code : 'internal';
  el.error.replaceChildren();
  const head = document.createElement('strong');
  head.textContent = overBudget(e) ?? EXPLAIN[code] ?? 'Something went wrong.';
  const detail = document.createElement('span');
  detail.textContent = e?.message ?? String(e);
  el.error.append(head, detail);
  el.error.dataset.code = code;
  el.error.hidden = false;
}
function clearError() {
  el.error.hidden = true;
  el.error.replaceChildren();
  delete el.error.dataset.code;
}

// --- environment: version, WebGPU, the tiny model ---------------------------------------

async function showVersion() {
  try {
    const core = await import(coreUrl ? new URL(coreUrl, document.baseURI).href : './pkg/ggweb_core.js');
    await core.default?.();
    el.version.textContent = `v${core.version()}`;
  } catch (e) {
    el.version.textContent = 'wasm module not built (run npm start)';
    showError(new GgwebError('unsupported', `Could not load the wasm module: ${e.message}`));
  }
}

function setupGpuControls() {
  const hasGpu = typeof navigator !== 'undefined' && 'gpu' in navigator && !!navigator.gpu;
  if (!hasGpu) {
    el.backend.querySelector('option[value="webgpu"]').disabled = true;
    el.gpuNote.textContent = 'WebGPU is not available in this browser (navigator.gpu is missing), so the model runs on the CPU.';
  }
  const update = () => {
    const gpu = hasGpu && el.backend.value !== 'cpu';
    el.gpuLayers.disabled = !gpu;
    const v = Number(el.gpuLayers.value);
    el.gpuLayersOut.textContent = v >= Number(el.gpuLayers.max) ? 'all' : String(v);
    if (hasGpu) {
      el.gpuNote.textContent = gpu
        ? 'Layers not on the GPU run on the CPU.'
        : 'GPU layers apply to the WebGPU and Auto backends.';
    }
  };
  el.backend.addEventListener('change', update);
  el.gpuLayers.addEventListener('input', update);
  update();
}

async function checkTiny() {
  const radio = document.querySelector('input[name="source"][value="tiny"]');
  try {
    const r = await fetch(TINY_URL, { method: 'HEAD' });
    if (!r.ok) throw new Error(String(r.status));
    const n = Number(r.headers.get('Content-Length'));
    el.tinyStatus.textContent = n ? `(${formatBytes(n)}, served by this page's server)` : '';
  } catch {
    radio.disabled = true;
    el.tinyStatus.textContent = '(not on this server: serve the repository with npm start)';
  }
}

// --- sources: URL, tiny model, file picker, drag and drop -------------------------------

const sourceKind = () => document.querySelector('input[name="source"]:checked').value;
const selectSource = (v) => { document.querySelector(`input[name="source"][value="${v}"]`).checked = true; };

el.file.addEventListener('change', () => {
  droppedFile = null;
  if (el.file.files.length) selectSource('file');
  inspectSoon(0);
});
el.url.addEventListener('input', () => { selectSource('url'); inspectSoon(); });
for (const r of document.querySelectorAll('input[name="source"]')) r.addEventListener('change', () => inspectSoon(0));
for (const c of [el.backend, el.gpuLayers, el.nCtx]) c.addEventListener('change', () => { if (inspection) inspectSoon(0); });

let dragDepth = 0;
document.addEventListener('dragenter', (e) => { e.preventDefault(); dragDepth++; document.body.classList.add('dragging'); });
document.addEventListener('dragleave', () => { if (--dragDepth <= 0) { dragDepth = 0; document.body.classList.remove('dragging'); } });
document.addEventListener('dragover', (e) => e.preventDefault());
document.addEventListener('drop', (e) => {
  e.preventDefault();
  dragDepth = 0;
  document.body.classList.remove('dragging');
  const f = e.dataTransfer?.files?.[0];
  if (!f) return;
  droppedFile = f;
  selectSource('file');
  el.loadStatus.textContent = `Dropped ${f.name} (${formatBytes(f.size)}). Press "Load model".`;
  inspectSoon(0);
});

function currentSource() {
  switch (sourceKind()) {
    case 'tiny': return { source: TINY_URL, name: 'tiny test model' };
    case 'file': {
      const f = droppedFile ?? el.file.files[0];
      if (!f) throw new GgwebError('invalid', 'Choose a .gguf file first (or drop one on the page).');
      return { source: f, name: f.name };
    }
    default: {
      const u = el.url.value.trim();
      if (!u) throw new GgwebError('invalid', 'Enter a model URL first.');
      return { source: u, name: u.split('/').pop() };
    }
  }
}

// --- inspect: the header, before the download ------------------------------------------

/** The options that decide the memory plan, as Model.load and Model.inspect take them. */
function modelOptions() {
  const gpuAll = Number(el.gpuLayers.value) >= Number(el.gpuLayers.max);
  return {
    backend: el.backend.value,
    gpuLayers: el.backend.value === 'cpu' ? undefined : gpuAll ? -1 : Number(el.gpuLayers.value),
    nCtx: Number(el.nCtx.value) || undefined,
    // `?memory64=0`: the wasm32 builds only, for comparisons (and the demo's tests of wasm32's budget).
    ...(params.get('memory64') === '0' ? { memory64: false } : {}),
  };
}

/** The latest inspection: { key, source, promise, result?, error? }; `force`: "Load anyway" was offered. */
let inspection = null;
let inspectTimer = null;

const sourceKey = (src) => (typeof src.source === 'string' ? src.source : `file:${src.name}:${src.source.size}:${src.source.lastModified ?? ''}`);
const inspectKey = (src) => `${sourceKey(src)} ${JSON.stringify(modelOptions())}`;

function resetLoadButton() {
  el.loadBtn.textContent = 'Load model';
  delete el.loadBtn.dataset.force;
}

/** Reads only the chosen model's header and shows what it needs and whether it fits here. */
function inspectChosen() {
  clearTimeout(inspectTimer);
  inspectTimer = null;
  let src;
  try {
    src = currentSource();
  } catch {
    return null;
  }
  const key = inspectKey(src);
  if (inspection?.key === key) return inspection;
  resetLoadButton();
  el.inspectWarning.hidden = true;
  el.inspectResult.hidden = false;
  el.inspectResult.textContent = `Reading the header of ${src.name}…`;
  const mine = { key, result: null, error: null };
  mine.promise = Model.inspect(src.source, { ...modelOptions(), coreUrl }).then((r) => {
    mine.result = r;
    if (inspection === mine) showInspection(src, r);
  }, (e) => {
    mine.error = e;
    if (inspection === mine) el.inspectResult.textContent = `Could not read the header of ${src.name}: ${e.message}`;
  });
  inspection = mine;
  return mine;
}

/** Inspects after the choice settles (typing a URL). */
function inspectSoon(ms = 400) {
  clearTimeout(inspectTimer);
  inspectTimer = setTimeout(inspectChosen, ms);
}

/** "GPT-2 · 2 layers × 256 · q8_0 ×25, f32 ×4 · needs 9.1 MB (weights …) · fits". */
function showInspection(src, r) {
  const h = r.hparams;
  const types = Object.entries(r.types).map(([t, v]) => `${t} ×${v.count}`).join(', ');
  const m = r.memory;
  const needs = `needs ${formatBytes(m.total)} on ${r.backend.toUpperCase()} (weights ${formatBytes(m.weights)}, ` +
    `KV ${formatBytes(m.kv)} ${m.kvType}${m.compute === null ? '' : `, compute ${formatBytes(m.compute)}`})`;
  el.inspectResult.textContent = `${src.name}: GPT-2, ${h.nLayer} layers × ${h.nEmbd}, ${h.nHead} heads, ` +
    `n_ctx ${h.nCtx} · ${types} · ${needs} · ` +
    `${r.fits.ok ? 'fits here' : 'does not fit here'} (header: ${formatBytes(r.source.bytesRead)} read)`;
  el.inspectResult.dataset.fits = String(r.fits.ok);
  el.inspectWarning.hidden = r.fits.ok;
  el.inspectWarning.textContent = r.fits.ok ? '' : `This model will not fit: ${r.fits.reason}. Pick a smaller model or context, or the GPU.`;
}

/**
 * Before a download: waits briefly for the inspection of this source (starting none, so a
 * load is never delayed by a slow server), and when it says the model cannot fit, shows
 * why and turns the button into "Load anyway" instead of loading.
 */
async function fitsOrConfirmed(src) {
  if (el.loadBtn.dataset.force === inspectKey(src)) {
    resetLoadButton();
    return true;
  }
  const ins = inspection?.key === inspectKey(src) ? inspection : null;
  if (!ins) return true;
  if (!ins.result && !ins.error) await Promise.race([ins.promise, new Promise((r) => setTimeout(r, 2000))]);
  if (!ins.result || ins.result.fits.ok) return true;
  showInspection(src, ins.result);
  el.loadBtn.textContent = 'Load anyway';
  el.loadBtn.dataset.force = ins.key;
  return false;
}

// --- loading ------------------------------------------------------------------------------

function setLoading(on) {
  el.loadBtn.disabled = on;
  el.cancelLoadBtn.disabled = !on;
  el.genBtn.disabled = on || !model;
  inside.setEnabled(!on && !!model);
  tune.setEnabled(!on && !!model);
}

function progressText(p, t0) {
  const secs = (performance.now() - t0) / 1000;
  const rate = secs > 0 ? p.loaded / 1e6 / secs : 0;
  const of = p.total ? ` / ${formatBytes(p.total)}` : '';
  const phase = { download: 'downloading', cache: 'reading from the browser cache', file: 'reading the file',
    stream: 'reading', build: 'building the model', ready: 'ready' }[p.phase] ?? p.phase;
  return `${formatBytes(p.loaded)}${of} · ${rate.toFixed(1)} MB/s · ${phase}`;
}

async function load() {
  clearError();
  let src;
  try {
    src = currentSource();
  } catch (e) {
    return showError(e);
  }
  if (!(await fitsOrConfirmed(src))) return;
  if (model) {
    const old = model;
    model = null;
    el.info.hidden = true;
    tune.modelChanged();
    await old.dispose();
  }
  loadAbort = new AbortController();
  setLoading(true);
  el.progress.removeAttribute('value'); // indeterminate until the first byte
  el.loadStatus.textContent = `Starting ${src.name}…`;
  const t0 = performance.now();
  try {
    const options = { ...modelOptions(), cache: el.cache.checked, worker: el.worker.checked, coreUrl };
    model = await Model.load(src.source, {
      ...options,
      signal: loadAbort.signal,
      onProgress: (p) => {
        if (p.total) el.progress.value = p.loaded / p.total;
        el.loadStatus.textContent = progressText(p, t0);
      },
    });
    el.progress.value = 1;
    const info = model.info();
    el.loadStatus.textContent = `Loaded ${src.name}: ${formatBytes(info.load.bytes)} in ${(info.load.ms / 1000).toFixed(1)} s` +
      `${info.load.via === 'cache' ? ' from the browser cache' : ''}, ${info.load.backend.toUpperCase()}` +
      `${info.load.worker ? ', in a Web Worker' : ''}.`;
    showInfo(info);
    loadedFrom = { source: src.source, options };
    inside.modelChanged();
    tune.modelChanged();
  } catch (e) {
    model = null;
    el.progress.value = 0;
    if (e instanceof GgwebError && e.code === 'aborted') {
      el.loadStatus.textContent = 'Loading cancelled.';
    } else {
      el.loadStatus.textContent = 'Loading failed.';
      showError(e);
    }
  } finally {
    loadAbort = null;
    setLoading(false);
  }
}

/** "1 of 2 layers on WebGPU · 2 splits · 2 copies per token (512 B) · WebGPU: weights …" */
function splitText(info) {
  const s = info.split;
  if (!s || typeof s !== 'object') return undefined;
  const nLayer = info.hparams?.nLayer;
  const gpu = s.backends?.find((b) => b !== 'CPU');
  const where = gpu
    ? `${s.gpuLayers} of ${nLayer} layers on ${gpu}${s.embeddingsOnGpu ? ' (embeddings too)' : ''}`
    : 'all layers on the CPU';
  const bytes = Object.entries(s.bytesPerBackend ?? {}).map(([b, m]) =>
    `${b}: weights ${formatBytes(m.weights)}, KV ${formatBytes(m.kv)}, compute ${formatBytes(m.compute)}`);
  return [where, `${s.splits} split${s.splits === 1 ? '' : 's'}`,
    `${s.copiesPerToken} cop${s.copiesPerToken === 1 ? 'y' : 'ies'} per token (${formatBytes(s.copyBytesPerToken)})`, ...bytes].join(' · ');
}

function showInfo(info) {
  const rows = [];
  const add = (k, v) => { if (v !== undefined && v !== null && v !== '') rows.push([k, v]); };
  add('architecture', info.arch);
  add('backend', info.backend ?? info.load.backend);
  if (info.threads) add('CPU threads', `${info.threads.n} (${info.threads.build})${info.threads.reason ? ': ' + info.threads.reason : ''}`);
  if (info.hparams && typeof info.hparams === 'object') {
    // The camelCase names; the snake_case duplicates (deprecated, one release) are left out.
    add('hyperparameters', Object.entries(info.hparams).filter(([k]) => !k.includes('_')).map(([k, v]) => `${k}=${v}`).join(' '));
  }
  if (info.memory && typeof info.memory === 'object') {
    // `repacked` counts bytes of `weights` rearranged in place: shown beside them, not added.
    const parts = Object.entries(info.memory).filter(([k, v]) => typeof v === 'number' && k !== 'repacked');
    const total = parts.reduce((a, [, v]) => a + v, 0);
    const repacked = info.memory.repacked > 0 ? ` (${formatBytes(info.memory.repacked)} repacked in place)` : '';
    const text = parts.map(([k, v]) => `${k} ${formatBytes(v)}${k === 'weights' ? repacked : ''}`);
    add('memory plan', text.join(' · ') + ` · total ${formatBytes(total)}`);
  }
  add('split', splitText(info));
  add('backend note', info.backendNote);
  add('file', `${formatBytes(info.load.bytes)} (${info.load.via}${info.load.cached ? ', now cached' : ''})`);
  el.infoList.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.dataset.key = k;
    dd.textContent = String(v);
    return [dt, dd];
  }));
  el.info.hidden = false;
}

// --- generation ---------------------------------------------------------------------------

function numberOr(input, fallback) {
  const v = input.value.trim();
  return v === '' ? fallback : Number(v);
}

async function generate() {
  if (!model) return;
  clearError();
  genAbort = new AbortController();
  el.genBtn.disabled = true;
  el.loadBtn.disabled = true;
  inside.setEnabled(false);
  tune.setEnabled(false);
  el.stopBtn.disabled = false;
  el.outPrompt.textContent = el.prompt.value;
  el.outText.textContent = '';
  el.genStats.textContent = 'evaluating the prompt…';
  const t0 = performance.now();
  let tFirst = 0;
  let n = 0;
  const show = (extra = '') => {
    const t = performance.now();
    const rate = n > 1 ? ((n - 1) * 1000) / (t - tFirst) : 0;
    el.genStats.textContent = `${n} tokens · ${rate.toFixed(1)} tokens/s · first token after ${Math.round(tFirst - t0)} ms${extra}`;
  };
  try {
    const it = model.generate(el.prompt.value, {
      maxTokens: numberOr(el.maxTokens, 64),
      temperature: numberOr(el.temperature, 0.8),
      topK: numberOr(el.topK, 40),
      topP: numberOr(el.topP, 0.95),
      seed: numberOr(el.seed, undefined),
      signal: genAbort.signal,
    });
    for await (const { text } of it) {
      if (n++ === 0) tFirst = performance.now();
      el.outText.textContent += text;
      show();
    }
    const stats = await it.stats;
    show({ eos: ' · end of text', contextFull: ' · context full' }[stats?.stop] ?? '');
    el.insideText.value = el.prompt.value + el.outText.textContent;
  } catch (e) {
    if (e instanceof GgwebError && e.code === 'aborted') show(' · stopped');
    else {
      el.genStats.textContent = '';
      showError(e);
    }
  } finally {
    genAbort = null;
    el.stopBtn.disabled = true;
    el.genBtn.disabled = !model;
    inside.setEnabled(!!model);
    tune.setEnabled(!!model);
    el.loadBtn.disabled = false;
  }
}

el.loadBtn.addEventListener('click', load);
el.cancelLoadBtn.addEventListener('click', () => loadAbort?.abort());
el.genBtn.addEventListener('click', generate);
el.stopBtn.addEventListener('click', () => genAbort?.abort());
el.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && !el.genBtn.disabled) generate();
});

setupGpuControls();
await Promise.all([showVersion(), checkTiny()]);
document.body.dataset.ready = '1';
