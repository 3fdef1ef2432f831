// npm pack check: the tarball holds exactly the package's files (the JS API, worker, types,
// and the built wasm), and, installed into an empty project, `import('ggweb')` resolves
// through package.json "exports" and its wasm instantiates.
//   node scripts/check-pack.mjs      (after scripts/build-wasm.sh)
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';


const root = new URL('..', import.meta.url).pathname;
const fail = (msg) => { console.error(`check-pack: ${msg}`); process.exit(1); };

const want = [
  'package.json', 'README.md',
  'web/ggweb.js', 'web/engine.js', 'web/worker.js', 'web/ggweb.d.ts',
  'web/pkg/ggweb_core.js', 'web/pkg/ggweb_core.d.ts', 'web/pkg/ggweb_core_bg.wasm', 'web/pkg/ggweb_core_bg.wasm.d.ts',
];
const tmp = mkdtempSync(join(tmpdir(), 'ggweb-pack-'));
try {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: root, encoding: 'utf8' });
  const [info] = JSON.parse(out);
  const files = info.files.map((f) => f.path).sort();
  const missing = want.filter((f) => !files.includes(f));
  const extra = files.filter((f) => !want.includes(f) && f !== 'LICENSE');
  if (missing.length) fail(`missing from the package: ${missing.join(', ')}`);
  if (extra.length) fail(`unexpected files in the package: ${extra.join(', ')}`);
  console.log(`check-pack: ${info.filename}: ${files.length} files, ${info.size} bytes packed, ${info.unpackedSize} unpacked`);

  const proj = join(tmp, 'proj');
  const dest = join(proj, 'node_modules', 'ggweb');
  mkdirSync(dest, { recursive: true });
  execFileSync('tar', ['xzf', join(tmp, info.filename), '-C', dest, '--strip-components=1']);
  writeFileSync(join(proj, 'package.json'), '{"type":"module","private":true}');
  writeFileSync(join(proj, 'probe.mjs'), `
    import { readFileSync } from 'node:fs';
    import { Model, GgwebError, ERROR_CODES } from 'ggweb';
    import * as core from 'ggweb/pkg/ggweb_core.js';
    if (typeof Model.load !== 'function' || typeof GgwebError !== 'function') throw new Error('exports missing');
    const wasm = readFileSync(new URL('./node_modules/ggweb/web/pkg/ggweb_core_bg.wasm', import.meta.url));
    core.initSync({ module: wasm });
    console.log(JSON.stringify({ version: core.version(), codes: ERROR_CODES.length }));
  `);
  const probe = execFileSync(process.execPath, ['--experimental-wasm-relaxed-simd', 'probe.mjs'], { cwd: proj, encoding: 'utf8' });
  const { version } = JSON.parse(probe.trim().split('\n').pop());
  const pkgVersion = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  if (version !== pkgVersion) fail(`packed wasm says version ${version}, package.json says ${pkgVersion}`);
  console.log(`check-pack: installed copy imports as 'ggweb' and its wasm reports version ${version}`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
