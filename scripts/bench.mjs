// npm run bench: ggweb, wllama and transformers.js side by side in one headless Chromium, on
// the same GPT-2-124M-shaped model (bench/make_models.sh), prompt (bench/prompt.txt, 64 GPT-2
// tokens) and 64 greedy tokens. Prints a table; writes JSON and markdown to tests/artifacts/bench/.
//
//   node scripts/bench.mjs                 # every row (models must exist: bash bench/make_models.sh)
//   node scripts/bench.mjs --update-md     # also rewrite the "Browser, side by side" part of BENCHMARKS.md
//   node scripts/bench.mjs --serve         # just serve the bench page (PORT=8090) to run rows by hand
//   BENCH_MODEL=/tests/fixtures/tiny-f16.gguf node scripts/bench.mjs
//                                          # one ggweb row on any model the server has (web/, /tests/fixtures/,
//                                          # /shared-models/ = tests/fixtures/llamacpp, /dot-models/ = .models/) or a
//                                          # full URL; prints one JSON line (BENCH_BACKEND=cpu|webgpu)
//
// Environment:
//   BENCH_ONLY=regex       rows whose key (runtime/dtype/threads/backend, e.g. "wllama/q8_0/t2/cpu") matches
//   BENCH_THREADS=1,2      CPU thread counts, for ggweb (nThreads: web/pkg-threads above 1) and the peers
//   BENCH_REPS=3           timed generations per row (prefill and decode: each its own median)
//   BENCH_TOKENS=64        tokens generated per timed run
//   BENCH_WEBGPU=auto|1|0  ggweb webgpu rows: auto = only on a real (non-fallback) adapter
//   BENCH_GGWEB_WEB=dir    serve ggweb's JS + pkg/ from another folder (default web/)
//   BENCH_ROW_TIMEOUT_S    per-row limit (default 600)
//   BENCH_RELAXED=0        ggweb on its plain builds (relaxedSimd: false) instead of the relaxed-SIMD ones
//   BENCH_RETRIES=2        a failed row is run again (fresh page) this many times; tries are reported
//   BENCH_PAIRS=3          after the table, per thread count: ggweb's best (Q8_0/Q4_0) and the best peer row,
//                          alternately this many times each (scripts/bench-paired.mjs); 0: no pairing
//   BENCH_TJS_MODEL=dir    transformers.js rows on another folder of .models/ (default gpt2-124m-onnx)
//   BENCH_TJS_WASMPATHS=json  transformers.js's env.backends.onnx.wasm.wasmPaths instead of the dist folder
//                          (another ORT build: '{"mjs":"/node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.jsep.mjs","wasm":...}')
//   CHROMIUM=path          browser binary (default /usr/bin/chromium)
//   BENCH_SECTIONS=rows,depth,nseq,load,train   which parts run: the side-by-side rows, ggweb's decode at
//                          context depths, 4 sequences per step against 1, ggweb's load against the
//                          page's raw fetch, training tokens/s in Chromium against native (bench/README.md)
//   BENCH_SEQS=4  BENCH_SEQ_TOKENS=32  BENCH_SEQ_REPS=5   the nseq section (dtypes: BENCH_DEPTH_DTYPES)
//   BENCH_DEPTHS=64,512,1000  BENCH_DEPTH_TOKENS=16  BENCH_DEPTH_DTYPES=q8_0  BENCH_DEPTH_KV=f32,f16
//   BENCH_LOAD_MODELS=/models/124m-q8_0.gguf,...   model URLs (paths on this server) for the load rows
//   BENCH_LOAD_RATES=0,100   the load rows over loopback (0) and a server pacing the file to N MB/s
//   BENCH_SECTIONS=native    (not in the default set) Chromium against `ggweb bench` (target/release)
//                          on the same file and ids, interleaved rounds (issue #38): BENCH_NATIVE_MODELS
//                          (files in .models/, default llama-124m-q8_0.gguf,llama-124m-q4_k_m.gguf),
//                          BENCH_NATIVE_ROUNDS=3, BENCH_NATIVE_BUILDS=relaxed,plain, BENCH_NATIVE_THREADS=1,
//                          BENCH_NATIVE_BIN=target/release/ggweb
//   BENCH_TRAIN_SEQ_LEN=128  BENCH_TRAIN_BATCH=4  BENCH_TRAIN_STEPS=3  BENCH_TRAIN_PAIRS=2  BENCH_TRAIN_LORA=8
//                          the train section; BENCH_GGWEB_BIN: the native binary (default target/release/ggweb)
import { chromium } from 'playwright-core';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpus, loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { findModelsDir, startServer } from './serve.mjs';
import { pairedSection, pairedText, pickPair, runPairs } from './bench-paired.mjs';
import { depthTable, loadTable, nativeTable, runDepthRows, runLoadRows, runNativeRows, runSeqRows, runTrainRows, seqTable, trainTable } from './bench-ggweb.mjs';

const gpt2Decode = createRequire(import.meta.url)('gpt-3-encoder').decode;

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const MODELS = join(ROOT, '.models');
const OUT = join(ROOT, 'tests', 'artifacts', 'bench');
const args = new Set(process.argv.slice(2));
const env = process.env;

const TOKENS = Number(env.BENCH_TOKENS ?? 64);
const REPS = Number(env.BENCH_REPS ?? 3);
const THREADS = (env.BENCH_THREADS ?? '1,2').split(',').map(Number).filter((n) => n > 0);
const RETRIES = Number(env.BENCH_RETRIES ?? 2);
const PAIRS = Number(env.BENCH_PAIRS ?? 3);
const ROW_TIMEOUT_MS = Number(env.BENCH_ROW_TIMEOUT_S ?? 600) * 1000;
const GGWEB_WEB = resolve(env.BENCH_GGWEB_WEB ?? join(ROOT, 'web'));
const TJS_MODEL = env.BENCH_TJS_MODEL ?? 'gpt2-124m-onnx';
const SECTIONS = new Set((env.BENCH_SECTIONS ?? 'rows,depth,nseq,load,train').split(','));

// dtype classes line rows up for the ratio columns: each peer row is compared with ggweb's row
// of the same class. transformers.js's quantizations are not ggml's block formats (see BENCHMARKS.md).
const GGUF = [
  { dtype: 'f32', cls: 'f32' },
  { dtype: 'f16', cls: 'f16' },
  { dtype: 'q8_0', cls: '8-bit' },
  { dtype: 'q4_0', cls: '4-bit' },
];
// transformers.js files as its docs make them (bench/export_onnx.py): the stock optimum-cli export,
// then transformers.js's own q8 / q4 quantization recipes; `how` is the table's note.
const ONNX = [
  { dtype: 'fp32', cls: 'f32', file: 'model.onnx', how: 'stock optimum-cli export' },
  { dtype: 'q8', cls: '8-bit', file: 'model_quantized.onnx', how: 'stock export + tjs q8 recipe' },
  { dtype: 'q4', cls: '4-bit', file: 'model_q4.onnx', how: 'stock export + tjs q4 recipe' },
];

const mounts = [
  ['/bench/', join(ROOT, 'bench')],
  ['/node_modules/', join(ROOT, 'bench', 'node_modules')], // the peers: bench/package.json
  ['/models/', MODELS],
  ['/dot-models/', MODELS],
  ['/ggweb/', GGWEB_WEB],
];
const shared = findModelsDir();
if (shared) mounts.push(['/shared-models/', shared]);

if (args.has('--serve')) {
  const s = await startServer({ port: Number(env.PORT ?? 8090), mounts, quiet: !env.VERBOSE });
  console.log(`bench page: ${s.url}bench/  (Ctrl-C to stop)`);
  await new Promise(() => {});
}

function rows(webgpu) {
  const out = [];
  const backends = ['cpu'];
  const wantGpu = env.BENCH_WEBGPU ?? 'auto';
  if (wantGpu === '1' ? !!webgpu : wantGpu === 'auto' && webgpu && !webgpu.fallback) backends.push('webgpu');
  const gguf = GGUF.filter((g) => existsSync(join(MODELS, `124m-${g.dtype}.gguf`)));
  for (const backend of backends) {
    for (const t of backend === 'cpu' ? THREADS : [1]) {
      for (const g of gguf) {
        out.push({ runtime: 'ggweb', dtype: g.dtype, cls: g.cls, threads: t, backend, model: `/models/124m-${g.dtype}.gguf` });
      }
    }
  }
  for (const t of THREADS) {
    for (const g of gguf) {
      out.push({ runtime: 'wllama', dtype: g.dtype, cls: g.cls, threads: t, backend: 'cpu', model: `/models/124m-${g.dtype}.gguf`, how: 'README setup, its one wllama.wasm' });
    }
  }
  for (const t of THREADS) {
    for (const o of ONNX) {
      if (!existsSync(join(MODELS, TJS_MODEL, 'onnx', o.file))) continue;
      out.push({ runtime: 'transformers', dtype: o.dtype, cls: o.cls, threads: t, backend: 'wasm', model: TJS_MODEL, how: o.how });
    }
  }
  for (const r of out) r.key = `${r.runtime}/${r.dtype}/t${r.threads}/${r.backend}`;
  if (env.BENCH_MODEL) {
    const backend = env.BENCH_BACKEND ?? 'cpu';
    const ts = env.BENCH_THREADS ? THREADS : [1];
    return ts.map((t) => ({ runtime: 'ggweb', dtype: '?', cls: '?', threads: t, backend, model: env.BENCH_MODEL, key: `ggweb/${env.BENCH_MODEL}/t${t}/${backend}` }));
  }
  const only = env.BENCH_ONLY ? new RegExp(env.BENCH_ONLY) : null;
  return only ? out.filter((r) => only.test(r.key)) : out;
}

function withTimeout(p, ms, what) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`${what}: no result after ${ms / 1000} s`)), ms); }),
  ]);
}

const fmt = (x, d = 1) => (x == null || !Number.isFinite(x) ? '—' : x.toFixed(d));

/** Tokens agreeing with PyTorch's greedy ids (F32, EOS masked) before the first difference.
 *  By id where the runtime reports ids; else (wllama's stream gives text) the longest run of
 *  reference tokens whose decoded text starts the generated text. */
function matchHf(r, ref) {
  if (!ref) return null;
  if (r.ids && r.ids.every((id) => id >= 0)) {
    let n = 0;
    while (n < r.ids.length && n < ref.length && r.ids[n] === ref[n]) n++;
    return n;
  }
  if (typeof r.text !== 'string') return null;
  let n = 0;
  for (let k = 1; k <= ref.length; k++) {
    const s = gpt2Decode(ref.slice(0, k));
    if (s.endsWith('\uFFFD')) continue; // a character split across tokens
    if (!r.text.startsWith(s)) break;
    n = k;
  }
  return n;
}

/** How the row ran, for the table's last column (bench/README.md "What runs" has the details). */
function howRun(r) {
  if (r.runtime === 'ggweb') return r.build ? `${r.build} build, worker` : 'worker';
  // transformers.js: the ORT wasm file the page fetched (ort-wasm-simd-threaded.asyncify.wasm: "asyncify").
  const ort = r.ortWasm ? ` · ORT ${r.ortWasm.replace(/^ort-wasm-simd-threaded\.?|\.?wasm$/g, '') || 'plain'} build` : '';
  return `${r.how ?? ''}${ort}`;
}

function table(results) {
  const base = {};
  // Each peer row against ggweb's CPU row of the same width class and thread count.
  for (const r of results) if (r.runtime === 'ggweb' && r.backend === 'cpu' && r.ok) base[`${r.cls}/t${r.threads}`] = r;
  const head = ['runtime', 'backend', 'dtype', 'threads', 'load s', 'prefill tok/s', 'decode tok/s',
    'prefill vs ggweb', 'decode vs ggweb', `prompt ms #1 / #${REPS + 1}`, `= HF greedy (of ${TOKENS})`, 'run as'];
  const lines = [head];
  for (const r of results) {
    if (!r.ok) {
      lines.push([r.runtime, r.backend, r.dtype, String(r.threads), '—', '—', '—', '—', '—', '—',
        `error${r.tries > 1 ? ` (${r.tries} tries)` : ''}: ${r.error}`.slice(0, 160), howRun(r)]);
      continue;
    }
    const b = base[`${r.cls}/t${r.threads}`];
    const ratio = (x, y) => (b && b !== r ? `${fmt(x / y, 2)}×` : '');
    lines.push([
      r.runtime, r.backend, r.dtype, String(r.threads), fmt(r.loadMs / 1000, 2), fmt(r.prefillTps), fmt(r.decodeTps),
      b ? ratio(r.prefillTps, b.prefillTps) : '—', b ? ratio(r.decodeTps, b.decodeTps) : '—',
      // The first generation after load against the last (V8's tiers: BENCHMARKS.md).
      r.firstTtftMs != null ? `${fmt(r.firstTtftMs, 0)} / ${fmt(r.lastTtftMs, 0)} (${fmt(r.firstTtftMs / r.lastTtftMs, 2)}×)` : '—',
      (r.hfMatch == null ? '—' : `${r.hfMatch}${r.tokens !== TOKENS ? ` (${r.tokens} made)` : ''}`) +
        (r.tries > 1 ? ` · try ${r.tries}` : ''),
      howRun(r),
    ]);
  }
  const w = head.map((_, i) => Math.max(...lines.map((l) => l[i].length)));
  const md = lines.map((l, i) => {
    const row = `| ${l.map((c, j) => c.padEnd(w[j])).join(' | ')} |`;
    return i === 0 ? `${row}\n|${w.map((n, j) => (j >= 3 && j <= 9 ? '-'.repeat(n + 1) + ':' : '-'.repeat(n + 2))).join('|')}|` : row;
  });
  return md.join('\n');
}

function mdSection(meta, results) {
  return [
    `Measured ${meta.date} by \`npm run bench\` (scripts/bench.mjs): ${meta.browser}, headless, on ${meta.machine}.`,
    `Model: the seeded GPT-2-124M-shaped model of tests/fixtures/make_fixtures.py (GGUF for ggweb and wllama,`,
    `its ONNX export for transformers.js; bench/make_models.sh). Prompt: bench/prompt.txt (${meta.promptTokens} tokens),`,
    `then ${TOKENS} greedy tokens; medians of ${REPS} timed runs after a warm-up (prefill and decode each).`,
    `"prompt ms #1 / #${REPS + 1}": time to the first token of the warm-up run (the first generation after load)`,
    `and of the last timed run; ggweb's timed runs evaluate the whole prompt (its prompt cache is emptied first).`,
    `"run as": each peer as its own docs set it up, local files only (bench/README.md); ggweb: the wasm build it picked.`,
    '',
    table(results),
    '',
  ].join('\n');
}

async function main() {
  const hfInfoPath = join(MODELS, 'gpt2-124m-hf', 'ggweb-bench.json');
  const missing = [...GGUF.map((g) => `124m-${g.dtype}.gguf`), ...ONNX.map((o) => `${TJS_MODEL}/onnx/${o.file}`)]
    .filter((f) => !existsSync(join(MODELS, f)));
  if (missing.length && !env.BENCH_MODEL) console.error(`bench: skipping rows without .models/{${missing.join(', ')}} (bash bench/make_models.sh makes them)`);
  const hfInfo = !env.BENCH_MODEL && existsSync(hfInfoPath) ? JSON.parse(readFileSync(hfInfoPath, 'utf8')) : null;
  const prompt = env.BENCH_PROMPT ?? readFileSync(join(ROOT, 'bench', 'prompt.txt'), 'utf8');
  const nCtx = env.BENCH_MODEL ? (env.BENCH_NCTX ? Number(env.BENCH_NCTX) : undefined) : 256;

  const server = await startServer({ port: 0, mounts });
  const launch = () => chromium.launch({
    executablePath: env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--headless=new', '--enable-unsafe-webgpu', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
      '--disable-default-apps', '--disable-extensions'],
  });
  let browser = await launch();
  const browserVersion = browser.version();
  mkdirSync(OUT, { recursive: true });
  const consoleLog = [];
  const results = [];
  const paired = [];
  const depthResults = [];
  const seqResults = [];
  const loadResults = [];
  const nativeResults = [];
  const trainResults = [];
  let probeInfo;
  try {
    const open = async () => {
      // A crashed browser (out of memory, killed) costs the row it happened in, not the run.
      if (!browser.isConnected()) {
        console.log('  (the browser went away; starting a new one)');
        browser = await launch();
      }
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      page.on('console', (m) => consoleLog.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => consoleLog.push(`[pageerror] ${e.message}`));
      await page.goto(`${server.url}bench/index.html`);
      await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 60000 });
      return { ctx, page };
    };
    {
      const { ctx, page } = await open();
      probeInfo = await page.evaluate(() => window.bench.probe());
      await ctx.close();
    }
    if (!probeInfo.crossOriginIsolated) throw new Error('the bench page is not cross-origin isolated: wasm threads would not run');
    const list = SECTIONS.has('rows') || env.BENCH_MODEL ? rows(probeInfo.webgpu) : [];
    if (!list.length && (env.BENCH_MODEL || !['depth', 'nseq', 'load', 'native', 'train'].some((x) => SECTIONS.has(x)))) {
      throw new Error('no rows to run (models missing, or BENCH_ONLY matches none)');
    }
    console.log(`bench: ${list.length} rows, ${REPS} reps x ${TOKENS} tokens; Chromium ${browserVersion}; ` +
      `WebGPU: ${probeInfo.webgpu ? `${probeInfo.webgpu.description || probeInfo.webgpu.vendor}${probeInfo.webgpu.fallback ? ' (fallback adapter)' : ''}` : 'none'}`);
    /** One row in a fresh page (retried on failure), with the derived rates; logs one line. */
    const runRow = async (row) => {
      const t0 = Date.now();
      let r;
      const errors = [];
      for (let attempt = 0; attempt <= RETRIES; attempt++) {
        let ctx;
        try {
          const o = await open();
          ctx = o.ctx;
          r = await withTimeout(o.page.evaluate((cfg) => window.bench.run(cfg), { ...row, prompt, tokens: TOKENS, reps: REPS, nCtx, relaxedSimd: env.BENCH_RELAXED !== '0', tjsWasmPaths: env.BENCH_TJS_WASMPATHS ? JSON.parse(env.BENCH_TJS_WASMPATHS) : undefined }),
            ROW_TIMEOUT_MS, row.key);
        } catch (e) {
          r = { ok: false, error: e.message.split('\n')[0] };
        } finally {
          await ctx?.close().catch(() => {});
        }
        if (r.ok) break;
        errors.push(r.error);
        if (errors.length >= 2 && errors.at(-1) === errors.at(-2)) break; // deterministic: stop trying
        if (attempt < RETRIES) console.log(`  ${row.key.padEnd(26)} failed (${r.error}); again in a fresh page`);
      }
      r = { ...row, ...r, tries: errors.length + (r.ok ? 1 : 0), failedTries: errors };
      if (r.ok) {
        r.prefillTps = r.promptTokens / (r.ttftMs / 1000);
        r.decodeTps = (r.tokens - 1) / (r.decodeMs / 1000);
        r.hfMatch = matchHf(r, hfInfo?.greedy_ids?.slice(0, TOKENS));
        r.build = r.threadInfo?.build ?? r.build; // ggweb: the wasm build that ran
        if (r.promptTokens !== hfInfo?.prompt_ids?.length) r.note = `prompt was ${r.promptTokens} tokens`;
        const reused = [r.firstStats, ...(r.internal ?? [])].map((st) => st?.cachedTokens).filter((n) => n > 0);
        if (reused.length) r.note = `${r.note ? `${r.note}; ` : ''}prompt cache reused ${reused.join(', ')} tokens`;
      }
      const s = r.ok
        ? `load ${fmt(r.loadMs / 1000, 2)} s, prefill ${fmt(r.prefillTps)} tok/s (${r.promptTokens} tok), decode ${fmt(r.decodeTps)} tok/s (${r.tokens} tok), = HF ${r.hfMatch ?? '?'}` +
          (r.firstTtftMs != null ? `, prompt #1 ${fmt(r.firstTtftMs, 0)} ms vs #${REPS + 1} ${fmt(r.lastTtftMs, 0)} ms (${fmt(r.firstTtftMs / r.lastTtftMs, 2)}×)` : '')
        : `error: ${r.error}`;
      console.log(`  ${row.key.padEnd(26)} ${s}  [${((Date.now() - t0) / 1000).toFixed(0)} s]`);
      return r;
    };
    for (const row of list) results.push(await runRow(row));
    if (PAIRS > 0 && !env.BENCH_MODEL) {
      for (const t of THREADS) {
        const pick = pickPair(results, t);
        if (pick.why) { paired.push({ threads: t, why: pick.why }); continue; }
        console.log(`bench: pairing at ${t} thread${t > 1 ? 's' : ''}: ${pick.ggweb.key} vs ${pick.peer.key}, ${PAIRS} pairs`);
        paired.push(await runPairs(pick, PAIRS, runRow));
      }
    }
    const extraCfg = { root: ROOT, models: MODELS, mounts, relaxedSimd: env.BENCH_RELAXED !== '0', timeoutMs: ROW_TIMEOUT_MS };
    if (!env.BENCH_MODEL && SECTIONS.has('depth')) depthResults.push(...(await runDepthRows(open, extraCfg)));
    if (!env.BENCH_MODEL && SECTIONS.has('nseq')) seqResults.push(...(await runSeqRows(open, extraCfg)));
    if (!env.BENCH_MODEL && SECTIONS.has('load')) loadResults.push(...(await runLoadRows(extraCfg)));
    if (!env.BENCH_MODEL && SECTIONS.has('native')) nativeResults.push(...(await runNativeRows(open, extraCfg)));
    if (!env.BENCH_MODEL && SECTIONS.has('train')) trainResults.push(...(await runTrainRows(open, extraCfg)));
  } finally {
    await browser.close().catch(() => {});
    await server.close();
    writeFileSync(join(OUT, 'console.log'), consoleLog.join('\n') + '\n');
  }

  if (env.BENCH_MODEL) {
    const r = results[0];
    const out = r.ok
      ? { ok: true, model: r.model, backend: r.backend, loadMs: Math.round(r.loadMs), promptTokens: r.promptTokens,
        promptTokPerS: +r.prefillTps.toFixed(1), tokens: r.tokens, genTokPerS: +r.decodeTps.toFixed(1), browser: browserVersion }
      : { ok: false, model: r.model, error: r.error };
    console.log(JSON.stringify(out));
    process.exit(r.ok ? 0 : 1);
  }
  const meta = {
    date: new Date().toISOString().slice(0, 10),
    browser: `Chromium ${browserVersion}`,
    machine: env.BENCH_MACHINE ??
      `${cpus().length} cores (${cpus()[0]?.model?.trim() ?? 'unknown CPU'}), load average ${loadavg()[0].toFixed(1)} at the start`,
    promptTokens: hfInfo?.prompt_ids?.length ?? '?',
    probe: probeInfo,
  };
  const extraMd = [depthTable(depthResults), seqTable(seqResults, meta), loadTable(loadResults), nativeTable(nativeResults), trainTable(trainResults)].filter(Boolean).join('\n');
  const rowsMd = results.length ? mdSection(meta, results) : '';
  const md = rowsMd + (extraMd ? `\n${extraMd}` : '');
  const pairedMd = paired.length ? pairedSection({ ...meta, reps: REPS }, paired) : null;
  writeFileSync(join(OUT, 'results.json'), JSON.stringify({ meta, results, paired, depthResults, seqResults, loadResults, nativeResults, trainResults }, null, 1) + '\n');
  writeFileSync(join(OUT, 'results.md'), md + (pairedMd ? `\n${pairedMd}` : ''));
  if (results.length) console.log('\n' + table(results) + '\n');
  if (extraMd) console.log('\n' + extraMd);
  if (results.length) console.log(`"vs ggweb": this row's tok/s ÷ ggweb cpu's at the same dtype class (>1: faster than ggweb).`);
  if (paired.length) console.log(`\npaired (decode, ggweb ÷ peer):\n${pairedText(paired)}\n`);
  console.log(`wrote ${join(OUT, 'results.json')} and results.md`);
  if (args.has('--update-md')) {
    if (results.length) updateMd(md);
    if (pairedMd) updateMd(pairedMd, PAIRED_MARKS);
  }
  const nativeOk = nativeResults.some((r) => r.rounds.some((x) => Object.values(x).some((b) => b?.ok)));
  if (![...results, ...depthResults, ...seqResults, ...loadResults, ...trainResults].some((r) => r.ok) && !nativeOk) process.exit(1);
}

const BROWSER_MARKS = {
  start: '<!-- bench:browser:start (scripts/bench.mjs --update-md writes between these lines) -->',
  end: '<!-- bench:browser:end -->',
  heading: 'Browser, side by side',
};
const PAIRED_MARKS = {
  start: '<!-- bench:paired:start (scripts/bench.mjs --update-md writes between these lines) -->',
  end: '<!-- bench:paired:end -->',
  heading: 'Browser, paired runs against the best peer',
};

function updateMd(section, { start, end, heading } = BROWSER_MARKS) {
  const path = join(ROOT, 'BENCHMARKS.md');
  let text = existsSync(path) ? readFileSync(path, 'utf8') : '# Benchmarks\n';
  const block = `${start}\n${section}${end}`;
  const a = text.indexOf(start);
  const b = text.indexOf(end);
  if (a >= 0 && b > a) {
    text = text.slice(0, a) + block + text.slice(b + end.length);
  } else {
    text = text.replace(/\n*$/, '\n\n') + `## ${heading}\n\n${block}\n`;
  }
  writeFileSync(path, text);
  console.log(`updated ${path}`);
}

await main();
