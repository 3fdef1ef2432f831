// Writes web/ggweb.types.d.ts, the option and result types of the public API, from the Rust
// structs they are (de)serialized from: each struct's fields in serde's spelling (rename_all,
// rename, skip), optional where serde may leave a field out (skip_serializing_if; Option with
// default on an options struct), number arrays as the typed arrays crate/typed.rs writes, doc
// comments as JSDoc; enums as unions in serde's tagging (external, or `tag = "..."`).
// web/ggweb.d.ts re-exports them and adds what only JS has (signal, special) and the classes.
//   node scripts/gen-types.mjs          writes the file
//   node scripts/gen-types.mjs --check  fails when the file is not what the structs give
//                                       (tests/types/generated.test.mjs, npm test step 1b)
// A struct or enum is exported by a plain comment line `// ts: export TsName` above its doc comment; a
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
 * [Rust file, type, TS name, 'struct' | 'enum'] of every struct or enum marked
 * `// ts: export TsName` (a plain comment line above its doc comment), in file order.
 */
function exported() {
  const out = [];
  for (const dir of DIRS) {
    for (const f of readdirSync(path.join(ROOT, dir), { recursive: true }).filter((f) => f.endsWith('.rs')).sort()) {
      const file = path.join(dir, f);
      const src = readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of src.matchAll(/^\/\/ ts: export (\w+)\n(?:(?:\/\/\/|#\[|\s).*\n)*?pub (struct|enum) (\w+)/gm)) out.push([file, m[3], m[1], m[2]]);
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

/** Where `pub KIND NAME {` starts in `src`, its doc lines and its attributes (one string). */
function head(src, file, kind, rust) {
  const start = src.search(new RegExp(`\\npub ${kind} ${rust} \\{`));
  if (start < 0) throw new Error(`gen-types: no \`pub ${kind} ${rust} {\` in ${file}`);
  const before = src.slice(0, start).split('\n');
  const lines = [];
  for (let i = before.length - 1; i >= 0 && /^\s*(\/\/\/|#\[|\)\]|serde\(|feature)/.test(before[i]); i--) lines.unshift(before[i].trim());
  const doc = lines.filter((l) => l.startsWith('///')).map((l) => l.replace(/^\/\/\/ ?/, ''));
  return { start, doc, attrs: lines.filter((l) => !l.startsWith('///')).join(' ') };
}

/** One struct of `src` as a TS interface. */
function struct(src, file, rust, ts) {
  const { start, doc, attrs } = head(src, file, 'struct', rust);
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

/** A variant's name as serde writes it under the enum's `rename_all`. */
function variantKey(name, renameAll) {
  if (renameAll === 'camelCase') return name[0].toLowerCase() + name.slice(1);
  if (renameAll === 'lowercase') return name.toLowerCase();
  if (renameAll === 'snake_case') return name.replace(/[A-Z]/g, (c, i) => (i ? '_' : '') + c.toLowerCase());
  if (renameAll) throw new Error(`gen-types: rename_all = "${renameAll}" on an enum is not handled`);
  return name;
}

/**
 * One enum of `src` as a TS union, as serde (de)serializes it: externally tagged (`{ key: ... }`
 * per struct or newtype variant, `'key'` per unit variant) or, with `tag = "..."`, internally
 * tagged (`{ tag: 'key'; ...fields }`). Variant fields keep their Rust names unless renamed;
 * on an options enum (Deserialize) an Option with `default` is optional.
 */
function enumType(src, file, rust, ts) {
  const { start, doc, attrs } = head(src, file, 'enum', rust);
  const renameAll = /rename_all = "([^"]+)"/.exec(attrs)?.[1];
  const tag = /tag = "([^"]+)"/.exec(attrs)?.[1];
  const isOptions = /Deserialize/.test(attrs);
  const body = src.slice(src.indexOf('{', start) + 1, src.indexOf('\n}', start)).split('\n').map((l) => l.trim());
  const members = [];
  let vdoc = [];
  let vattrs = [];
  const fieldsOf = (lines, where) => {
    const out = [];
    let fd = [];
    let fa = [];
    for (const l of lines) {
      if (!l || l.startsWith('//') && !l.startsWith('///')) continue;
      if (l.startsWith('///')) { fd.push(l.replace(/^\/\/\/ ?/, '')); continue; }
      if (l.startsWith('#[')) { fa.push(l); continue; }
      const m = /^(?:pub )?([a-z0-9_]+): (.+),$/.exec(l);
      if (!m) throw new Error(`gen-types: ${file} ${where}: cannot read the field line ${JSON.stringify(l)}`);
      const a = fa.join(' ');
      const option = /^Option<.*>$/.test(m[2]);
      const optional = /skip_serializing_if/.test(a) || (isOptions && option && /default/.test(a));
      const key = /rename = "([^"]+)"/.exec(a)?.[1] ?? m[1];
      out.push(`${fd.length ? `/** ${fd.join(' ')} */ ` : ''}${key}${optional ? '?' : ''}: ${tsOf(m[2]).ts}${option && !optional ? ' | null' : ''}`);
      fd = [];
      fa = [];
    }
    return out;
  };
  for (let i = 0; i < body.length; i++) {
    const l = body[i];
    if (!l || (l.startsWith('//') && !l.startsWith('///'))) continue;
    if (l.startsWith('///')) { vdoc.push(l.replace(/^\/\/\/ ?/, '')); continue; }
    if (l.startsWith('#[')) { vattrs.push(l); continue; }
    let m;
    let shape;
    const a = vattrs.join(' ');
    if ((m = /^([A-Z]\w*) \{$/.exec(l))) {
      const inner = [];
      while (!/^\},?$/.test(body[++i])) inner.push(body[i]);
      shape = { fields: fieldsOf(inner, `${rust}::${m[1]}`) };
    } else if ((m = /^([A-Z]\w*)\((.+)\),$/.exec(l))) shape = { newtype: tsOf(m[2]).ts };
    else if ((m = /^([A-Z]\w*),$/.exec(l))) shape = {};
    else throw new Error(`gen-types: ${file} ${rust}: cannot read the variant line ${JSON.stringify(l)}`);
    const key = /rename = "([^"]+)"/.exec(a)?.[1] ?? variantKey(m[1], renameAll);
    let t;
    if (tag) {
      if (shape.newtype) throw new Error(`gen-types: ${file} ${rust}::${m[1]}: a newtype variant of an internally tagged enum`);
      t = `{ ${[`${tag}: '${key}'`, ...(shape.fields ?? [])].join('; ')} }`;
    } else if (shape.fields) t = `{ ${key}: { ${shape.fields.join('; ')} } }`;
    else if (shape.newtype) t = `{ ${key}: ${shape.newtype} }`;
    else t = `'${key}'`;
    members.push(vdoc.length ? `  /** ${vdoc.join(' ')} */\n  | ${t}` : `  | ${t}`);
    vdoc = [];
    vattrs = [];
  }
  return [...(doc.length ? [jsdoc(doc, '')] : []), `export type ${ts} =`, members.join('\n') + ';'].join('\n');
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
    "import type { Hook, HookName } from './ggweb.js';",
    '',
    '/** One of the most likely tokens and its natural-log probability. */',
    'export interface TopLogprob {',
    '  token: number;',
    '  logprob: number;',
    '}',
  ];
  const cache = {};
  for (const [file, rust, ts, kind] of TYPES) {
    cache[file] ??= readFileSync(path.join(ROOT, file), 'utf8');
    parts.push('', (kind === 'enum' ? enumType : struct)(cache[file], file, rust, ts));
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
