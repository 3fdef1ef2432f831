// web/ggweb.d.ts compiled as an app would use it (npm test, step "types"):
//   1. tsc --strict --noEmit over tests/types (usage.ts: every export, method, option and
//      result field; typos.ts: mistakes under `// @ts-expect-error`, which fail the compile
//      if the line below them compiles);
//   2. typos.ts without its directives: each marked line fails, for the reason its
//      directive names (so a line failing for another reason cannot pass for a caught typo);
//   3. the mechanism itself: a directive over a line that compiles fails the compile.
//   node --test tests/types/types.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import ts from 'typescript';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const CONFIG = path.join(HERE, 'tsconfig.json');
const TYPOS = path.join(HERE, 'typos.ts');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const DIRECTIVE = /^\s*\/\/ @ts-expect-error: (.+)$/;

/** Compiles the tests/types project with `replace` (path → text) in place of files; the diagnostics. */
function compile(replace = {}) {
  const parsed = ts.getParsedCommandLineOfConfigFile(CONFIG, { strict: true, noEmit: true }, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); } });
  const host = ts.createCompilerHost(parsed.options);
  const { getSourceFile, readFile, fileExists } = host;
  const given = (f) => replace[path.resolve(f)];
  host.readFile = (f) => given(f) ?? readFile.call(host, f);
  host.fileExists = (f) => given(f) !== undefined || fileExists.call(host, f);
  host.getSourceFile = (f, lang, ...rest) => given(f) !== undefined
    ? ts.createSourceFile(f, given(f), lang)
    : getSourceFile.call(host, f, lang, ...rest);
  const program = ts.createProgram([...parsed.fileNames, ...Object.keys(replace)], parsed.options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => ({
    file: d.file && path.resolve(d.file.fileName),
    line: d.file ? d.file.getLineAndCharacterOfPosition(d.start).line : -1,
    code: d.code,
    text: ts.flattenDiagnosticMessageText(d.messageText, '\n'),
  }));
}

test('tsc --strict --noEmit compiles ggweb.d.ts with tests/types/usage.ts and typos.ts', () => {
  const r = spawnSync(process.execPath, [tsc, '--strict', '--noEmit', '--pretty', 'false', '-p', CONFIG], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
  assert.equal(r.stdout + r.stderr, '');
});

test('every marked line of typos.ts fails to compile, for the reason its directive names', () => {
  const lines = ts.sys.readFile(TYPOS).split('\n');
  const expected = lines.flatMap((l, i) => (DIRECTIVE.test(l) ? [{ line: i + 1, want: l.match(DIRECTIVE)[1] }] : []));
  assert.ok(expected.length >= 8, `only ${expected.length} typos`);
  const stripped = lines.map((l) => l.replace(DIRECTIVE, '// expected: $1')).join('\n');
  const diags = compile({ [TYPOS]: stripped }).filter((d) => d.file === TYPOS);
  for (const { line, want } of expected) {
    const here = diags.filter((d) => d.line === line);
    assert.ok(here.some((d) => d.text.includes(want)), `typos.ts:${line + 1}: expected an error containing ${JSON.stringify(want)}, got ${JSON.stringify(here.map((d) => d.text))}`);
  }
  // And nothing else fails there.
  const stray = diags.filter((d) => !expected.some((e) => e.line === d.line));
  assert.deepEqual(stray, []);
});

test('a directive over a line that compiles fails the compile (TS2578), a typo without one fails too', () => {
  const probe = path.join(HERE, 'probe.ts');
  const diags = compile({
    [probe]: [
      "import type { GenerateOptions, ModelInfo } from 'ggweb';",
      '// @ts-expect-error: nothing is wrong below',
      'export const fine: GenerateOptions = { maxTokens: 1, reusePrompt: true };',
      'export const typo = (i: ModelInfo) => i.hparams.nCtxx;',
    ].join('\n'),
  }).filter((d) => d.file === probe);
  assert.deepEqual(diags.map((d) => [d.line + 1, d.code]), [[2, 2578], [4, 2551]]);
});
