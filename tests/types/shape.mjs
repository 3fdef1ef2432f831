// The shape ggweb.d.ts declares for a result type, read with the TypeScript checker, and a
// comparison with a real object: tests/e2e/model.spec.mjs checks that info(), stats, score
// and inspect results have exactly the declared fields (no more, none missing), so the
// exact types in the d.ts (no index signatures) stay true to what the runtime returns.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const D_TS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../web/ggweb.d.ts');
/** Where ggweb's own types are declared: the hand-written file and the one generated from Rust. */
const OURS = [D_TS, D_TS.replace(/ggweb\.d\.ts$/, 'ggweb.types.d.ts')];
let checker;
let file;

/**
 * `{ key: { optional, shape } }` of the exported interface `name`, nested where a field is
 * itself an object type declared in ggweb.d.ts or ggweb.types.d.ts; `true` (a leaf) for primitives, arrays,
 * typed arrays, records (index signatures) and library types.
 */
export function declaredShape(name) {
  if (!checker) {
    const program = ts.createProgram([D_TS], { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'], types: [] });
    checker = program.getTypeChecker();
    file = program.getSourceFile(D_TS);
  }
  const sym = checker.getExportsOfModule(checker.getSymbolAtLocation(file)).find((s) => s.name === name);
  if (!sym) throw new Error(`ggweb.d.ts exports no ${name}`);
  return walk(checker.getDeclaredTypeOfSymbol(sym));
}

function walk(type) {
  let t = checker.getNonNullableType(type);
  if (t.isUnion()) {
    const objects = t.types.filter((m) => m.flags & ts.TypeFlags.Object);
    if (objects.length !== 1) return true;
    t = objects[0];
  }
  if (!(t.flags & ts.TypeFlags.Object) || checker.isArrayType(t) || checker.getIndexInfosOfType(t).length) return true;
  const decl = t.symbol?.declarations?.[0];
  if (!decl || !OURS.includes(path.resolve(decl.getSourceFile().fileName))) return true;
  return Object.fromEntries(checker.getPropertiesOfType(t).map((p) => [p.name, {
    optional: (p.flags & ts.SymbolFlags.Optional) !== 0,
    shape: walk(checker.getTypeOfSymbol(p)),
  }]));
}

/** Where `value` differs from `shape`: fields it has that are not declared, required ones it lacks. */
export function shapeDiff(value, shape, at = '') {
  if (shape === true || value === null || typeof value !== 'object') return [];
  const out = [];
  for (const k of Object.keys(value)) if (!(k in shape)) out.push(`${at}.${k}: not declared`);
  for (const [k, { optional, shape: s }] of Object.entries(shape)) {
    if (!(k in value)) {
      if (!optional) out.push(`${at}.${k}: missing`);
    } else out.push(...shapeDiff(value[k], s, `${at}.${k}`));
  }
  return out;
}
