// The demo's interpretability panels (index.html sections 3-5), on the loaded model:
// "Look inside" (GLTR colours from score(), attention heatmaps from trace() with token axes,
// a logit-lens grid from logitLens(), saliency() of the predicted token, head ablation through
// run() hooks), activation patching (patch(): exact, attribution, or both side by side with
// their Spearman rank correlation) and steering a streamed generate() with a residual-difference or SAE vector.
// Every handler shows its errors in the page (ctx.showError), never on the console.
import { GgwebError } from './ggweb.js';

const $ = (id) => document.getElementById(id);

/** GLTR's buckets: the rank of the token among the model's predictions. */
const bucket = (rank) => (rank < 10 ? 'r10' : rank < 100 ? 'r100' : rank < 1000 ? 'r1000' : 'rest');
const pct = (lp) => `${(100 * Math.exp(lp)).toPrecision(3)}%`;
/** A token as shown in a label: whitespace made visible. */
const visible = (t) => t.replace(/\n/g, '↵').replace(/\t/g, '⇥');
const quoted = (t) => JSON.stringify(t);

function cell(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'title') e.title = v;
    else if (k === 'style') e.style.cssText = v;
    else e.dataset[k] = v;
  }
  return e;
}

/** The `k` highest logits of the last position of `logits` ([pos][nVocab]), with log-probabilities. */
export function topNext(logits, nVocab, k = 5) {
  const row = logits.subarray(logits.length - nVocab);
  let max = -Infinity;
  for (const v of row) if (v > max) max = v;
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  const top = [];
  for (let i = 0; i < row.length; i++) {
    if (top.length === k && row[i] <= top[k - 1].logit) continue;
    top.push({ token: i, logit: row[i] });
    top.sort((a, b) => b.logit - a.logit || a.token - b.token);
    if (top.length > k) top.pop();
  }
  return top.map((t) => ({ ...t, logprob: t.logit - lse }));
}

/** Ranks of `xs` (1-based; ties share their mean rank). */
function ranks(xs) {
  const order = Array.from(xs, (_, i) => i).sort((a, b) => xs[a] - xs[b]);
  const r = new Float64Array(xs.length);
  for (let i = 0; i < order.length;) {
    let j = i;
    while (j + 1 < order.length && xs[order[j + 1]] === xs[order[i]]) j++;
    for (let k = i; k <= j; k++) r[order[k]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return r;
}

/** Spearman's rank correlation of two equally long arrays: Pearson's r of their ranks (NaN if one is constant). */
export function spearman(a, b) {
  const [ra, rb] = [ranks(a), ranks(b)];
  const mean = (ra.length + 1) / 2;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < ra.length; i++) {
    const [x, y] = [ra[i] - mean, rb[i] - mean];
    sab += x * y;
    saa += x * x;
    sbb += y * y;
  }
  return sab / Math.sqrt(saa * sbb);
}

/**
 * Wires the panels. `ctx`: { model() (the loaded Model or null), showError, clearError,
 * lock(on) (disables the page's other model buttons while a panel uses the model) }.
 * Returns { setEnabled(on), modelChanged() }.
 */
export function initInside(ctx) {
  const el = {
    insideText: $('inside-text'), insideBtn: $('inside-btn'), insideStats: $('inside-stats'), insideResult: $('inside-result'),
    gltr: $('gltr'), tokenDetail: $('token-detail'), attnLayer: $('attn-layer'), attnHead: $('attn-head'),
    attnCanvas: $('attn-canvas'), attnKeys: $('attn-keys'), attnQueries: $('attn-queries'), attnReadout: $('attn-readout'),
    lensGrid: $('lens-grid'), ablateGrid: $('ablate-grid'), ablateHooks: $('ablate-hooks'), predBase: $('pred-base'), predAblated: $('pred-ablated'),
    patchClean: $('patch-clean'), patchCorrupted: $('patch-corrupted'), patchAnswer: $('patch-answer'), patchAgainst: $('patch-against'),
    patchAt: $('patch-at'), patchBtn: $('patch-btn'), patchStats: $('patch-stats'), patchResult: $('patch-result'),
    patchLegend: $('patch-legend'), patchGrid: $('patch-grid'), patchMethod: $('patch-method'), patchCorr: $('patch-corr'),
    patchExact: $('patch-exact'), patchAtp: $('patch-atp'), patchLegendAtp: $('patch-legend-atp'), patchGridAtp: $('patch-grid-atp'),
    salMethod: $('sal-method'), salBtn: $('sal-btn'), salStats: $('sal-stats'), salTokens: $('sal-tokens'),
    steerPrompt: $('steer-prompt'), steerLayer: $('steer-layer'), steerA: $('steer-a'), steerB: $('steer-b'),
    saeFeature: $('sae-feature'), saeUrl: $('sae-url'), saeLoadBtn: $('sae-load-btn'), saeStatus: $('sae-status'),
    steerStrength: $('steer-strength'), steerStrengthOut: $('steer-strength-out'), steerMax: $('steer-max'),
    steerBtn: $('steer-btn'), steerStats: $('steer-stats'), steerHooks: $('steer-hooks'), steerPlain: $('steer-plain'), steerOut: $('steer-out'),
  };
  const buttons = [el.insideBtn, el.salBtn, el.patchBtn, el.steerBtn, el.saeLoadBtn];
  let enabled = false;
  let busy = false;
  let inside = null; // { ids, text, score, attn, n, nHead, nLayer, nVocab, lens, base }
  let sae = null; // { sae, owner }: an SAE belongs to the model that loaded it

  const text = async (m, ids, into) => {
    const need = [...new Set(ids)].filter((id) => !into.has(id));
    await Promise.all(need.map(async (id) => into.set(id, await m.detokenize([id]))));
    return into;
  };

  function refresh() {
    for (const b of buttons) b.disabled = !enabled || busy;
    for (const c of el.ablateGrid.querySelectorAll('input')) c.disabled = !enabled || busy;
  }

  /** Runs `fn(model)` with the model to itself; errors go to the page, `status` is cleared on one. */
  async function task(status, fn) {
    const m = ctx.model();
    if (!m || busy) return;
    ctx.clearError();
    busy = true;
    refresh();
    ctx.lock(true);
    try {
      await fn(m);
    } catch (e) {
      if (status) status.textContent = '';
      ctx.showError(e);
    } finally {
      busy = false;
      ctx.lock(false);
      refresh();
    }
  }

  /** A text's token ids, within the model's context. */
  async function tokens(m, s, what, min = 1) {
    const nCtx = m.info().hparams?.nCtx ?? Infinity;
    const ids = Array.from(await m.tokenize(s));
    if (ids.length < min) throw new GgwebError('invalid', `${what} needs a text of at least ${min} token${min === 1 ? '' : 's'}.`);
    return { ids: ids.slice(0, nCtx), cut: ids.length > nCtx, nCtx };
  }

  /** One token id for an answer field (" Mary"). */
  async function oneToken(m, s, what) {
    const ids = await m.tokenize(s);
    if (ids.length !== 1) {
      throw new GgwebError('invalid', `${what} must be one token; ${quoted(s)} is ${ids.length} (${Array.from(ids).join(', ')}).`);
    }
    return ids[0];
  }

  // --- 3. look inside ---------------------------------------------------------------------

  const lookInside = () => task(el.insideStats, async (m) => {
    el.insideStats.textContent = 'scoring…';
    const t0 = performance.now();
    const hp = m.info().hparams ?? {};
    const { ids, cut, nCtx } = await tokens(m, el.insideText.value, 'Look inside', 2);
    const score = await m.score(ids, { topK: 5 });
    const trace = await m.trace(ids, { taps: ['attn'] });
    const lens = await m.logitLens(ids, { topK: 5 });
    const base = await m.run(ids);
    const nVocab = base.logits.length / ids.length;
    const vocab = new Set(ids);
    for (const row of score.top) for (const e of row) vocab.add(e.token);
    for (const layer of lens.top) for (const pos of layer) for (const e of pos) vocab.add(e.token);
    const names = await text(m, [...vocab], new Map());
    inside = {
      ids, text: names, score, lens, attn: trace.attn, n: ids.length, nVocab,
      nHead: hp.nHead ?? 1, nLayer: trace.attn.length, base: topNext(base.logits, nVocab),
    };
    renderGltr();
    fillSelect(el.attnLayer, inside.nLayer);
    fillSelect(el.attnHead, inside.nHead);
    drawAttention();
    renderLens();
    renderAblationGrid();
    await text(m, inside.base.map((t) => t.token), names);
    renderPreds(el.predBase, inside.base);
    el.predAblated.replaceChildren();
    delete el.predAblated.dataset.hooks;
    el.ablateHooks.textContent = 'No head ticked.';
    el.insideResult.hidden = false;
    const counts = { r10: 0, r100: 0, r1000: 0, rest: 0 };
    for (const r of score.ranks) counts[bucket(r)]++;
    el.insideStats.textContent = `${ids.length} tokens${cut ? ` (the first ${nCtx}: the context)` : ''} · ` +
      `top 10: ${counts.r10} · top 100: ${counts.r100} · top 1000: ${counts.r1000} · rest: ${counts.rest} · ` +
      `${Math.round(performance.now() - t0)} ms`;
  });

  // Saliency: each token of the text coloured by its score for the model's predicted next token.
  const saliency = () => task(el.salStats, async (m) => {
    el.salStats.textContent = 'computing…';
    const t0 = performance.now();
    const { ids } = await tokens(m, el.insideText.value, 'Saliency');
    const base = await m.run(ids);
    const nVocab = base.logits.length / ids.length;
    const [pred] = topNext(base.logits, nVocab, 1);
    const method = el.salMethod.value;
    const r = await m.saliency(ids, { of: { logprob: { token: pred.token } }, method });
    const names = await text(m, [...ids, pred.token], new Map());
    let scale = 0;
    for (const v of r.scores) scale = Math.max(scale, Math.abs(v));
    el.salTokens.dataset.method = method;
    el.salTokens.dataset.predicted = String(pred.token);
    el.salTokens.replaceChildren(...ids.map((id, i) => {
      const v = r.scores[i];
      const span = cell('span', names.get(id), { i: String(i), score: String(v), style: `background: ${diverging(v, scale)};${Math.abs(v) > 0.6 * scale ? ' color: #fff;' : ''}` });
      span.title = `${i}: ${quoted(names.get(id))} · score ${v.toPrecision(4)}`;
      return span;
    }));
    el.salStats.textContent = `${ids.length} tokens · for the prediction ${quoted(names.get(pred.token))} (p = ${pct(pred.logprob)}) · ` +
      `${method}${r.delta === undefined ? '' : `, completeness gap ${r.delta.toFixed(4)}`} · ${Math.round(performance.now() - t0)} ms`;
  });

  function fillSelect(select, n, keepDefault = 0) {
    const keep = Math.min(select.value === '' ? keepDefault : Number(select.value) || 0, n - 1);
    select.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(String(i), String(i))));
    select.value = String(keep);
  }

  function tokenDetail(i) {
    const { ids, text: t, score } = inside;
    if (i === 0) return `${quoted(t.get(ids[0]))}: the first token (nothing predicts it)`;
    const top = score.top[i - 1].map((e) => `${quoted(t.get(e.token))} ${pct(e.logprob)}`).join(', ');
    return `${quoted(t.get(ids[i]))}: p = ${pct(score.logprobs[i - 1])}, rank ${score.ranks[i - 1]}, ` +
      `entropy ${score.entropies[i - 1].toFixed(2)} nats · top 5: ${top}`;
  }

  function renderGltr() {
    const { ids, text: t, score } = inside;
    el.gltr.replaceChildren(...ids.map((id, i) => {
      const span = cell('span', t.get(id), { i: String(i) });
      if (i > 0) {
        span.className = bucket(score.ranks[i - 1]);
        span.dataset.rank = String(score.ranks[i - 1]);
      }
      span.title = tokenDetail(i);
      return span;
    }));
    el.tokenDetail.textContent = '';
  }

  /** A label per token: data-text holds the token exactly, the label shows it with whitespace visible. */
  const tokenLabels = (ids, size) => ids.map((id, i) => {
    const s = inside.text.get(id);
    return cell('span', visible(s), { text: s, i: String(i), title: `${i}: ${quoted(s)}`, style: `--cell: ${size}px` });
  });

  /**
   * Queries down, keys across, darker = more attention; masked (future) keys stay blank.
   * Cells are at least 14 px so that the token labels beside them stay readable.
   */
  function drawAttention() {
    if (!inside) return;
    const { n, attn, ids } = inside;
    const l = Number(el.attnLayer.value) || 0;
    const h = Number(el.attnHead.value) || 0;
    const a = attn[l];
    const c = el.attnCanvas;
    const size = Math.max(14, Math.floor(480 / n));
    c.width = c.height = size * n;
    const g = c.getContext('2d');
    g.fillStyle = '#ffffff';
    g.fillRect(0, 0, c.width, c.height);
    for (let q = 0; q < n; q++) {
      for (let k = 0; k <= q; k++) {
        const p = a[(h * n + q) * n + k];
        // Square root so that small weights stay visible next to a dominant one.
        const v = Math.round(255 * (1 - Math.sqrt(p)));
        g.fillStyle = `rgb(${v}, ${Math.round(v * 0.9 + 20)}, 255)`;
        g.fillRect(k * size, q * size, size, size);
      }
    }
    el.attnKeys.replaceChildren(...tokenLabels(ids, size));
    el.attnQueries.replaceChildren(...tokenLabels(ids, size));
    el.attnCanvas.dataset.cell = String(size);
  }

  function attentionReadout(e) {
    if (!inside) return;
    const c = el.attnCanvas;
    const r = c.getBoundingClientRect();
    const size = (r.width / inside.n);
    const k = Math.floor((e.clientX - r.left) / size);
    const q = Math.floor((e.clientY - r.top) / size);
    if (q < 0 || k < 0 || q >= inside.n || k >= inside.n) return;
    const l = Number(el.attnLayer.value) || 0;
    const h = Number(el.attnHead.value) || 0;
    const t = (i) => quoted(inside.text.get(inside.ids[i]));
    el.attnReadout.textContent = k > q
      ? `query ${q} ${t(q)} cannot see key ${k} ${t(k)} (a later token)`
      : `layer ${l} head ${h}: query ${q} ${t(q)} → key ${k} ${t(k)}: ${(100 * inside.attn[l][(h * inside.n + q) * inside.n + k]).toFixed(1)}%`;
  }

  /** Rows: the layers (0 = the embeddings, n_layer = the model's output); columns: positions. */
  function renderLens() {
    const { lens, ids, text: t } = inside;
    const table = cell('table', undefined, { class: 'grid lens' });
    const head = cell('tr');
    head.append(cell('th', 'layer \\ token', { class: 'corner' }), ...ids.map((id, i) =>
      cell('th', visible(t.get(id)), { text: t.get(id), title: `position ${i}: ${quoted(t.get(id))}` })));
    table.append(head);
    lens.top.forEach((layer, l) => {
      const label = l === 0 ? '0 embed' : l === lens.layers - 1 ? `${l} out` : String(l);
      const tr = cell('tr', undefined, { layer: String(l) });
      tr.append(cell('th', label, { title: l === 0 ? 'blocks.0.hook_resid_pre' : `after block ${l - 1}` }), ...layer.map((top, p) => {
        const [best] = top;
        const prob = Math.exp(best.logprob);
        const light = Math.round(97 - 55 * prob);
        const td = cell('td', visible(t.get(best.token)), {
          token: String(best.token), logprob: String(best.logprob),
          style: `background: hsl(212, 75%, ${light}%);${light < 62 ? ' color: #fff;' : ''}`,
        });
        td.title = `layer ${l}, after ${quoted(t.get(ids[p]))}: ` + top.map((e) => `${quoted(t.get(e.token))} ${pct(e.logprob)}`).join(', ');
        return td;
      }));
      table.append(tr);
    });
    el.lensGrid.replaceChildren(table);
  }

  function renderAblationGrid() {
    const { nLayer, nHead } = inside;
    const table = cell('table', undefined, { class: 'grid ablate' });
    const head = cell('tr');
    head.append(cell('th', 'layer \\ head', { class: 'corner' }), ...Array.from({ length: nHead }, (_, h) => cell('th', String(h))));
    table.append(head);
    for (let l = 0; l < nLayer; l++) {
      const tr = cell('tr');
      tr.append(cell('th', String(l)));
      for (let h = 0; h < nHead; h++) {
        const box = document.createElement('input');
        box.type = 'checkbox';
        box.dataset.layer = String(l);
        box.dataset.head = String(h);
        box.setAttribute('aria-label', `Zero layer ${l} head ${h}`);
        const td = cell('td');
        td.append(box);
        tr.append(td);
      }
      table.append(tr);
    }
    el.ablateGrid.replaceChildren(table);
    refresh();
  }

  function ablationHooks() {
    return [...el.ablateGrid.querySelectorAll('input:checked')].map((b) =>
      ({ at: `blocks.${b.dataset.layer}.attn.hook_z`, op: 'zero', head: Number(b.dataset.head) }));
  }

  function renderPreds(list, top) {
    list.replaceChildren(...top.map((e) => {
      const li = cell('li', undefined, { token: String(e.token), logit: String(e.logit), logprob: String(e.logprob) });
      li.append(cell('code', quoted(inside.text.get(e.token))), ` ${pct(e.logprob)} `, cell('span', `(logit ${e.logit.toFixed(3)})`, { class: 'muted' }));
      return li;
    }));
  }

  const ablate = () => task(null, async (m) => {
    if (!inside) return;
    const hooks = ablationHooks();
    el.ablateHooks.textContent = hooks.length ? `hooks: ${JSON.stringify(hooks)}` : 'No head ticked.';
    delete el.predAblated.dataset.hooks;
    if (!hooks.length) {
      el.predAblated.replaceChildren();
      return;
    }
    const r = await m.run(inside.ids, { hooks });
    const top = topNext(r.logits, inside.nVocab);
    await text(m, top.map((e) => e.token), inside.text);
    renderPreds(el.predAblated, top);
    // What the list shows, for the tests.
    el.predAblated.dataset.hooks = JSON.stringify(hooks);
  });

  // --- 4. activation patching ---------------------------------------------------------------

  const patch = () => task(el.patchStats, async (m) => {
    el.patchStats.textContent = 'patching…';
    const t0 = performance.now();
    const clean = await tokens(m, el.patchClean.value, 'The clean text');
    const corrupted = await tokens(m, el.patchCorrupted.value, 'The corrupted text');
    if (clean.ids.length !== corrupted.ids.length) {
      throw new GgwebError('invalid', `The clean and corrupted texts must have the same number of tokens; they have ` +
        `${clean.ids.length} and ${corrupted.ids.length}.`);
    }
    const answer = await oneToken(m, el.patchAnswer.value, 'The answer');
    const against = await oneToken(m, el.patchAgainst.value, 'The "against" token');
    const at = el.patchAt.value;
    const method = el.patchMethod.value;
    const names = await text(m, [...clean.ids, ...corrupted.ids], new Map());
    const ms = {};
    const sweep = async (how) => {
      const t = performance.now();
      const r = await m.patch(clean.ids, corrupted.ids, { at, answer, against, method: how });
      ms[how] = Math.round(performance.now() - t);
      return r;
    };
    const exact = method === 'attribution' ? null : await sweep('exact');
    const atp = method === 'exact' ? null : await sweep('attribution');
    el.patchExact.hidden = !exact;
    el.patchAtp.hidden = !atp;
    if (exact) renderPatch(exact, at, clean.ids, corrupted.ids, names, el.patchGrid, el.patchLegend);
    if (atp) renderPatch(atp, at, clean.ids, corrupted.ids, names, el.patchGridAtp, el.patchLegendAtp, true);
    const r = exact ?? atp;
    if (exact && atp) {
      const rho = spearman(exact.cells, atp.cells);
      el.patchCorr.dataset.rho = String(rho);
      el.patchCorr.textContent = `Rank correlation (Spearman ρ) of the two sweeps' cells: ${rho.toFixed(3)} over ` +
        `${exact.cells.length} cells · exact ${ms.exact} ms, attribution ${ms.attribution} ms`;
    } else {
      delete el.patchCorr.dataset.rho;
      el.patchCorr.textContent = '';
    }
    el.patchResult.hidden = false;
    el.patchStats.textContent = `${r.shape[0]} × ${r.shape[1]} cells · clean ${r.cleanDiff.toFixed(3)}, ` +
      `corrupted ${r.corruptedDiff.toFixed(3)} · ${Math.round(performance.now() - t0)} ms`;
  });

  /** Diverging: blue for positive, red for negative, white at 0, full at ±scale. */
  const diverging = (v, scale) => {
    const x = Math.max(-1, Math.min(1, scale > 0 ? v / scale : 0));
    return `hsl(${x >= 0 ? 215 : 5}, 80%, ${Math.round(100 - 48 * Math.abs(x))}%)`;
  };

  /**
   * Cells show the logit difference; the colour is its change from the corrupted run's (blue:
   * towards the answer, red: away from it), full at the largest change in the sweep.
   */
  function renderPatch(r, at, clean, corrupted, names, grid, legend, estimate = false) {
    const [rows, cols] = r.shape;
    const base = r.corruptedDiff;
    let scale = Math.abs(r.cleanDiff - base);
    for (const v of r.cells) scale = Math.max(scale, Math.abs(v - base));
    const table = cell('table', undefined, { class: 'grid patch', at });
    const head = cell('tr');
    head.append(cell('th', at === 'z' ? 'layer \\ head' : 'layer \\ token', { class: 'corner' }));
    for (let c = 0; c < cols; c++) {
      if (at === 'z') {
        head.append(cell('th', String(c)));
      } else {
        const a = names.get(clean[c]);
        const b = names.get(corrupted[c]);
        head.append(cell('th', a === b ? visible(a) : `${visible(a)}\n${visible(b)}`, {
          text: a, title: `position ${c}: clean ${quoted(a)}${a === b ? '' : `, corrupted ${quoted(b)}`}`,
          ...(a === b ? {} : { class: 'differs' }),
        }));
      }
    }
    table.append(head);
    for (let l = 0; l < rows; l++) {
      const tr = cell('tr');
      tr.append(cell('th', String(l)));
      for (let c = 0; c < cols; c++) {
        const v = r.cells[l * cols + c];
        const d = v - base;
        const td = cell('td', v.toFixed(2), {
          value: String(v), style: `background: ${diverging(d, scale)};${Math.abs(d) > 0.6 * scale ? ' color: #fff;' : ''}`,
        });
        td.title = `layer ${l}, ${at === 'z' ? `head ${c}` : `position ${c}`}: logit difference ${v.toFixed(4)} ` +
          `(${d >= 0 ? '+' : ''}${d.toFixed(4)} from the corrupted run)`;
        tr.append(td);
      }
      table.append(tr);
    }
    grid.replaceChildren(table);
    const bar = cell('span', undefined, { class: 'bar', style: `background: linear-gradient(to right, ${diverging(-scale, scale)}, #fff, ${diverging(scale, scale)})` });
    legend.replaceChildren(
      cell('span', (-scale).toFixed(3), { class: 'muted' }), bar, cell('span', `+${scale.toFixed(3)}`, { class: 'muted' }),
      cell('span', ` Each cell${estimate ? ' (a first-order estimate from one backward pass)' : ''}: logit(answer) − logit(against) of the corrupted run with that ${at === 'z' ? 'head\'s output' : 'activation'} ` +
        `from the clean run; its colour, the change from the corrupted run's ${base.toFixed(3)} (clean run: ${r.cleanDiff.toFixed(3)}).`,
      { class: 'muted' }),
    );
  }

  // --- 5. steering ----------------------------------------------------------------------------

  const steerSource = () => document.querySelector('input[name="steer-source"]:checked').value;
  const strength = () => Number(el.steerStrength.value);

  /** The residual at the last token of `s`, at blocks.L.hook_resid_pre. */
  async function lastResidual(m, s, at) {
    const { ids } = await tokens(m, s, 'A steering prompt');
    const r = await m.run(ids, { capture: [at] });
    const { shape, data } = r.cache[at];
    return data.subarray((shape[0] - 1) * shape[1]);
  }

  /** { at, vec, what }: the unscaled steering vector and where it is added. */
  async function steerVector(m) {
    if (steerSource() === 'sae') {
      if (!sae || sae.owner !== m) throw new GgwebError('invalid', 'Load an SAE first (its folder URL), or pick the residual difference.');
      const i = Number(el.saeFeature.value);
      if (!Number.isInteger(i) || i < 0 || i >= sae.sae.dSae) {
        throw new GgwebError('invalid', `The SAE feature must be an integer in 0..${sae.sae.dSae - 1}, got ${el.saeFeature.value}.`);
      }
      return { at: sae.sae.hookName, vec: await sae.sae.decoderRow(i), what: `SAE feature ${i}` };
    }
    const at = `blocks.${Number(el.steerLayer.value) || 0}.hook_resid_pre`;
    const a = await lastResidual(m, el.steerA.value, at);
    const b = await lastResidual(m, el.steerB.value, at);
    const vec = new Float32Array(a.length);
    for (let i = 0; i < vec.length; i++) vec[i] = a[i] - b[i];
    return { at, vec, what: `${quoted(el.steerA.value)} − ${quoted(el.steerB.value)}` };
  }

  /** Streams a greedy generation into `box`; data-tokens holds the ids. */
  async function stream(m, ids, box, options) {
    box.textContent = '';
    const got = [];
    for await (const t of m.generate(ids, { ...options, temperature: 0 })) {
      got.push(t.token);
      box.textContent += t.text;
      box.dataset.tokens = got.join(',');
    }
    box.dataset.tokens = got.join(',');
    box.dataset.done = '1';
  }

  const steer = () => task(el.steerStats, async (m) => {
    for (const b of [el.steerPlain, el.steerOut]) {
      b.textContent = '';
      delete b.dataset.tokens;
      delete b.dataset.done;
    }
    el.steerStats.textContent = 'computing the vector…';
    const t0 = performance.now();
    const maxTokens = Number(el.steerMax.value);
    if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new GgwebError('invalid', `Max tokens must be a positive integer, got ${el.steerMax.value}.`);
    const { ids } = await tokens(m, el.steerPrompt.value, 'Steering');
    const { at, vec, what } = await steerVector(m);
    const s = strength();
    const value = vec.map((x) => x * s);
    let norm = 0;
    for (const x of value) norm += x * x;
    el.steerHooks.textContent = `hooks: [{ at: '${at}', op: 'add', value: ${what} × ${s} }] (norm ${Math.sqrt(norm).toFixed(3)})`;
    el.steerStats.textContent = 'generating without steering…';
    await stream(m, ids, el.steerPlain, { maxTokens });
    el.steerStats.textContent = 'generating with steering…';
    await stream(m, ids, el.steerOut, { maxTokens, hooks: [{ at, op: 'add', value }] });
    el.steerStats.textContent = `${maxTokens} tokens each, greedy · ${Math.round(performance.now() - t0)} ms`;
  });

  const loadSae = () => task(el.saeStatus, async (m) => {
    const url = el.saeUrl.value.trim();
    if (!url) throw new GgwebError('invalid', 'Enter the URL of an SAE folder (cfg.json and sae_weights.safetensors) first.');
    if (sae) {
      const old = sae;
      sae = null;
      if (old.owner === m) await old.sae.dispose();
    }
    el.saeStatus.textContent = 'loading…';
    // loadSae refuses an SAE made for another model (its d_in against its hook's width).
    const s = await m.loadSae(url.endsWith('/') ? url : `${url}/`);
    sae = { sae: s, owner: m };
    el.saeFeature.max = String(s.dSae - 1);
    document.querySelector('input[name="steer-source"][value="sae"]').checked = true;
    el.saeStatus.textContent = `loaded: ${s.dSae} features at ${s.hookName} (d_in ${s.dIn})`;
    el.saeStatus.dataset.hook = s.hookName;
  });

  // --- wiring -----------------------------------------------------------------------------

  el.insideBtn.addEventListener('click', lookInside);
  el.attnLayer.addEventListener('change', drawAttention);
  el.attnHead.addEventListener('change', drawAttention);
  el.attnCanvas.addEventListener('mousemove', attentionReadout);
  el.gltr.addEventListener('mouseover', (e) => {
    const i = e.target?.dataset?.i;
    if (inside && i !== undefined) el.tokenDetail.textContent = tokenDetail(Number(i));
  });
  el.ablateGrid.addEventListener('change', ablate);
  el.patchBtn.addEventListener('click', patch);
  el.salBtn.addEventListener('click', saliency);
  el.steerBtn.addEventListener('click', steer);
  el.saeLoadBtn.addEventListener('click', loadSae);
  el.steerStrength.addEventListener('input', () => { el.steerStrengthOut.textContent = el.steerStrength.value; });

  return {
    setEnabled(on) {
      enabled = on;
      refresh();
    },
    /** A new model: the layer choices follow it; an SAE of the old one is gone with it. */
    modelChanged() {
      const m = ctx.model();
      if (sae && sae.owner !== m) {
        sae = null;
        el.saeStatus.textContent = '(optional: a folder with cfg.json and sae_weights.safetensors)';
        delete el.saeStatus.dataset.hook;
      }
      const nLayer = m?.info().hparams?.nLayer ?? 1;
      fillSelect(el.steerLayer, nLayer, Math.floor(nLayer / 2));
    },
  };
}
