// ggweb-only sections of `npm run bench` (scripts/bench.mjs), each with its own table:
//   depth: decode tok/s after 64 / 512 / 1000 tokens of context, F32 and F16 KV cache
//          (issue #18; bench/runners.js ggwebDepths)
//   load:  Model.load of a URL against the same page's raw fetch of that file, then reloads
//          from the HTTP cache and from the Cache API (issue #17; bench/runners.js loadStep)
//   nseq:  a decode step of 4 sequences (`generate(ids, { n: 4 })`) against one of a single
//          sequence, 1 thread (issue #26; bench/runners.js ggwebSeqs)
//   native: the browser's decode against native's on the same file and the same fixed ids
//          (issue #38 item 1): per round, `ggweb bench` (target/release) then the Chromium row
//          of each build (relaxed, plain), rounds interleaved; the ratio is Chromium ÷ native
//          per round (bench/runners.js ggwebNative)
//   train: AdamW training tokens/s of the 124M shape (seqLen 128, batch 4, 1 thread), full on
//          the F32 file and LoRA on Q8_0, in Chromium (`model.train`) alternating with native
//          `ggweb bench --train` on the same file when a release binary is there (issue #38 item 5;
//          bench/runners.js ggwebTrain; PyTorch's side: bench/train_compare.py)
import { chromium } from 'playwright-core';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from './serve.mjs';

const env = process.env;
const list = (v, d) => (v ?? d).split(',').map((x) => x.trim()).filter(Boolean);
const fmt = (x, d = 1) => (x == null || !Number.isFinite(x) ? '—' : x.toFixed(d));

const DEPTHS = list(env.BENCH_DEPTHS, '64,512,1000').map(Number);
const DEPTH_TOKENS = Number(env.BENCH_DEPTH_TOKENS ?? 16);
const DEPTH_REPS = Number(env.BENCH_REPS ?? 3);
const DEPTH_DTYPES = list(env.BENCH_DEPTH_DTYPES, 'q8_0');
const DEPTH_KV = list(env.BENCH_DEPTH_KV, 'f32,f16');
const LOAD_MODELS = list(env.BENCH_LOAD_MODELS, '/models/124m-q8_0.gguf');
// The link the load rows run over: 0 is loopback as fast as it goes (on 2 cores the server and
// the browser's network service then take the CPU the loader needs), N a server sending at
// N MB/s, as a download over a real network is paced.
const LOAD_RATES = list(env.BENCH_LOAD_RATES, '0,100').map(Number);

const TRAIN_SEQ_LEN = Number(env.BENCH_TRAIN_SEQ_LEN ?? 128);
const TRAIN_BATCH = Number(env.BENCH_TRAIN_BATCH ?? 4);
const TRAIN_STEPS = Number(env.BENCH_TRAIN_STEPS ?? 3);
const TRAIN_PAIRS = Number(env.BENCH_TRAIN_PAIRS ?? 2);
const TRAIN_LORA = Number(env.BENCH_TRAIN_LORA ?? 8);

const SEQ_N = Number(env.BENCH_SEQS ?? 4);
const SEQ_TOKENS = Number(env.BENCH_SEQ_TOKENS ?? 32);
const SEQ_REPS = Number(env.BENCH_SEQ_REPS ?? 5);

const NATIVE_MODELS = list(env.BENCH_NATIVE_MODELS, 'llama-124m-q8_0.gguf,llama-124m-q4_k_m.gguf');
const NATIVE_ROUNDS = Number(env.BENCH_NATIVE_ROUNDS ?? 3);
const NATIVE_BUILDS = list(env.BENCH_NATIVE_BUILDS, 'relaxed,plain');
const NATIVE_THREADS = list(env.BENCH_NATIVE_THREADS, '1').map(Number);
// `ggweb bench`'s shape: 64 fixed ids, 64 decode steps, 3 reps per call, n_ctx 256.
const NATIVE_ARGS = { prompt: 64, tokens: 64, reps: Number(env.BENCH_REPS ?? 3), nCtx: 256, nBatch: 64 };

/** One runner call (bench/runners.js) in a fresh page from bench.mjs's `open()`, within the
 *  row time limit; a failure becomes { ok: false, error }. */
async function inFreshPage(open, cfg, key, args) {
  let ctx;
  try {
    const o = await open();
    ctx = o.ctx;
    return await withTimeout(o.page.evaluate((c) => window.bench.run(c), args), cfg.timeoutMs, key);
  } catch (e) {
    return { ok: false, error: e.message.split('\n')[0] };
  } finally {
    await ctx?.close().catch(() => {});
  }
}

function withTimeout(p, ms, what) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`${what}: no result after ${ms / 1000} s`)), ms); }),
  ]);
}

/** One row per dtype × KV type, each in a fresh page from `open()` (bench.mjs's). The
 *  context is the bench models' full 1024; the deepest depth + tokens must fit in it. */
export async function runDepthRows(open, cfg) {
  const out = [];
  for (const dtype of DEPTH_DTYPES) {
    const file = `124m-${dtype}.gguf`;
    if (!existsSync(join(cfg.models, file))) {
      console.log(`  depth ${dtype}: skipped, no .models/${file}`);
      continue;
    }
    for (const kvType of DEPTH_KV) {
      const row = { dtype, kvType, threads: 1, model: `/models/${file}`, depths: DEPTHS, tokens: DEPTH_TOKENS, nCtx: 1024 };
      const key = `ggweb-depth/${dtype}/kv-${kvType}`;
      const t0 = Date.now();
      let r = await inFreshPage(open, cfg, key, { runtime: 'ggwebDepths', ...row, reps: DEPTH_REPS, relaxedSimd: cfg.relaxedSimd });
      r = { ...row, ...r, key };
      out.push(r);
      const s = r.ok
        ? r.depths.map((d) => `n_past ${d.nPast}: ${fmt(d.decodeTps)} tok/s`).join(', ') +
          `; slowdown ${fmt(r.depths[0].decodeTps / r.depths.at(-1).decodeTps, 2)}×`
        : `error: ${r.error}`;
      console.log(`  ${key.padEnd(26)} ${s}  [${((Date.now() - t0) / 1000).toFixed(0)} s]`);
    }
  }
  return out;
}

export function depthTable(results) {
  if (!results.length) return '';
  const head = ['dtype', 'KV cache', 'threads', ...DEPTHS.map((d) => `n_past ${d} tok/s`), `slowdown at ${DEPTHS.at(-1)}`, 'spread (min–max over reps)'];
  const lines = [head.join(' | '), head.map((_, i) => (i >= 2 ? '--:' : '---')).join('|')];
  for (const r of results) {
    if (!r.ok) {
      lines.push([r.dtype, r.kvType, r.threads, ...DEPTHS.map(() => '—'), '—', `error: ${r.error}`.slice(0, 120)].join(' | '));
      continue;
    }
    const tps = r.depths.map((d) => d.decodeTps);
    const spread = r.depths.map((d) => {
      const xs = d.reps.map((x) => x.decodeTps);
      return `${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}`;
    }).join(' / ');
    lines.push([r.dtype.toUpperCase(), r.kvType.toUpperCase(), r.threads, ...tps.map((x) => fmt(x)), `${fmt(tps[0] / tps.at(-1), 2)}×`, spread].join(' | '));
  }
  return [
    `Decode against context depth (ggweb, CPU, 1 thread, n_ctx 1024): per depth, ${DEPTH_TOKENS} greedy tokens after`,
    `that many fixed prompt ids (\`ggweb bench\`'s), medians of ${DEPTH_REPS} (the bench models' n_ctx is 1024, so ${DEPTHS.at(-1)} + ${DEPTH_TOKENS} must fit).`,
    '',
    ...lines.map((l) => `| ${l} |`),
    '',
  ].join('\n');
}

/** Per model URL: a fresh browser profile on disk (a user's HTTP disk cache and Cache API
 *  storage, not an incognito context's in-memory ones) and its own server, which sends
 *  ETag / Last-Modified and counts the bytes it sent for each step. Steps, in one page:
 *  raw fetch (no-store: the response is not cached), Model.load, raw fetch again, Model.load
 *  again (served by the HTTP cache if the browser kept the file), then Model.load with
 *  `cache` twice (the first stores into the Cache API, the second reads from it). */
export async function runLoadRows(cfg) {
  const out = [];
  for (const rate of LOAD_RATES) out.push(...(await loadRowsAt(cfg, rate)));
  return out;
}

async function loadRowsAt(cfg, rate) {
  const out = [];
  const served = { bytes: 0, statuses: [] };
  const server = await startServer({
    port: 0, mounts: cfg.mounts, validators: true, rateMBps: rate,
    onServe: (path, status, bytes) => {
      if (!/\.gguf$/.test(path)) return;
      served.bytes += bytes;
      served.statuses.push(status);
    },
  });
  const link = rate > 0 ? `${rate} MB/s` : 'loopback';
  try {
    for (const model of LOAD_MODELS) {
      const dir = mkdtempSync(join(tmpdir(), 'ggweb-bench-profile-'));
      const key = `ggweb-load/${model} (${link})`;
      const t0 = Date.now();
      let r;
      let ctx;
      try {
        ctx = await chromium.launchPersistentContext(dir, {
          executablePath: env.CHROMIUM ?? '/usr/bin/chromium',
          headless: true,
          args: ['--no-sandbox', '--headless=new', '--disable-dev-shm-usage', '--disable-background-networking',
            '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-default-apps', '--disable-extensions'],
        });
        const page = ctx.pages()[0] ?? (await ctx.newPage());
        await page.goto(`${server.url}bench/index.html`);
        await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 60000 });
        const step = async (name, s) => {
          served.bytes = 0;
          served.statuses = [];
          const res = await withTimeout(page.evaluate((x) => window.bench.loadStep(x), { url: model, relaxedSimd: cfg.relaxedSimd, ...s }),
            cfg.timeoutMs, `${key} ${name}`);
          return { name, ...res, servedBytes: served.bytes, statuses: [...served.statuses] };
        };
        const steps = [
          await step('fetch', { kind: 'fetch' }),
          await step('load', { kind: 'load' }),
          await step('fetch2', { kind: 'fetch' }),
          await step('reload-http', { kind: 'load' }),
          await step('load-cacheapi-store', { kind: 'load', cache: 'ggweb-bench' }),
          await step('reload-cacheapi', { kind: 'load', cache: 'ggweb-bench' }),
        ];
        r = { ok: true, steps };
      } catch (e) {
        r = { ok: false, error: e.message.split('\n')[0] };
      } finally {
        await ctx?.close().catch(() => {});
        rmSync(dir, { recursive: true, force: true });
      }
      r = { model, link, key, ...r };
      out.push(r);
      const by = (n) => r.steps?.find((x) => x.name === n);
      const s = r.ok
        ? `fetch ${fmt(by('fetch').ms, 0)} / ${fmt(by('fetch2').ms, 0)} ms, load ${fmt(by('load').ms, 0)} ms ` +
          `(${fmt(by('load').ms / Math.min(by('fetch').ms, by('fetch2').ms), 2)}× fetch), HTTP-cache reload ${fmt(by('reload-http').ms, 0)} ms ` +
          `(${fmt(by('reload-http').servedBytes / 1e6, 1)} MB sent), Cache API reload ${fmt(by('reload-cacheapi').ms, 0)} ms (via ${by('reload-cacheapi').via})`
        : `error: ${r.error}`;
      console.log(`  ${key.padEnd(26)} ${s}  [${((Date.now() - t0) / 1000).toFixed(0)} s]`);
      if (r.ok) console.log(`  ${''.padEnd(26)} first load: engine ${fmt(by('load').engineMs, 0)} ms = ${phasesCell(by('load').phases)}`);
    }
  } finally {
    await server.close();
  }
  return out;
}

/** info().load.phases of a load step, in one cell: where the engine's time went. */
const phasesCell = (p) => (p
  ? `wasm ${fmt(p.wasmMs, 0)}, open ${fmt(p.openMs, 0)}, read wait ${fmt(p.readWaitMs, 0)}, feed ${fmt(p.feedMs, 0)} (${p.chunks} chunks), ` +
    `warm-up ${fmt(p.warmMs, 0)}, gc wait ${fmt(p.gcWaitMs ?? 0, 0)}, build ${fmt(p.buildMs, 0)}, threads ${fmt(p.threadsMs, 0)}`
  : '—');

export function loadTable(results) {
  if (!results.length) return '';
  const head = ['model', 'link', 'MB', 'raw fetch ms (1st / 2nd)', 'Model.load ms', 'load ÷ fetch', 'reload, HTTP cache: ms (MB sent, status)',
    'load with cache (stores) ms', 'reload, Cache API ms', 'Cache API reload ÷ fetch', 'first load, engine phases ms'];
  const lines = [head.join(' | '), head.map((_, i) => (i >= 2 ? '--:' : '---')).join('|')];
  for (const r of results) {
    if (!r.ok) {
      lines.push([r.model, r.link, ...head.slice(2).map(() => '—')].join(' | ').replace(/—$/, `error: ${r.error}`.slice(0, 120)));
      continue;
    }
    const by = (n) => r.steps.find((x) => x.name === n);
    const f = Math.min(by('fetch').ms, by('fetch2').ms);
    const h = by('reload-http');
    lines.push([
      r.model, r.link, fmt(by('fetch').bytes / 1e6, 1), `${fmt(by('fetch').ms, 0)} / ${fmt(by('fetch2').ms, 0)}`, fmt(by('load').ms, 0),
      `${fmt(by('load').ms / f, 2)}×`, `${fmt(h.ms, 0)} (${fmt(h.servedBytes / 1e6, 1)}, ${[...new Set(h.statuses)].join('/')})`,
      fmt(by('load-cacheapi-store').ms, 0), `${fmt(by('reload-cacheapi').ms, 0)} (via ${by('reload-cacheapi').via})`,
      `${fmt(by('reload-cacheapi').ms / f, 2)}×`, phasesCell(by('load').phases),
    ].join(' | '));
  }
  return [
    'Load against transfer (ggweb, CPU, 1 thread, worker; one page of a fresh on-disk browser profile per model):',
    'raw fetch = `fetch(url, { cache: \'no-store\' })` + reading the whole body, before and after the first load;',
    'load ÷ fetch uses the faster fetch. The server sends ETag and `Cache-Control: no-cache`, so a copy the browser',
    'stored is revalidated (304) and read from its cache; "MB sent" shows whether it was. The phases are',
    'info().load.phases of the first load (the worker\'s own start is outside them). Link: loopback as fast as',
    'it goes, or the server pacing the file to N MB/s as a network would (BENCH_LOAD_RATES).',
    '',
    ...lines.map((l) => `| ${l} |`),
    '',
  ].join('\n');
}

/** One row per dtype (DEPTH_DTYPES), in a fresh page: interleaved pairs of a 1-sequence and
 *  an n-sequence generation, and the cost of an n-sequence step against a 1-sequence one. */
export async function runSeqRows(open, cfg) {
  const out = [];
  for (const dtype of DEPTH_DTYPES) {
    // The seeded bench models first, then llama.cpp's own quantizations (bench/make_llamacpp_quants.py:
    // Q4_K_M exists only there).
    const file = [`124m-${dtype}.gguf`, `bench-124m-${dtype}.gguf`, `llama-124m-${dtype}.gguf`].find((f) => existsSync(join(cfg.models, f)));
    if (!file) {
      console.log(`  nseq ${dtype}: skipped, no .models/124m-${dtype}.gguf`);
      continue;
    }
    const key = `ggweb-nseq/${dtype}/n${SEQ_N}`;
    let r = await inFreshPage(open, cfg, key, {
      runtime: 'ggwebSeqs', model: `/models/${file}`, threads: 1, n: SEQ_N, tokens: SEQ_TOKENS, reps: SEQ_REPS,
      nCtx: 64 + SEQ_N * (SEQ_TOKENS + 8) + 16, relaxedSimd: cfg.relaxedSimd,
    });
    r = { dtype, key, ...r };
    out.push(r);
    console.log(`  ${key.padEnd(26)} ${r.ok ? `${SEQ_N} sequences cost ${fmt(r.cost, 2)}× one per step` : `error: ${r.error}`}`);
  }
  return out;
}

/** `meta`: bench.mjs's run description; its machine line (the CPU model) and browser head the table. */
export function seqTable(results, meta) {
  if (!results.length) return '';
  const lines = ['dtype | pair | 1 sequence, steps/s | ' + SEQ_N + ' sequences, steps/s | cost per step', '---|--:|--:|--:|--:'];
  for (const r of results) {
    if (!r.ok) { lines.push(`${r.dtype.toUpperCase()} | — | — | — | error: ${String(r.error).slice(0, 100)}`); continue; }
    r.reps.forEach((p, i) => lines.push(`${r.dtype.toUpperCase()} | ${i + 1} | ${fmt(p.one)} | ${fmt(p.many)} | ${fmt(p.cost, 2)}×`));
    const c = r.reps.map((p) => p.cost);
    lines.push(`${r.dtype.toUpperCase()} | median | | | **${fmt(r.cost, 2)}×** (${fmt(Math.min(...c), 2)}–${fmt(Math.max(...c), 2)})`);
  }
  return [
    `Several sequences per decode step (ggweb, CPU, 1 thread): ${SEQ_TOKENS} sampled tokens per sequence after 64 fixed ids,`,
    `a 1-sequence and a ${SEQ_N}-sequence generation alternately, ${SEQ_REPS} pairs (\`generate(ids, { n: ${SEQ_N} })\`).`,
    ...(meta ? [`${meta.browser}, ${meta.machine}, ${meta.date}.`] : []),
    '',
    ...lines.map((l) => `| ${l} |`),
    '',
  ].join('\n');
}

/** Per model × thread count × round: the native `ggweb bench` (BENCH_NATIVE_BIN, default
 *  target/release/ggweb) and then, each in a fresh page, the Chromium row of every build in
 *  BENCH_NATIVE_BUILDS, so each round's ratio compares runs a minute apart on the same load. */
export async function runNativeRows(open, cfg) {
  const bin = env.BENCH_NATIVE_BIN ?? join(cfg.root, 'target', 'release', 'ggweb');
  if (!existsSync(bin)) throw new Error(`native section: no ${bin} (cargo build --release, or BENCH_NATIVE_BIN)`);
  const out = [];
  for (const file of NATIVE_MODELS) {
    if (!existsSync(join(cfg.models, file))) {
      console.log(`  native ${file}: skipped, no .models/${file} (bench/make_llamacpp_quants.py makes llama.cpp's)`);
      continue;
    }
    for (const threads of NATIVE_THREADS) {
      const row = { file, threads, rounds: [] };
      for (let round = 0; round < NATIVE_ROUNDS; round++) {
        const a = NATIVE_ARGS;
        const nat = JSON.parse(execFileSync(bin, ['bench', '--json', '-m', join(cfg.models, file), '-p', `${a.prompt}`, '-n', `${a.tokens}`,
          '-r', `${a.reps}`, '-c', `${a.nCtx}`, '-b', `${a.nBatch}`, '-t', `${threads}`], { encoding: 'utf8', maxBuffer: 1 << 26 }).trim().split('\n').at(-1));
        const r = { native: { prefillTps: nat.prompt_tok_s, decodeTps: nat.gen_tok_s, decodeAll: nat.gen_tok_s_all } };
        for (const build of NATIVE_BUILDS) {
          const key = `ggweb-native/${file}/t${threads}/${build}`;
          const b = await inFreshPage(open, cfg, key, { runtime: 'ggwebNative', model: `/models/${file}`, threads, ...a, relaxedSimd: build !== 'plain' });
          r[build] = b.ok ? { ...b, ratio: b.decodeTps / nat.gen_tok_s } : b;
        }
        console.log(`  native ${file} t${threads} round ${round + 1}: native decode ${fmt(nat.gen_tok_s)} tok/s; ` +
          NATIVE_BUILDS.map((b) => (r[b].ok ? `${b} ${fmt(r[b].decodeTps)} (${fmt(r[b].ratio, 2)}×)` : `${b} error: ${r[b].error}`)).join(', '));
        row.rounds.push(r);
      }
      out.push(row);
    }
  }
  return out;
}

/** `ggweb bench --train --json` natively on the same file and shape, or null without a binary. */
function nativeTrain(cfg, file, lora) {
  const bin = env.BENCH_GGWEB_BIN ?? join(cfg.root, 'target', 'release', 'ggweb');
  if (!existsSync(bin)) return null;
  const a = ['bench', '--train', '--json', '-t', '1', '-m', join(cfg.models, file), '--seq-len', String(TRAIN_SEQ_LEN),
    '--batch-size', String(TRAIN_BATCH), '--steps', String(TRAIN_STEPS), ...(lora ? ['--lora-rank', String(lora)] : [])];
  const r = runJsonLine(bin, a, cfg);
  if (!r.ok) return r;
  const j = r.json;
  return { ok: true, trainTokS: j.train_tok_s, spread: j.train_tok_s_spread, perCpu: j.train_tok_per_cpu_s, losses: j.losses };
}

/** A benchmark process whose last stdout line is its JSON result (`ggweb bench --json`,
 *  bench/train_torch.py): `{ ok, json }`, or `{ ok: false, error }` with stderr's last line. */
function runJsonLine(cmd, args, cfg) {
  const p = spawnSync(cmd, args, { encoding: 'utf8', timeout: cfg.timeoutMs });
  if (p.status !== 0) return { ok: false, error: (p.stderr || p.error?.message || `exit ${p.status}`).trim().split('\n').at(-1) };
  return { ok: true, json: JSON.parse(p.stdout.trim().split('\n').at(-1)) };
}

/** PyTorch eager's side of the full-training pair (bench/train_torch.py: the same shape, 1 thread), with
 *  BENCH_TORCH_PYTHON or /opt/ggweb-py's Python (torch and transformers, tests/fixtures/requirements.txt);
 *  null where neither is there, so the table says so instead of a figure. */
function torchTrain(cfg) {
  const py = env.BENCH_TORCH_PYTHON ?? '/opt/ggweb-py/bin/python';
  if (!existsSync(py)) return null;
  const a = [join(cfg.root, 'bench', 'train_torch.py'), '--threads', '1', '--seq-len', String(TRAIN_SEQ_LEN),
    '--batch-size', String(TRAIN_BATCH), '--steps', String(TRAIN_STEPS)];
  const r = runJsonLine(py, a, cfg);
  return r.ok ? { ok: true, trainTokS: r.json.train_tok_s } : r;
}

/** Per mode (full on F32, LoRA on Q8_0): TRAIN_PAIRS pairs of Chromium (a fresh page) and native,
 *  alternating which goes first, so both see the same machine load; full training's pairs also run
 *  PyTorch eager on the CPU between them (issue #39: the three side by side in one run). */
export async function runTrainRows(open, cfg) {
  const out = [];
  const modes = [
    { mode: 'full', files: ['124m-f32.gguf', '124m-f16.gguf'], lora: 0 },
    { mode: `lora r${TRAIN_LORA}`, files: ['124m-q8_0.gguf'], lora: TRAIN_LORA },
  ];
  for (const m of modes) {
    const file = m.files.find((f) => existsSync(join(cfg.models, f)));
    if (!file) {
      console.log(`  train ${m.mode}: skipped, none of .models/{${m.files.join(',')}}`);
      continue;
    }
    const key = `ggweb-train/${m.mode}/${file}`;
    const pairs = [];
    for (let i = 0; i < TRAIN_PAIRS; i++) {
      const web = () => inFreshPage(open, cfg, key, {
        runtime: 'ggwebTrain', model: `/models/${file}`, threads: 1, seqLen: TRAIN_SEQ_LEN, batchSize: TRAIN_BATCH,
        steps: TRAIN_STEPS, lora: m.lora, relaxedSimd: cfg.relaxedSimd,
      });
      let w, n;
      if (i % 2 === 0) { w = await web(); n = nativeTrain(cfg, file, m.lora); } else { n = nativeTrain(cfg, file, m.lora); w = await web(); }
      const t = m.lora ? undefined : torchTrain(cfg);
      pairs.push({ web: w, native: n, torch: t, ratio: w.ok && n?.ok ? w.trainTokS / n.trainTokS : null });
      console.log(`  ${key.padEnd(34)} Chromium ${w.ok ? `${fmt(w.trainTokS)} tok/s` : `error: ${w.error}`}` +
        (n ? `, native ${n.ok ? `${fmt(n.trainTokS)} tok/s` : `error: ${n.error}`}` : ', native: no target/release/ggweb') +
        (t === undefined ? '' : t ? `, PyTorch ${t.ok ? `${fmt(t.trainTokS)} tok/s` : `error: ${t.error}`}` : ', PyTorch: no Python with torch'));
    }
    out.push({ mode: m.mode, file, key, pairs, ok: pairs.some((p) => p.web.ok) });
  }
  return out;
}

export function nativeTable(results) {
  if (!results.length) return '';
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const range = (xs, d = 1) => (xs.length ? `${fmt(mid(xs), d)} (${fmt(Math.min(...xs), d)}–${fmt(Math.max(...xs), d)})` : '—');
  const head = ['file', 'threads', 'native prefill', 'native decode', ...NATIVE_BUILDS.flatMap((b) => [`${b} prefill`, `${b} decode`, `${b} ÷ native`])];
  const lines = [head.join(' | '), head.map((_, i) => (i >= 1 ? '--:' : '---')).join('|')];
  for (const r of results) {
    const nat = r.rounds.map((x) => x.native);
    const cells = [r.file, r.threads, range(nat.map((x) => x.prefillTps), 0), range(nat.map((x) => x.decodeTps))];
    for (const b of NATIVE_BUILDS) {
      const ok = r.rounds.map((x) => x[b]).filter((x) => x?.ok);
      cells.push(range(ok.map((x) => x.prefillTps), 0), range(ok.map((x) => x.decodeTps)), `**${range(ok.map((x) => x.ratio), 2)}**`);
    }
    lines.push(cells.join(' | '));
  }
  return [
    `Browser against native on the same file (\`ggweb bench -p ${NATIVE_ARGS.prompt} -n ${NATIVE_ARGS.tokens} -r ${NATIVE_ARGS.reps}\`'s fixed ids; Chromium: the same ids,`,
    `${NATIVE_ARGS.tokens} greedy tokens, median of ${NATIVE_ARGS.reps} per row), ${NATIVE_ROUNDS} interleaved rounds; tok/s as median (min–max) over the rounds, the ratio per round.`,
    '',
    ...lines.map((l) => `| ${l} |`),
    '',
  ].join('\n');
}

export function trainTable(results) {
  if (!results.length) return '';
  const lines = ['mode | file | pair | Chromium tok/s | native tok/s | Chromium ÷ native | PyTorch eager tok/s | native ÷ PyTorch',
    '---|---|--:|--:|--:|--:|--:|--:'];
  const torchCells = (p) => (p.torch?.ok
    ? `${fmt(p.torch.trainTokS)} | ${p.native?.ok ? `${fmt(p.native.trainTokS / p.torch.trainTokS, 2)}×` : '—'}`
    : `${p.torch ? 'error' : '—'} | —`);
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const full = results.find((r) => r.mode === 'full');
  for (const r of results) {
    r.pairs.forEach((p, i) => lines.push(`${r.mode} | ${r.file} | ${i + 1} | ${p.web.ok ? fmt(p.web.trainTokS) : `error: ${String(p.web.error).slice(0, 80)}`} | ` +
      `${p.native?.ok ? fmt(p.native.trainTokS) : p.native ? 'error' : '—'} | ${p.ratio == null ? '—' : `${fmt(p.ratio, 2)}×`} | ${torchCells(p)}`));
    const rs = r.pairs.map((p) => p.ratio).filter((x) => x != null);
    const ts = r.pairs.filter((p) => p.torch?.ok && p.native?.ok).map((p) => p.native.trainTokS / p.torch.trainTokS);
    const tcell = ts.length ? `| | **${fmt(mid(ts), 2)}×** (${fmt(Math.min(...ts), 2)}–${fmt(Math.max(...ts), 2)})` : '| |';
    if (rs.length) lines.push(`${r.mode} | | median | | | **${fmt(mid(rs), 2)}×** (${fmt(Math.min(...rs), 2)}–${fmt(Math.max(...rs), 2)}) ${tcell}`);
  }
  const lora = results.find((r) => r.mode !== 'full');
  const web = (r) => r?.pairs.filter((p) => p.web.ok).map((p) => p.web.trainTokS) ?? [];
  const tail = full && lora && web(full).length && web(lora).length
    ? [`LoRA ÷ full in Chromium: ${fmt(mid(web(lora)) / mid(web(full)), 2)}× (medians).`, '']
    : [];
  return [
    `Training (ggweb, CPU, 1 thread): AdamW updates of ${TRAIN_BATCH} × ${TRAIN_SEQ_LEN} fixed ids (\`model.train\` in Chromium,`,
    `\`ggweb bench --train\` natively, alternately; full training's pairs also run PyTorch eager, \`bench/train_torch.py\`, 1 thread),`,
    `one warm-up update then the median of ${TRAIN_STEPS} timed ones per run.`,
    '',
    ...lines.map((l) => `| ${l} |`),
    '',
    ...tail,
  ].join('\n');
}
