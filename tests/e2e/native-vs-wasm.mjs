// One GGUF run by the native CLI and by the packed package in headless Chromium, for the
// GPT-2-family shapes (tests/e2e/medium.spec.mjs in npm test, tests/scale/ in npm run
// test:scale): greedy tokens, the prompt's next-token logits, the memory plan against
// info().memory and the wasm heap after the load.
import { execFileSync } from 'node:child_process';
import { ROOT, openPage } from './helpers.mjs';

export const MIB = 1024 * 1024;

/**
 * `ggweb generate --json` (greedy) and `ggweb logits` on `file`: the prompt's ids, the
 * generated ids, and the logits after the last prompt token. `ggweb` is the command line
 * that runs the CLI (e.g. [target/release/ggweb] or ['cargo', 'run', ..., '--']).
 */
export function nativeRun(ggweb, file, prompt, nPredict, extra = []) {
  const run = (args) => execFileSync(ggweb[0], [...ggweb.slice(1), ...args], {
    cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'inherit'],
  });
  const t0 = Date.now();
  const gen = JSON.parse(run(['generate', '--model', file, '--prompt', prompt, '--n-predict', String(nPredict),
    '--temp', '0', '--top-logprobs', '2', '--json', ...extra]));
  const genMs = Date.now() - t0;
  const all = JSON.parse(run(['logits', '--model', file, '--prompt', prompt, ...extra]));
  if (JSON.stringify(all.tokens) !== JSON.stringify(gen.prompt_tokens)) {
    throw new Error(`ggweb logits tokenized the prompt as ${all.tokens}, generate as ${gen.prompt_tokens}`);
  }
  // The CLI prints each f32 in its shortest form: fround gives back the f32 itself.
  // Per step, the margin of the greedy choice: top-1 minus top-2 logprob (= their logits' gap).
  const gaps = gen.top_logprobs.map((t) => t[0].logprob - t[1].logprob);
  return { promptIds: gen.prompt_tokens, tokens: gen.tokens, gaps, logits: all.logits.at(-1).map(Math.fround), genMs };
}

/**
 * Where `tokens` first leaves the native greedy path, or -1; throws unless native had a
 * near tie there or before (a top-1/top-2 gap under 2 · `bound`, the most two runs within
 * `bound` of each other can disagree on), so that only a legitimate tie lets them part.
 */
export function checkGreedy(tokens, nat, bound) {
  const at = nat.tokens.findIndex((t, i) => tokens[i] !== t);
  if (tokens.length !== nat.tokens.length) throw new Error(`${tokens.length} tokens, native ${nat.tokens.length}`);
  if (at < 0) return -1;
  const tie = nat.gaps.slice(0, at + 1).findIndex((g) => g < 2 * bound);
  if (tie < 0) {
    throw new Error(`greedy tokens leave native's at step ${at} (${JSON.stringify(tokens)} vs ${JSON.stringify(nat.tokens)}) ` +
      `with no near tie before: gaps ${JSON.stringify(nat.gaps.slice(0, at + 1))}`);
  }
  return at;
}

/**
 * In a fresh page (a fresh wasm instance): Model.inspect, then Model.load of `url` with
 * `opts`, the logits of `promptIds`, `nPredict` greedy tokens of `prompt`, info() after.
 */
export async function browserRun(browser, server, url, opts, prompt, promptIds, nPredict) {
  const { page, problems } = await openPage(browser, `${server.url}e2e/harness.html`);
  try {
    const r = await page.evaluate(async ({ url, opts, prompt, promptIds, nPredict }) => {
      try {
        const { Model } = await import('/ggweb.js');
        const plan = await Model.inspect(url, { nThreads: opts.nThreads, nBatch: opts.nBatch, nCtx: opts.nCtx, kvType: opts.kvType });
        const t0 = performance.now();
        const m = await Model.load(url, opts);
        const loadMs = performance.now() - t0;
        const info = m.info();
        const logits = Array.from(await m.logits(promptIds));
        const tokens = [];
        const t1 = performance.now();
        for await (const t of m.generate(prompt, { maxTokens: nPredict, temperature: 0 })) tokens.push(t.token);
        const genMs = performance.now() - t1;
        const ids = Array.from(await m.tokenize(prompt));
        const after = m.info().wasmMemory;
        await m.dispose();
        return { ok: true, plan, info, after, logits, tokens, ids, loadMs, genMs };
      } catch (e) {
        return { ok: false, message: `${e.code}: ${e.message}` };
      }
    }, { url, opts, prompt, promptIds, nPredict });
    return { ...r, problems: problems.filter((m) => !m.includes('/favicon.ico')) };
  } finally {
    await page.close();
  }
}

/** max |a - b| and how many elements differ in any bit. */
export function logitDiff(a, b) {
  let max = 0;
  let differ = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Object.is(a[i], b[i])) differ++;
    max = Math.max(max, Math.abs(a[i] - b[i]));
  }
  return { max, differ };
}

/** The plan's bytes (weights + KV + compute) as info().memory reports them. */
export function planBytes(memory) {
  return memory.weights + memory.kv + memory.compute;
}
