// The Origin Private File System (OPFS): the models `Model.load(url, { cache: 'opfs' })` keeps
// (folder 'ggweb-models': `<sha256 of the URL>.gguf` and its `.json` record: url, bytes,
// storedAt, the server's validators), and the checkpoints `model.save({ to: 'opfs', name })`
// writes (folder 'ggweb-checkpoints', one file per name). Every file is written under a
// temporary name and renamed only once whole, so a partial file is never read as a model; a
// stored model counts only when its record exists and its file has the recorded length.
import { GgwebError } from './errors.js';
import { show } from './input.js';

export const OPFS_MODELS = 'ggweb-models';
export const OPFS_CHECKPOINTS = 'ggweb-checkpoints';
/** Model.load's source prefix for a checkpoint: `Model.load('opfs:name')`. */
export const OPFS_PREFIX = 'opfs:';

/** Why OPFS cannot be used here, or null. */
export function opfsMissingWhy() {
  const s = typeof navigator !== 'undefined' ? navigator.storage : undefined;
  if (typeof s?.getDirectory === 'function') return null;
  return 'the Origin Private File System (navigator.storage.getDirectory) is not available here ' +
    '(Node, a page that is not https or localhost, or a browser without it)';
}

/**
 * The OPFS folder `name` (made when `create`; null when absent and not `create`); 'unsupported'
 * naming why where OPFS is missing or refused (Firefox's private windows refuse it).
 */
export async function opfsDir(name, what, create = true) {
  const why = opfsMissingWhy();
  if (why) throw new GgwebError('unsupported', `${what}: ${why}`);
  let root;
  try {
    root = await navigator.storage.getDirectory();
  } catch (e) {
    throw new GgwebError('unsupported', `${what}: the browser refused the Origin Private File System (${e?.name ?? 'Error'}: ${e?.message ?? e})`);
  }
  try {
    return await root.getDirectoryHandle(name, { create });
  } catch (e) {
    if (!create && e?.name === 'NotFoundError') return null;
    const quota = e?.name === 'QuotaExceededError' ? ': the storage quota is full' : '';
    throw new GgwebError('unsupported', `${what}: could not open the OPFS folder ${name}${quota} (${e?.name ?? 'Error'}: ${e?.message ?? e})`);
  }
}

/** A checkpoint name: a plain file name (no '/', '\', '.' or '..', at most 200 characters). */
export function checkpointName(name, what) {
  if (typeof name !== 'string' || !name || name.length > 200 || /[/\\\0]/.test(name) || name === '.' || name === '..' || name.endsWith('.part')) {
    throw new GgwebError('invalid', `${what}: name must be a file name (1-200 characters, no '/', '\\', not '.', '..' or ending in '.part'), got ${show(name)}`);
  }
  return name;
}

/** The file handle `name` in `dir`, or null when there is none. */
async function fileIn(dir, name) {
  try {
    return await dir.getFileHandle(name);
  } catch (e) {
    if (e?.name === 'NotFoundError' || e?.name === 'TypeMismatchError') return null;
    throw e;
  }
}

async function removeIn(dir, name) {
  try {
    await dir.removeEntry(name);
    return true;
  } catch (e) {
    if (e?.name === 'NotFoundError') return false;
    throw e;
  }
}

const inDedicatedWorker = () => typeof DedicatedWorkerGlobalScope !== 'undefined' && globalThis instanceof DedicatedWorkerGlobalScope;

/**
 * A writer of `dir`/`name` from offset 0: `write(chunk)` (in order), `written`, `close()`,
 * `abort()`. In a dedicated worker a sync access handle (no swap file, no copy of the
 * chunk), else createWritable. A write over the quota rejects with QuotaExceededError.
 */
async function fileWriter(dir, name) {
  const fh = await dir.getFileHandle(name, { create: true });
  let at = 0;
  if (inDedicatedWorker() && typeof fh.createSyncAccessHandle === 'function') {
    const h = await fh.createSyncAccessHandle();
    h.truncate(0);
    let open = true;
    return {
      get written() { return at; },
      async write(chunk) {
        for (let off = 0; off < chunk.byteLength;) {
          const left = chunk.byteLength - off;
          const n = h.write(chunk.subarray(off), { at });
          // Chromium 156's handle answers a write over the quota with a nonsense count (2^34 - 32
          // seen) instead of throwing QuotaExceededError: anything outside 1..left is that.
          if (!(n > 0 && n <= left)) {
            throw new DOMException(`writing ${left} bytes at offset ${at} returned ${n} (over the storage quota)`, 'QuotaExceededError');
          }
          at += n;
          off += n;
        }
      },
      async close() { h.flush(); h.close(); open = false; },
      async abort() { if (open) { open = false; try { h.close(); } catch { /* closed */ } } },
    };
  }
  if (typeof fh.createWritable !== 'function') {
    throw new GgwebError('unsupported', 'OPFS: this browser has neither createSyncAccessHandle (outside a dedicated worker) nor createWritable');
  }
  const w = await fh.createWritable({ keepExistingData: false });
  return {
    get written() { return at; },
    async write(chunk) { await w.write(chunk); at += chunk.byteLength; },
    close: () => w.close(),
    abort: () => w.abort().catch(() => {}),
  };
}

/** Renames `dir`/`from` to `to`, replacing `to`. */
async function rename(dir, from, to) {
  await removeIn(dir, to);
  const fh = await dir.getFileHandle(from);
  if (typeof fh.move === 'function') {
    await fh.move(to);
    return;
  }
  // No FileSystemHandle.move: copy in pieces, then drop the temporary file.
  const w = await fileWriter(dir, to);
  const r = (await fh.getFile()).stream().getReader();
  try {
    for (let x = await r.read(); !x.done; x = await r.read()) await w.write(x.value);
    await w.close();
  } catch (e) {
    await w.abort();
    await removeIn(dir, to).catch(() => {});
    throw e;
  }
  await removeIn(dir, from);
}

const tempName = (name) => `${name}.${Math.random().toString(36).slice(2, 10)}.part`;

/**
 * Writes `dir`/`name` from `pieces` (an iterable or async iterable of Uint8Array) under a
 * temporary name, renamed to `name` when every piece is written; nothing is left behind on
 * failure (a piece that fails to come, too). Resolves to the bytes written.
 */
export async function writeWhole(dir, name, pieces) {
  const tmp = tempName(name);
  const w = await fileWriter(dir, tmp);
  try {
    for await (const p of pieces) await w.write(p);
    await w.close();
    await rename(dir, tmp, name);
    return w.written;
  } catch (e) {
    await w.abort();
    await removeIn(dir, tmp).catch(() => {});
    throw e;
  }
}

/** How much of a Uint8Array save / saveLora write to OPFS at a time. */
export const PIECE_BYTES = 4 << 20;

/**
 * The pieces of a saved file: a Uint8Array (views, no copies), or the wasm side's
 * WasmSaveStream (`next_chunk()`: each chunk made only when its turn comes, awaited through
 * `guard`, the wasm trap guard; `size()` the file's length, checked at the end).
 */
export async function* piecesOf(file, guard = (p) => p, what = 'save', size = PIECE_BYTES) {
  if (file instanceof Uint8Array) {
    for (let off = 0; off < file.byteLength; off += size) yield file.subarray(off, Math.min(off + size, file.byteLength));
    return;
  }
  const total = file.size();
  let n = 0;
  for (let c = await guard(file.next_chunk(), what); c !== undefined; c = await guard(file.next_chunk(), what)) {
    n += c.byteLength;
    yield c;
  }
  if (n !== total) throw new GgwebError('internal', `${what}: the file came to ${n} bytes, not the ${total} its header promised; nothing was written`);
}

// --- Models stored by loads with cache: 'opfs' ----------------------------------------------

/** The file name (without extension) of the model stored for `url`: its SHA-256 in hex. */
export async function modelKey(url) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url)));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** The record of a stored model (`key`), with its File, or null when none is stored whole. */
async function storedModelByKey(dir, key) {
  const rec = await fileIn(dir, `${key}.json`);
  const data = await fileIn(dir, `${key}.gguf`);
  if (!rec || !data) return null;
  let meta;
  try {
    meta = JSON.parse(await (await rec.getFile()).text());
  } catch {
    return null;
  }
  const file = await data.getFile();
  if (typeof meta?.url !== 'string' || file.size !== meta.bytes) return null;
  return { meta, file };
}

/**
 * The model stored for `url` in OPFS: { file, total, headers (a Headers with its ETag /
 * Last-Modified) } or null.
 */
export async function opfsStored(dir, url) {
  const s = await storedModelByKey(dir, await modelKey(url));
  if (!s || s.meta.url !== url) return null;
  const headers = new Headers();
  if (s.meta.etag) headers.set('ETag', s.meta.etag);
  if (s.meta.lastModified) headers.set('Last-Modified', s.meta.lastModified);
  return { file: s.file, total: s.file.size, headers };
}

/**
 * Starts storing a download of `url` (`res`: its Response) in OPFS under a temporary name.
 * Returns { write(chunk), finish(ok, length) }: `finish(true, n)` renames the file and writes
 * its record when exactly `n` bytes were written, else drops it; it resolves to true when
 * stored, or rejects with the write's error.
 */
export async function opfsBeginStore(dir, url, res) {
  const key = await modelKey(url);
  const tmp = tempName(`${key}.gguf`);
  const w = await fileWriter(dir, tmp);
  let chain = Promise.resolve();
  let failed = null;
  const drop = async () => {
    await w.abort();
    await removeIn(dir, tmp).catch(() => {});
  };
  return {
    get failed() { return failed; },
    write(chunk) {
      if (failed) return;
      chain = chain.then(() => (failed ? null : w.write(chunk))).catch((e) => { failed ??= e; });
    },
    async finish(ok, length) {
      await chain;
      if (!ok || failed || w.written !== length) {
        await drop();
        if (failed) throw failed;
        if (ok) throw new Error(`wrote ${w.written} of ${length} bytes`);
        return false;
      }
      try {
        await w.close();
        // The record goes last: a model without one is not stored (a crash in between).
        await removeIn(dir, `${key}.json`);
        await rename(dir, tmp, `${key}.gguf`);
        const meta = { url, bytes: length, storedAt: Date.now(), etag: res.headers.get('ETag'), lastModified: res.headers.get('Last-Modified') };
        await writeWhole(dir, `${key}.json`, [new TextEncoder().encode(JSON.stringify(meta))]);
        return true;
      } catch (e) {
        await drop();
        throw e;
      }
    },
  };
}

/** Every model stored whole in `dir`: [{ url, bytes, storedAt, etag, store: 'opfs' }], oldest first. */
export async function opfsList(dir) {
  const out = [];
  for await (const [name, h] of dir.entries()) {
    if (h.kind !== 'file' || !name.endsWith('.json')) continue;
    const s = await storedModelByKey(dir, name.slice(0, -5));
    if (s) out.push({ url: s.meta.url, bytes: s.meta.bytes, storedAt: s.meta.storedAt ?? null, etag: s.meta.etag ?? null, store: 'opfs' });
  }
  return out.sort((a, b) => (a.storedAt ?? 0) - (b.storedAt ?? 0));
}

/** Removes the model stored for `url` (its record, its file and any partial file); true when one was stored. */
export async function opfsDelete(dir, url) {
  const key = await modelKey(url);
  const had = !!(await storedModelByKey(dir, key));
  await removeIn(dir, `${key}.json`);
  await removeIn(dir, `${key}.gguf`);
  // Partial downloads of it (a tab closed mid-download leaves its `.part` behind).
  const partial = [];
  for await (const name of dir.keys()) if (name.startsWith(`${key}.gguf.`) && name.endsWith('.part')) partial.push(name);
  for (const name of partial) await removeIn(dir, name).catch(() => {});
  return had;
}

/** Whether OPFS's model folder exists; removes it and everything in it. */
export async function opfsClear(what) {
  const root = await opfsDir(OPFS_MODELS, what, false).then((d) => (d ? navigator.storage.getDirectory() : null));
  if (!root) return false;
  await root.removeEntry(OPFS_MODELS, { recursive: true });
  return true;
}

// --- Checkpoints ----------------------------------------------------------------------------

/** The File of checkpoint `name`; 'invalid' naming it when there is none. */
export async function checkpointFile(name, what) {
  const dir = await opfsDir(OPFS_CHECKPOINTS, what, false);
  const fh = dir ? await fileIn(dir, name) : null;
  if (!fh) throw new GgwebError('invalid', `${what}: no checkpoint named ${JSON.stringify(name)} in the Origin Private File System (written by model.save({ to: 'opfs', name }))`);
  return fh.getFile();
}

/**
 * Writes `file` (a Uint8Array, or a WasmSaveStream, freed here) as checkpoint `name` a piece
 * at a time (temporary name, renamed when whole); its length. `guard` awaits a wasm call
 * (engine.js's trap guard). A failure writes nothing: OPFS's errors are 'unsupported' (the
 * quota named), the wasm side's keep their code.
 */
export async function writeCheckpoint(name, file, what, guard) {
  try {
    const dir = await opfsDir(OPFS_CHECKPOINTS, what);
    return await writeWhole(dir, name, piecesOf(file, guard, what));
  } catch (e) {
    if (e instanceof GgwebError || typeof e?.code === 'string') throw e;
    const quota = e?.name === 'QuotaExceededError' ? ' (the storage quota is full)' : '';
    throw new GgwebError('unsupported', `${what}: could not write ${JSON.stringify(name)} to the Origin Private File System${quota}: ${e?.name ?? 'Error'}: ${e?.message ?? e}; nothing was written`);
  } finally {
    if (!(file instanceof Uint8Array)) file.free();
  }
}
