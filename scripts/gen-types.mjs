// Writes web/ggweb.types.d.ts, the option and result types of the public API, from the Rust
// structs they are (de)serialized from: each struct's fields in serde's spelling (rename_all,
// rename, skip), optional where serde may leave a field out (skip_serializing_if; Option with
// default on an options struct), number arrays as the typed arrays crate/typed.rs writes, doc
// comments as JSDoc. web/ggweb.d.ts re-exports them and adds what only JS has (signal,
// special) and the classes.
//   node scripts/gen-types.mjs          writes the file
//   node scripts/gen-types.mjs --check  fails when the file is not what the structs give
//                                       (tests/types/generated.test.mjs, npm test step 1b)
// A struct is exported by a plain comment line `// ts: export TsName` above its doc comment; a
// field whose JSON form is not its Rust type's (a custom deserializer, a string that is one of
// a few names) says its TS type in a `// ts: TYPE` comment line above it. A
// `#[serde(flatten)]` field makes the interface extend its type's.
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const OUT = path.join(ROOT, 'web/ggweb.types.d.ts');

/** Where the exported structs are: every file under these folders of crate/. */
const DIRS = ['crate/model', 'crate/common', 'crate/backend'];

/**
 * [Rust file, struct, TS name] of every struct marked `// ts: export TsName` (a plain comment
 * line above its doc comment), in file order.
 */
function exported() {
  const out = [];
  for (const dir of DIRS) {
    for (const f of readdirSync(path.join(ROOT, dir), { recursive: true }).filter((f) => f.endsWith('.rs')).sort()) {
      const file = path.join(dir, f);
      const src = readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of src.matchAll(/^\/\/ ts: export (\w+)\n(?:(?:\/\/\/|#\[|\s).*\n)*?pub struct (\w+)/gm)) out.push([file, m[2], m[1]]);
    }
  }
  return out;
}
const TYPES = exported();

/** Rust struct names → their TS names, for fields of those types. */
const NAMED = Object.fromEntries(TYPES.map(([, rust, ts]) => [rust, ts]));
NAMED.Hook = 'Hook'; // hand-written in ggweb.d.ts (its deserializer takes several forms)

/** The TS of a `serialize_with` helper, given the field's Rust type. */
const WRITERS = {
  'crate::typed::f32s': () => 'Float32Array',
  'crate::typed::u32s': () => 'Uint32Array',
  'crate::typed::f32s_list': () => 'Float32Array[]',
  'crate::typed::f32s_list_some': () => 'Float32Array[]',
  'crate::typed::token_logprobs': (ty) => 'TopLogprob' + '[]'.repeat(vecDepth(ty)),
  'crate::typed::index_values': (ty) => '{ index: number; value: number }' + '[]'.repeat(vecDepth(ty)),
  'crate::typed::compute': () => '{ compute: number }',
  'super::hooks::by_name': () => 'Record<string, { shape: number[]; data: Float32Array }>',
  'super::hooks::by_name_some': () => 'Record<string, { shape: number[]; data: Float32Array }>',
  shortest_f32: () => 'number',
  // `Vec<(String, V)>` as an object in the list's order.
  ordered_map: (ty) => `Record<string, ${tsOf(/^Vec<\(String, (.*)\)>$/.exec(ty.trim())[1]).ts}>`,
};

function vecDepth(ty) {
  let d = 0;
  for (let t = ty.trim(); t.startsWith('Vec<'); t = t.slice(4, -1).trim()) d++;
  return d;
}

/** The TS of a plain Rust type, and whether it was an Option. */
function tsOf(ty) {
  ty = ty.trim();
  let m;
  if ((m = /^Option<(.*)>$/.exec(ty))) return { ts: tsOf(m[1]).ts, option: true };
  if ((m = /^Vec<(.*)>$/.exec(ty))) {
    const inner = tsOf(m[1]).ts;
    return { ts: /[ |&]/.test(inner) ? `Array<${inner}>` : `${inner}[]`, option: false };
  }
  if (/^(u8|u16|u32|u64|usize|i8|i16|i32|i64|isize|f32|f64)$/.test(ty)) return { ts: 'number', option: false };
  if ((m = /^BTreeMap<([^,]+), (.*)>$/.exec(ty))) return { ts: `Record<string, ${tsOf(m[2]).ts}>`, option: false };
  if (ty === 'bool') return { ts: 'boolean', option: false };
  if (ty === 'String' || ty === '&str' || ty === "&'static str") return { ts: 'string', option: false };
  if (NAMED[ty]) return { ts: NAMED[ty], option: false };
  throw new Error(`gen-types: no TS type for Rust type ${ty} (add a // ts: comment)`);
}

const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());

/** One struct of `src` as a TS interface. */
function struct(src, file, rust, ts) {
  const start = src.search(new RegExp(`\\npub struct ${rust} \\{`));
  if (start < 0) throw new Error(`gen-types: no \`pub struct ${rust} {\` in ${file}`);
  // The doc and attributes above it.
  const before = src.slice(0, start).split('\n');
  const head = [];
  for (let i = before.length - 1; i >= 0 && /^\s*(\/\/\/|#\[|\)\]|serde\(|feature)/.test(before[i]); i--) head.unshift(before[i].trim());
  const doc = head.filter((l) => l.startsWith('///')).map((l) => l.replace(/^\/\/\/ ?/, ''));
  const attrs = head.filter((l) => !l.startsWith('///')).join(' ');
  const renameAll = /rename_all = "camelCase"/.test(attrs);
  const isOptions = /Deserialize/.test(attrs);
  const body = src.slice(src.indexOf('{', start) + 1, src.indexOf('\n}', start));
  const out = [];
  // `#[serde(flatten)]` fields: their interfaces are extended.
  const bases = [];
  let fdoc = [];
  let fattrs = [];
  let override = null;
  const lines = body.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i].trim();
    if (!l) continue;
    if (l.startsWith('///')) { fdoc.push(l.replace(/^\/\/\/ ?/, '')); continue; }
    if (l.startsWith('// ts:')) { override = l.slice(6).trim(); continue; }
    if (l.startsWith('//')) continue;
    if (l.startsWith('#[')) {
      // An attribute, perhaps over several lines.
      let a = l;
      while (!/\]$/.test(a.trim()) && i + 1 < lines.length) a += ' ' + lines[++i].trim();
      fattrs.push(a);
      continue;
    }
    const m = /^pub ([a-z0-9_]+): (.+),$/.exec(l);
    if (!m) throw new Error(`gen-types: ${file} ${rust}: cannot read the field line ${JSON.stringify(l)}`);
    const [, name, ty] = m;
    const a = fattrs.join(' ');
    fattrs = [];
    const d = fdoc;
    fdoc = [];
    const o = override;
    override = null;
    if (/serde\(skip\)/.test(a)) continue; // not in the JSON
    if (/serde\(flatten\)/.test(a)) {
      bases.push(tsOf(ty).ts);
      continue;
    }
    const rename = /rename = "([^"]+)"/.exec(a)?.[1];
    const key = rename ?? (renameAll ? camel(name) : name);
    const writer = /(?<!de)serialize_with = "([^"]+)"/.exec(a)?.[1];
    let t;
    const option = /^Option<.*>$/.test(ty);
    if (o) t = o;
    else if (writer) {
      if (!WRITERS[writer]) throw new Error(`gen-types: ${file} ${rust}.${name}: unknown serialize_with ${writer}`);
      t = WRITERS[writer](ty.replace(/^Option<(.*)>$/, '$1'));
    } else t = tsOf(ty).ts;
    const optional = /skip_serializing_if/.test(a) || (isOptions && option && /default/.test(a));
    const nullable = option && !optional && !writer && !o;
    if (d.length) out.push(jsdoc(d, '  '));
    out.push(`  ${key}${optional ? '?' : ''}: ${t}${nullable ? ' | null' : ''};`);
  }
  out.push('}');
  const extend = bases.length ? ` extends ${bases.join(', ')}` : '';
  return [...(doc.length ? [jsdoc(doc, '')] : []), `export interface ${ts}${extend} {`, ...out].join('\n');
}

function jsdoc(lines, indent) {
  // Rust's intra-doc links ([`X`](path), [`X`]) read as code in TS.
  const text = lines.map((l) => l.replace(/\[`([^`]+)`\]\([^)]*\)/g, '`$1`').replace(/\[`([^`]+)`\]/g, '`$1`').replace(/\*\//g, '*\\/'));
  if (text.length === 1) return `${indent}/** ${text[0]} */`;
  return [`${indent}/**`, ...text.map((l) => `${indent} *${l ? ' ' + l : ''}`), `${indent} */`].join('\n');
}

export function generate() {
  const parts = [
    '// Generated by scripts/gen-types.mjs from the Rust structs the API\'s options and results are',
    '// (de)serialized from: do not edit; run `node scripts/gen-types.mjs`. npm test fails when it is',
    '// stale (tests/types/generated.test.mjs). web/ggweb.d.ts re-exports these and adds the classes.',
    '',
    "import type { Hook, HookName, Metric, TrainOptimizer } from './ggweb.js';",
    '',
    '/** One of the most likely tokens and its natural-log probability. */',
    'export interface TopLogprob {',
    '  token: number;',
    '  logprob: number;',
    '}',
  ];
  const cache = {};
  for (const [file, rust, ts] of TYPES) {
    cache[file] ??= readFileSync(path.join(ROOT, file), 'utf8');
    parts.push('', struct(cache[file], file, rust, ts));
  }
  return parts.join('\n') + '\n';
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = generate();
  if (process.argv.includes('--check')) {
    let have = '';
    try { have = readFileSync(OUT, 'utf8'); } catch { /* missing: stale */ }
    if (have !== text) {
      console.error('web/ggweb.types.d.ts is stale: run node scripts/gen-types.mjs');
      process.exit(1);
    }
    console.log('web/ggweb.types.d.ts is current');
  } else {
    writeFileSync(OUT, text);
    console.log(`wrote ${path.relative(ROOT, OUT)}`);
  }
}
