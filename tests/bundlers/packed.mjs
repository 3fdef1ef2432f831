// The packed ggweb (npm pack of this repository), as the bundler apps and the Node test install it.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, ROOT } from '../e2e/helpers.mjs';

/** $GGWEB_TARBALL (scripts/test.sh packs once for all), else a fresh `npm pack` in tests/artifacts/pack/ (removed at exit). */
export function packedTarball() {
  const given = process.env.GGWEB_TARBALL;
  if (given) {
    if (!existsSync(given)) throw new Error(`GGWEB_TARBALL=${given} does not exist`);
    return given;
  }
  const dest = join(ARTIFACTS, 'pack', String(process.pid));
  mkdirSync(dest, { recursive: true });
  process.on('exit', () => rmSync(dest, { recursive: true, force: true }));
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dest], { cwd: ROOT, encoding: 'utf8' });
  return join(dest, JSON.parse(out)[0].filename);
}

/**
 * `npm ci` in `dir` (its package-lock.json pins the bundler; only the registry is used), then
 * the tarball unpacked into node_modules/ggweb, which is what `npm install <tarball>` does for a
 * package without dependencies, minus rewriting the app's lock file.
 */
export function installPacked(dir, tarball) {
  if (existsSync(join(dir, 'package-lock.json'))) {
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  const dest = join(dir, 'node_modules', 'ggweb');
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  execFileSync('tar', ['xzf', tarball, '-C', dest, '--strip-components=1']);
}
