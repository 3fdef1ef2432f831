// Node's file system where the code runs in Node, for local model files and the wasm
// builds' bytes; nothing in a browser. Its own module so that the tokenizer entry reads
// files without importing builds.js (whose literal build paths make bundlers emit every
// model build).

/**
 * Node's `fs` module in Node (and Deno, Bun), else null. Read through process.getBuiltinModule
 * (Node 20.16+) or an import bundlers are told to leave alone, so that a browser bundle
 * neither pulls in nor warns about a Node built-in.
 */
export async function nodeFs() {
  const p = globalThis.process;
  if (!p?.versions?.node) return null;
  if (typeof p.getBuiltinModule === 'function') return p.getBuiltinModule('node:fs');
  const name = 'node:fs';
  return import(/* webpackIgnore: true */ /* @vite-ignore */ name);
}

/**
 * What the glue's init takes for the wasm at `url`: the URL itself (it fetches it), or, for a
 * file: URL (Node, where fetch cannot read files), the file's bytes.
 */
export async function wasmSource(url) {
  const u = new URL(url);
  if (u.protocol !== 'file:') return u;
  const fs = await nodeFs();
  if (!fs) return u;
  return fs.promises.readFile(u);
}
