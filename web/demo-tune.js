// The demo's "Fine-tune" panel (index.html section 6), on the loaded model: model.train on
// pasted or dropped text (every weight, or a LoRA adapter), a live loss curve (SVG), greedy
// text of the tuned model beside the original's (a second Model.load of the same source,
// made once per loaded model), and the download of model.save's GGUF or saveLora's adapter.
// Errors show in the panel with their code, never on the console.
import { Model, GgwebError, formatBytes } from './ggweb.js';

const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
const TARGETS = ['attn_qkv', 'attn_output', 'ffn_up', 'ffn_down'];

/** Draws `losses` (one per step, from 1) into `svg`: a polyline, a dot per step, the range. */
function drawCurve(svg, losses, steps) {
  const [w, h, pad] = [480, 160, 24];
  const lo = Math.min(...losses);
  const hi = Math.max(...losses);
  const x = (i) => pad + ((w - 2 * pad) * i) / Math.max(1, steps - 1);
  const y = (l) => (hi === lo ? h / 2 : pad / 2 + ((h - pad) * (hi - l)) / (hi - lo));
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const line = el('polyline', { points: losses.map((l, i) => `${x(i).toFixed(1)},${y(l).toFixed(1)}`).join(' ') });
  const dots = losses.map((l, i) => {
    const c = el('circle', { cx: x(i).toFixed(1), cy: y(l).toFixed(1), r: 2, 'data-step': i + 1, 'data-loss': l });
    c.append(el('title', {}, `step ${i + 1}: loss ${l.toFixed(4)}`));
    return c;
  });
  const labels = [el('text', { x: 2, y: 10 }, hi.toFixed(3)), el('text', { x: 2, y: h - 4 }, lo.toFixed(3)),
    el('text', { x: w - 60, y: h - 4 }, `step ${losses.length}/${steps}`)];
  svg.replaceChildren(line, ...dots, ...labels);
  svg.dataset.losses = JSON.stringify(losses);
  svg.hidden = false;
}

/**
 * Wires the panel. `ctx`: { model() (the loaded Model or null), loaded() ({ source, options }:
 * what loaded it, for the original's second load), lock(on) (disables the page's other model
 * buttons while the panel uses the model) }. Returns { setEnabled(on), modelChanged() }.
 */
export function initTune(ctx) {
  const el = {
    text: $('tune-text'), file: $('tune-file'), mode: $('tune-mode'), rank: $('tune-rank'), steps: $('tune-steps'),
    lr: $('tune-lr'), seqLen: $('tune-seq-len'), btn: $('tune-btn'), stopBtn: $('tune-stop-btn'), stats: $('tune-stats'),
    curve: $('tune-curve'), error: $('tune-error'), result: $('tune-result'), prompt: $('tune-prompt'), max: $('tune-max'),
    genBtn: $('tune-gen-btn'), genStats: $('tune-gen-stats'), original: $('tune-original'), tuned: $('tune-tuned'),
    saveType: $('tune-save-type'), saveBtn: $('tune-save-btn'), link: $('tune-link'),
  };
  let enabled = false;
  let busy = false;
  let abort = null;
  let trained = null; // { mode } of the model's last finished run
  let original = null; // Promise<Model>: the same source loaded again, untouched

  const showError = (e) => {
    const code = e instanceof GgwebError ? e.code : 'internal';
    el.error.textContent = `${code}: ${e?.message ?? String(e)}`;
    el.error.dataset.code = code;
    el.error.hidden = false;
  };
  const clearError = () => {
    el.error.hidden = true;
    el.error.textContent = '';
    delete el.error.dataset.code;
  };
  const refresh = () => {
    el.btn.disabled = !enabled || busy;
    el.stopBtn.disabled = !abort;
    el.genBtn.disabled = el.saveBtn.disabled = !enabled || busy || !trained;
    el.rank.disabled = el.mode.value !== 'lora';
  };

  /** Runs `fn(model)` with the model to itself; its errors go to the panel. */
  async function task(fn) {
    const m = ctx.model();
    if (!m || busy) return;
    clearError();
    busy = true;
    refresh();
    ctx.lock(true);
    try {
      await fn(m);
    } catch (e) {
      showError(e);
    } finally {
      busy = false;
      abort = null;
      ctx.lock(false);
      refresh();
    }
  }

  const num = (input) => (input.value.trim() === '' ? undefined : Number(input.value));

  function train() {
    return task(async (m) => {
      const lora = el.mode.value === 'lora';
      const opts = {
        steps: num(el.steps), seqLen: num(el.seqLen), seed: 1,
        optimizer: { type: 'adamw', lr: num(el.lr) },
        ...(lora ? { lora: { rank: num(el.rank), targets: TARGETS } } : {}),
      };
      abort = new AbortController();
      refresh();
      const losses = [];
      el.curve.hidden = true;
      el.stats.textContent = 'planning…';
      delete el.stats.dataset.stop;
      const run = m.train(el.text.value, { ...opts, signal: abort.signal });
      let last = null;
      try {
        for await (const s of run) {
          losses.push(s.loss);
          last = s;
          drawCurve(el.curve, losses, opts.steps);
          el.stats.textContent = `step ${s.step}/${opts.steps} · loss ${s.loss.toFixed(4)} · ` +
            `${Math.round(s.tokensPerSecond)} tokens/s`;
        }
      } finally {
        // Even a failed or stopped run leaves the weights of its last finished step.
        if (losses.length) trained = { mode: lora ? 'lora' : 'full' };
      }
      const st = await run.stats;
      el.stats.textContent = `${st.stop === 'cancelled' ? 'stopped' : 'done'}: ${st.steps} steps, ${st.tokens} tokens` +
        (last ? `, last loss ${last.loss.toFixed(4)}` : '');
      el.stats.dataset.stop = st.stop;
      el.result.hidden = !trained;
    });
  }

  /** Greedy text of the original model (loaded again, once) and of the tuned one. */
  function compare() {
    return task(async (m) => {
      const o = { maxTokens: num(el.max), temperature: 0 };
      el.original.textContent = el.tuned.textContent = '';
      delete el.original.dataset.tokens;
      delete el.tuned.dataset.tokens;
      el.genStats.textContent = 'loading the original model…';
      if (!original) {
        const { source, options } = ctx.loaded();
        original = Model.load(source, options);
        original.catch(() => { original = null; });
      }
      const base = await original;
      el.genStats.textContent = 'generating…';
      for (const [model, box] of [[base, el.original], [m, el.tuned]]) {
        const ids = [];
        for await (const { text, token } of model.generate(el.prompt.value, o)) {
          box.textContent += text;
          ids.push(token);
        }
        box.dataset.tokens = ids.join(',');
      }
      el.genStats.textContent = '';
    });
  }

  /** model.save's GGUF (every weight trained) or saveLora's adapter, as a download. */
  function download() {
    return task(async (m) => {
      const type = el.saveType.value;
      const adapter = trained.mode === 'lora';
      const bytes = adapter ? await m.saveLora({ type }) : await m.save({ type });
      if (el.link.href) URL.revokeObjectURL(el.link.href);
      el.link.href = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
      el.link.download = adapter ? `lora-adapter-${type}.gguf` : `fine-tuned-${type}.gguf`;
      el.link.textContent = `${el.link.download} (${formatBytes(bytes.length)})`;
      el.link.dataset.bytes = String(bytes.length);
      el.link.dataset.kind = adapter ? 'adapter' : 'model';
      el.link.hidden = false;
      el.link.click();
    });
  }

  // Text: pasted, picked, or dropped on the box (not taken by the page's .gguf drop).
  const readFile = async (f) => {
    clearError();
    if (!f) return;
    if (/\.gguf$/i.test(f.name)) {
      showError(new GgwebError('invalid', `${f.name} is a model file: drop it outside this box to load it, or drop a text file here`));
      return;
    }
    el.text.value = await f.text();
  };
  el.file.addEventListener('change', () => readFile(el.file.files[0]));
  el.text.addEventListener('dragover', (e) => { e.preventDefault(); el.text.classList.add('dropping'); });
  el.text.addEventListener('dragleave', () => el.text.classList.remove('dropping'));
  el.text.addEventListener('drop', (e) => {
    const f = e.dataTransfer?.files?.[0];
    if (!f) return; // dropped text: the textarea inserts it
    e.preventDefault();
    e.stopPropagation();
    el.text.classList.remove('dropping');
    document.body.classList.remove('dragging');
    readFile(f);
  });
  el.mode.addEventListener('change', refresh);
  el.btn.addEventListener('click', train);
  el.stopBtn.addEventListener('click', () => abort?.abort());
  el.genBtn.addEventListener('click', compare);
  el.saveBtn.addEventListener('click', download);
  refresh();

  return {
    setEnabled(on) {
      enabled = on;
      refresh();
    },
    /** A new model (or none): the previous run's results and original no longer apply. */
    modelChanged() {
      trained = null;
      const o = original;
      original = null;
      o?.then((m) => m.dispose(), () => {});
      el.result.hidden = el.curve.hidden = true;
      el.stats.textContent = '';
      el.original.textContent = el.tuned.textContent = '';
      if (el.link.href) URL.revokeObjectURL(el.link.href);
      el.link.removeAttribute('href');
      el.link.hidden = true;
      clearError();
      refresh();
    },
  };
}
