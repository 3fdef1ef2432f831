// Where ggweb's four wasm builds are, written so that bundlers can see them.
//
// Vite and webpack follow only literal references: an `import('./pkg/…')` of a string and a
// `new URL('./pkg/…', import.meta.url)`. Each such reference below makes the bundler emit the
// glue module and the wasm file and rewrite the path to where it put them, so an app that
// imports 'ggweb' needs no bundler configuration. Computed paths (a folder name in a variable)
// would be invisible to them, hence one entry per build, spelled out.
//
// A custom deployment that passes `coreUrl` to Model.load does not use this table.

/** Build folder → { glue(): the glue module, wasm(): URL of its .wasm }. */
export const BUILDS = Object.freeze({
  pkg: {
    glue: () => import('./pkg/ggweb_core.js'),
    wasm: () => new URL('./pkg/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-relaxed': {
    glue: () => import('./pkg-relaxed/ggweb_core.js'),
    wasm: () => new URL('./pkg-relaxed/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-threads': {
    glue: () => import('./pkg-threads/ggweb_core.js'),
    wasm: () => new URL('./pkg-threads/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-threads-relaxed': {
    glue: () => import('./pkg-threads-relaxed/ggweb_core.js'),
    wasm: () => new URL('./pkg-threads-relaxed/ggweb_core_bg.wasm', import.meta.url),
  },
});

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
