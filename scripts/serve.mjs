// Static server for the demo and the browser tests (node:http, no dependencies).
//
//   node scripts/serve.mjs                  # http://localhost:8080/  (PORT=... to change)
//   import { startServer } from './serve.mjs'; const s = await startServer({ port: 0 });
//
// Serves web/ at / and the repo's tests/fixtures/ at /tests/fixtures/ (the tiny model),
// with COOP/COEP so pages are cross-origin isolated (SharedArrayBuffer, wasm threads),
// `.wasm` as application/wasm (needed by WebAssembly.instantiateStreaming), and Range
// requests. With `testRoutes: true` it also answers /__test/... URLs that misbehave on
// purpose, for the loader's error-path tests:
//   /__test/status/404                 an HTTP error status
//   /__test/nolength/<path>            the file, chunked, with no Content-Length
//   /__test/drop/<bytes>/<path>        claims the full length, sends <bytes>, then resets
//   /__test/short/<bytes>/<path>       claims the full length, sends <bytes>, then ends the
//                                      response and closes the connection cleanly (FIN, no reset)
//   /__test/slow/<ms>/<path>           the file in 16 KiB pieces, <ms> apart
//   /__test/stall/<bytes>/<path>       claims the full length, sends <bytes>, then nothing (the
//                                      connection stays open until the client gives up)
//   /__test/noheaders/<path>           accepts the request and never answers (no status line)
//   /__test/redirect/<n>/<path>        redirects to /__test/redirect/<n+1>/<path>, for ever
//                                      (a redirect loop: the client gives up after ~20)
//   /__test/noisolation/<path>         the file without COOP/COEP: a page loaded from here is
//                                      not cross-origin isolated (ggweb falls back to 1 thread)
//   /__test/counted/<key>/<path>       the file (Range honoured), counting under <key> the
//                                      requests, their Range headers and the bytes read out
//   /__test/norange/<key>/<path>       the same, but Range is ignored (always 200, whole file),
//                                      sent at ~12 MB/s (so a cancel lands before the end)
//   /__test/tally/<key>                what <key> counted: { requests, ranges, bytes } (JSON)
//   /__test/validated/<key>/<path>     the file with ETag and Last-Modified, 304 for a matching
//                                      If-None-Match (else If-Modified-Since); <key> also counts
//                                      `conditional` (the If-* headers sent) and `statuses`
//   /__test/lastmod/<key>/<path>       the same with Last-Modified only (no ETag)
//   /__test/hub/<owner>/<name>/resolve/<revision>/<file>
//                                      the Hugging Face Hub's layout: 302 to /__test/hub-cdn/...,
//                                      which serves the file (Range, ETag; counted under 'hub-cdn').
//                                      Repos: ggweb-test/fixtures (tests/fixtures/), ggweb-test/artifacts
//                                      (the /artifacts/ mount); revisions main and v1. An unknown
//                                      repo is 401, an unknown revision or file 404, with the Hub's
//                                      X-Error-Code header
// `isolate: false` (GGWEB_NO_ISOLATION=1 from the command line) drops COOP/COEP everywhere.
import { createServer } from 'node:http';
import { createReadStream, existsSync, promises as fsp } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.ts': 'text/plain; charset=utf-8',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
  '.gguf': 'application/octet-stream',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * The llama.cpp-made reference models (tiny-gpt2-*.gguf, tiny-gpt2.hf-ref.json), as scripts/lib.sh
 * finds them: $GGWEB_MODELS_DIR, else the copy in the repository (tests/fixtures/llamacpp).
 * Null when absent.
 */
export function findModelsDir() {
  for (const d of [process.env.GGWEB_MODELS_DIR, join(ROOT, 'tests', 'fixtures', 'llamacpp')]) {
    if (d && existsSync(join(d, 'tiny-gpt2-f32.gguf'))) return resolve(d);
  }
  return null;
}

// URL prefix → directory. The first match wins; nothing outside these is reachable.
const MOUNTS = [
  ['/tests/fixtures/', join(ROOT, 'tests', 'fixtures')],
  ['/', join(ROOT, 'web')],
];

// COOP + COEP make the page cross-origin isolated: SharedArrayBuffer, so the threaded
// wasm build can run. CORP lets isolated pages of this origin load everything here.
function baseHeaders(isolate = true) {
  return {
    ...(isolate ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {}),
    'Cross-Origin-Resource-Policy': 'same-origin',
    'Cache-Control': 'no-cache',
    'Access-Control-Expose-Headers': 'Content-Length, Content-Range',
  };
}

/** Maps a URL path to a file under one of `mounts`, or null (traversal, unknown prefix). */
export function resolvePath(urlPath, mounts = MOUNTS) {
  let p;
  try {
    p = decodeURIComponent(urlPath);
  } catch {
    return null;
  }
  if (p.includes('\0')) return null;
  for (const [prefix, dir] of mounts) {
    if (!p.startsWith(prefix)) continue;
    const rel = p.slice(prefix.length) || 'index.html';
    const file = normalize(join(dir, rel));
    if (file !== dir && !file.startsWith(dir + sep)) return null;
    return file.endsWith(sep) ? join(file, 'index.html') : file;
  }
  return null;
}

function sendError(res, status, msg) {
  res.writeHead(status, { ...baseHeaders(), 'Content-Type': 'text/plain; charset=utf-8' });
  res.end(`${status} ${msg}\n`);
}

async function statFile(file) {
  try {
    let st = await fsp.stat(file);
    if (st.isDirectory()) {
      file = join(file, 'index.html');
      st = await fsp.stat(file);
    }
    return st.isFile() ? { file, size: st.size, mtimeMs: st.mtimeMs } : null;
  } catch {
    return null;
  }
}

/** Per key: { requests, ranges, bytes } served by the counted/norange test routes. */
const tallies = new Map();

async function serveFile(req, res, urlPath, mounts, isolate = true, tally = null, paced = false, validators = false, rateMBps = 0) {
  const file0 = resolvePath(urlPath, mounts);
  const found = file0 && (await statFile(file0));
  if (!found) return sendError(res, 404, `not found: ${urlPath}`);
  const { file, size, mtimeMs } = found;
  const headers = {
    ...baseHeaders(isolate),
    'Content-Type': TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream',
    'Accept-Ranges': 'bytes',
  };
  if (validators) {
    // As a static host sends them: with `no-cache` the browser revalidates a stored copy
    // and gets a 304 when the file is unchanged.
    headers.ETag = `"${size.toString(16)}-${Math.floor(mtimeMs).toString(16)}"`;
    headers['Last-Modified'] = new Date(mtimeMs).toUTCString();
    if (validators === 'lastmod') delete headers.ETag;
    const inm = req.headers['if-none-match'];
    const ims = Date.parse(req.headers['if-modified-since'] ?? '');
    // If-None-Match wins when both are sent (RFC 9110 13.2.2); dates have whole seconds.
    if (inm !== undefined ? inm === headers.ETag : ims >= Math.floor(mtimeMs / 1000) * 1000) {
      res.writeHead(304, headers);
      return res.end();
    }
  }
  let start = 0;
  let end = size - 1;
  let status = 200;
  const range = req.headers.range && /^bytes=(\d*)-(\d*)$/.exec(req.headers.range);
  if (range && (range[1] || range[2])) {
    if (range[1]) {
      start = Number(range[1]);
      if (range[2]) end = Math.min(Number(range[2]), size - 1);
    } else {
      start = Math.max(0, size - Number(range[2]));
    }
    if (start > end || start >= size) {
      res.writeHead(416, { ...baseHeaders(), 'Content-Range': `bytes */${size}` });
      return res.end();
    }
    status = 206;
    headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
  }
  headers['Content-Length'] = String(end - start + 1);
  res.writeHead(status, headers);
  if (req.method === 'HEAD' || size === 0) return res.end();
  const stream = createReadStream(file, { start, end, highWaterMark: paced ? 128 * 1024 : rateMBps > 0 ? 1 << 20 : undefined })
    .on('error', () => res.destroy());
  if (tally) {
    stream.on('data', (c) => { tally.bytes += c.length; });
    res.on('close', () => stream.destroy()); // a cancelled download stops reading the file
  }
  if (rateMBps > 0 && /\.gguf$/i.test(file)) {
    // A network link of `rateMBps` (the bench's load rows): the body at that average rate,
    // 1 MiB pieces, each sent when the schedule reaches it (and the socket has drained).
    const t0 = performance.now();
    let sent = 0;
    stream.on('data', (c) => {
      stream.pause();
      const drained = res.write(c) ? Promise.resolve() : new Promise((r) => res.once('drain', r));
      sent += c.length;
      const due = t0 + sent / (rateMBps * 1e3);
      Promise.all([drained, sleep(Math.max(0, due - performance.now()))]).then(() => stream.resume());
    });
    stream.on('end', () => res.end());
    res.on('close', () => stream.destroy());
    return;
  }
  if (paced) {
    // 128 KiB every 10 ms: over loopback the browser would otherwise take a whole test file
    // into its buffers before the page could cancel, however early it does.
    stream.on('data', (c) => {
      res.write(c);
      stream.pause();
      setTimeout(() => stream.resume(), 10);
    });
    stream.on('end', () => res.end());
    return;
  }
  stream.pipe(res);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The Hub mimic's repositories: repo id → URL prefix of its files (a mount). */
const HUB_REPOS = { 'ggweb-test/fixtures': '/tests/fixtures/', 'ggweb-test/artifacts': '/artifacts/' };
const HUB_REVISIONS = ['main', 'v1'];

function hubRoute(req, res, rest, mounts) {
  const hubError = (status, code, msg) => {
    res.writeHead(status, { ...baseHeaders(), 'Content-Type': 'text/plain; charset=utf-8', 'X-Error-Code': code, 'X-Error-Message': msg });
    res.end(`${msg}\n`);
  };
  const m = /^\/hub\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(rest);
  if (m) {
    const [, repo, rev, file] = m;
    if (!HUB_REPOS[repo]) return hubError(401, 'RepositoryNotFound', 'Repository not found');
    if (!HUB_REVISIONS.includes(decodeURIComponent(rev))) return hubError(404, 'RevisionNotFound', 'Invalid rev id');
    // As the Hub does: the file lives on a CDN; the redirect is not to be cached.
    res.writeHead(302, { ...baseHeaders(), Location: `/__test/hub-cdn/${repo}/${rev}/${file}`, 'Cache-Control': 'no-store' });
    return res.end();
  }
  const cdn = /^\/hub-cdn\/([^/]+\/[^/]+)\/[^/]+\/(.+)$/.exec(rest);
  if (!cdn || !HUB_REPOS[cdn[1]]) return hubError(404, 'EntryNotFound', 'Entry not found');
  const path = HUB_REPOS[cdn[1]] + cdn[2];
  const file = resolvePath(path, mounts);
  if (!file || !existsSync(file)) return hubError(404, 'EntryNotFound', 'Entry not found');
  if (!tallies.has('hub-cdn')) tallies.set('hub-cdn', { requests: 0, ranges: [], bytes: 0 });
  const tally = tallies.get('hub-cdn');
  tally.requests += 1;
  tally.ranges.push(req.headers.range ?? null);
  return serveFile(req, res, path, mounts, true, tally, false, true);
}

async function serveTestRoute(req, res, rest, mounts) {
  if (/^\/hub(-cdn)?\//.test(rest)) return hubRoute(req, res, rest, mounts);
  const validated = /^\/(validated|lastmod)\/([\w-]+)(\/.*)$/.exec(rest);
  if (validated) {
    const [, kind, key, path] = validated;
    if (!tallies.has(key)) tallies.set(key, { requests: 0, ranges: [], bytes: 0, conditional: [], statuses: [] });
    const tally = tallies.get(key);
    tally.requests += 1;
    tally.ranges.push(req.headers.range ?? null);
    const cond = ['if-none-match', 'if-modified-since'].filter((h) => req.headers[h] !== undefined);
    tally.conditional.push(cond.length ? cond.join(',') : null);
    res.on('finish', () => tally.statuses.push(res.statusCode));
    return serveFile(req, res, path, mounts, true, tally, false, kind === 'lastmod' ? 'lastmod' : true);
  }
  if (rest.startsWith('/noisolation/')) return serveFile(req, res, rest.slice('/noisolation'.length), mounts, false);
  const counted = /^\/(counted|norange)\/([\w-]+)(\/.*)$/.exec(rest);
  if (counted) {
    const [, kind, key, path] = counted;
    if (!tallies.has(key)) tallies.set(key, { requests: 0, ranges: [], bytes: 0 });
    const tally = tallies.get(key);
    tally.requests += 1;
    tally.ranges.push(req.headers.range ?? null);
    if (kind === 'norange') delete req.headers.range;
    return serveFile(req, res, path, mounts, true, tally, kind === 'norange');
  }
  if (rest.startsWith('/noheaders/')) {
    // Nothing is written: the request stays open until the client gives up or the server closes.
    req.socket.setTimeout(0);
    return;
  }
  const redirect = /^\/redirect\/(\d+)(\/.*)$/.exec(rest);
  if (redirect) {
    res.writeHead(302, { ...baseHeaders(), Location: `/__test/redirect/${Number(redirect[1]) + 1}${redirect[2]}`, 'Cache-Control': 'no-store' });
    return res.end();
  }
  const tallyOf = /^\/tally\/([\w-]+)$/.exec(rest);
  if (tallyOf) {
    const body = JSON.stringify(tallies.get(tallyOf[1]) ?? { requests: 0, ranges: [], bytes: 0 });
    res.writeHead(200, { ...baseHeaders(), 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
    return res.end(body);
  }
  const m = /^\/(status|nolength|drop|short|slow|stall)\/(.*)$/.exec(rest);
  if (!m) return sendError(res, 404, 'unknown test route');
  const [, kind, arg] = m;
  if (kind === 'status') {
    const code = Number(arg);
    return sendError(res, code >= 400 && code < 600 ? code : 400, 'test status');
  }
  let param = 0;
  let path = '/' + arg;
  if (kind === 'drop' || kind === 'short' || kind === 'slow' || kind === 'stall') {
    const mm = /^(\d+)\/(.*)$/.exec(arg);
    if (!mm) return sendError(res, 400, `${kind} needs a number`);
    param = Number(mm[1]);
    path = '/' + mm[2];
  }
  const file0 = resolvePath(path, mounts);
  const found = file0 && (await statFile(file0));
  if (!found) return sendError(res, 404, `not found: ${path}`);
  const data = await fsp.readFile(found.file);
  const headers = { ...baseHeaders(), 'Content-Type': 'application/octet-stream' };
  if (kind === 'nolength') {
    res.writeHead(200, headers); // no Content-Length: node sends Transfer-Encoding: chunked
    for (let i = 0; i < data.length; i += 65536) {
      res.write(data.subarray(i, i + 65536));
      await sleep(1);
    }
    return res.end();
  }
  headers['Content-Length'] = String(data.length);
  // A clean close after too few bytes: without this header the connection would stay open
  // and the client could only wait (the stall timeout's case).
  if (kind === 'short') headers.Connection = 'close';
  res.writeHead(200, headers);
  if (kind === 'short') {
    const n = Math.min(param, data.length);
    res.write(data.subarray(0, n));
    // end() checks the length Node was told; give the socket its FIN directly instead.
    return res.socket.end();
  }
  if (kind === 'stall') {
    res.write(data.subarray(0, Math.min(param, data.length)));
    return; // never ends: the client's stall timeout (or server.close) ends it
  }
  if (kind === 'drop') {
    res.write(data.subarray(0, Math.min(param, data.length)));
    await sleep(50);
    return res.destroy(); // the client sees the connection end before Content-Length bytes
  }
  for (let i = 0; i < data.length; i += 16384) {
    if (res.destroyed) return;
    res.write(data.subarray(i, i + 16384));
    await sleep(param);
  }
  res.end();
}

/**
 * Starts the server. Resolves to { server, port, url, close() }.
 * `mounts`: extra [urlPrefix, directory] pairs, tried before the defaults.
 * `isolate: false` serves without COOP/COEP (the page is then not cross-origin isolated).
 * `validators: true` adds ETag / Last-Modified to files and answers a matching If-None-Match
 * (or, without one, an If-Modified-Since not older than the file) with 304 (the bench's cached-reload rows); `onServe(path, status, bytes)` is called as each
 * response finishes, with the body bytes written. `rateMBps` sends .gguf bodies no faster than
 * that many MB/s, as a network link would (the bench's load rows; 0: as fast as loopback).
 * @param {{port?: number, host?: string, testRoutes?: boolean, quiet?: boolean, mounts?: [string, string][], isolate?: boolean, validators?: boolean, onServe?: Function, rateMBps?: number}} opts
 */
export function startServer({ port = 8080, host = '127.0.0.1', testRoutes = false, quiet = true, mounts = [], isolate = true, validators = false, onServe = null, rateMBps = 0 } = {}) {
  const allMounts = [...mounts.map(([p, d]) => [p, resolve(d)]), ...MOUNTS];
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (!quiet) console.log(`${req.method} ${url.pathname}`);
    if (onServe) {
      const sock = res.socket;
      const before = sock?.bytesWritten ?? 0;
      res.on('finish', () => onServe(url.pathname, res.statusCode, (sock?.bytesWritten ?? 0) - before));
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 405, 'method not allowed');
    const handle = testRoutes && url.pathname.startsWith('/__test/')
      ? serveTestRoute(req, res, url.pathname.slice('/__test'.length), allMounts)
      : serveFile(req, res, url.pathname, allMounts, isolate, null, false, validators, rateMBps);
    handle.catch((e) => {
      if (!res.headersSent) sendError(res, 500, String(e && e.message));
      else res.destroy();
    });
  });
  return new Promise((resolveP, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const p = server.address().port;
      const shown = host === '127.0.0.1' || host === '0.0.0.0' ? 'localhost' : host;
      resolveP({
        server,
        port: p,
        url: `http://${shown}:${p}/`,
        close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }),
      });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const port = Number(process.env.PORT ?? 8080);
  const host = process.env.HOST ?? '127.0.0.1';
  const isolate = process.env.GGWEB_NO_ISOLATION !== '1';
  const s = await startServer({ port, host, testRoutes: process.env.GGWEB_TEST_ROUTES === '1', quiet: !process.env.VERBOSE, isolate });
  console.log(`ggweb demo: ${s.url}  (serving web/ and tests/fixtures/${isolate ? '' : '; not cross-origin isolated: 1 CPU thread'}; Ctrl-C to stop)`);
}
