// The paired comparison of `npm run bench` (scripts/bench.mjs): per CPU thread count, ggweb at
// its best dtype (the faster of Q8_0 / Q4_0 in this invocation's rows, on the build ggweb picks
// by default: relaxed SIMD where the browser validates it) against the best browser peer at its
// best dtype (the fastest wllama or transformers.js row at that thread count, any dtype), run
// alternately BENCH_PAIRS times (default 3), each run a fresh page as in the table. Per pair:
// decode ggweb ÷ peer; the block gives every pair, their median and min–max, and the load
// average around the pairing: one run's ratio on a shared machine moves by tens of percent.
import { loadavg } from 'node:os';

export const PAIR_GOAL = 1.5; // issue #18: decode at 1 and 2 threads >= 1.5x the best peer

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const fmt = (x, d = 1) => (x == null || !Number.isFinite(x) ? '—' : x.toFixed(d));

/** The two rows to pair at `threads` from the table's results, or { why } when a side is missing. */
export function pickPair(results, threads) {
  const ok = results.filter((r) => r.ok && r.threads === threads && Number.isFinite(r.decodeTps));
  const best = (rs) => rs.reduce((a, b) => (!a || b.decodeTps > a.decodeTps ? b : a), null);
  const g = best(ok.filter((r) => r.runtime === 'ggweb' && r.backend === 'cpu' && ['q8_0', 'q4_0'].includes(r.dtype)));
  const p = best(ok.filter((r) => r.runtime !== 'ggweb'));
  if (!g || !p) {
    return { why: `no ${!g ? 'ggweb Q8_0/Q4_0 cpu' : 'peer'} row at ${threads} thread${threads > 1 ? 's' : ''} in this run (BENCH_ONLY?)` };
  }
  const strip = ({ key, runtime, dtype, cls, threads: t, backend, model, how }) => ({ key, runtime, dtype, cls, threads: t, backend, model, how });
  return { ggweb: strip(g), peer: strip(p) };
}

/** Runs the pairs: `runRow(row)` is the table's own row runner (fresh page, warm-up, reps). */
export async function runPairs(pick, n, runRow, log = console.log) {
  const pairs = [];
  const load0 = loadavg()[0];
  for (let i = 0; i < n; i++) {
    // Alternate which side goes first, so a drift in the machine's load favours neither.
    const order = i % 2 === 0 ? ['ggweb', 'peer'] : ['peer', 'ggweb'];
    const got = {};
    for (const side of order) got[side] = await runRow(pick[side]);
    const ratio = got.ggweb.ok && got.peer.ok ? got.ggweb.decodeTps / got.peer.decodeTps : null;
    pairs.push({
      order: order.join(' then '), ratio, loadavg: +loadavg()[0].toFixed(2),
      ggweb: brief(got.ggweb), peer: brief(got.peer),
    });
    log(`  pair ${i + 1}/${n} t${pick.ggweb.threads}: ggweb ${pick.ggweb.dtype} ${fmt(got.ggweb.decodeTps)} tok/s` +
      ` (${got.ggweb.build ?? '?'}) vs ${pick.peer.runtime} ${pick.peer.dtype} ${fmt(got.peer.decodeTps)} tok/s:` +
      ` ${fmt(ratio, 2)}×${got.ggweb.ok && got.peer.ok ? '' : ` (error: ${got.ggweb.error ?? got.peer.error})`}`);
  }
  const rs = pairs.map((p) => p.ratio).filter((x) => x != null);
  return {
    threads: pick.ggweb.threads, ggweb: pick.ggweb, peer: pick.peer, pairs,
    median: rs.length ? median(rs) : null, min: rs.length ? Math.min(...rs) : null, max: rs.length ? Math.max(...rs) : null,
    loadavg: [+load0.toFixed(2), +loadavg()[0].toFixed(2)],
  };
}

function brief(r) {
  return r.ok
    ? { ok: true, decodeTps: +r.decodeTps.toFixed(2), prefillTps: +r.prefillTps.toFixed(1), build: r.build ?? null, reps: r.reps }
    : { ok: false, error: r.error };
}

/** One line per thread count for the console, then the pairs. */
export function pairedText(blocks) {
  const out = [];
  for (const b of blocks) {
    if (b.why) { out.push(`t${b.threads}: not paired: ${b.why}`); continue; }
    out.push(`t${b.threads}: ggweb ${b.ggweb.dtype} vs ${b.peer.runtime} ${b.peer.dtype}, decode ratio median ${fmt(b.median, 2)}× ` +
      `(min ${fmt(b.min, 2)}×, max ${fmt(b.max, 2)}×, ${b.pairs.length} pairs; goal ≥ ${PAIR_GOAL}×: ${b.median >= PAIR_GOAL ? 'met' : 'not met'})`);
  }
  return out.join('\n');
}

/** The markdown block BENCHMARKS.md keeps between the bench:paired markers. */
export function pairedSection(meta, blocks) {
  const lines = [
    `Paired runs, ${meta.date}, ${meta.browser} headless, ${meta.machine}. Per thread count: ggweb at its best`,
    `dtype (the faster of Q8_0 / Q4_0 in the table above, on the build it picks by default) and the fastest peer row`,
    `(any runtime and dtype), run alternately, each a fresh page with a warm-up and ${meta.reps} timed runs (median decode).`,
    `Ratio = ggweb decode ÷ peer decode; goal ≥ ${PAIR_GOAL}× as the median of the pairs.`,
    '',
    '| threads | ggweb | peer | pair: ggweb / peer tok/s (ratio) | median | min–max | goal | load avg (start, end) |',
    '|--------:|-------|------|----------------------------------|-------:|---------|------|-----------------------|',
  ];
  for (const b of blocks) {
    if (b.why) { lines.push(`| ${b.threads} | — | — | not paired: ${b.why} | — | — | — | — |`); continue; }
    const each = b.pairs.map((p) => (p.ratio == null ? 'error'
      : `${fmt(p.ggweb.decodeTps)} / ${fmt(p.peer.decodeTps)} (${fmt(p.ratio, 2)}×)`)).join('; ');
    const build = b.pairs.find((p) => p.ggweb.build)?.ggweb.build;
    lines.push(`| ${b.threads} | ${b.ggweb.dtype}${build ? ` (${build})` : ''} | ${b.peer.runtime} ${b.peer.dtype} | ${each} | ` +
      `${fmt(b.median, 2)}× | ${fmt(b.min, 2)}–${fmt(b.max, 2)}× | ${b.median >= PAIR_GOAL ? 'met' : 'not met'} | ${b.loadavg.join(', ')} |`);
  }
  return lines.join('\n') + '\n';
}
