#!/usr/bin/env node
// The file-level import graph of the Rust crate (crate/ by default): fails, naming every
// cycle, when files import each other in a loop (issue 36: the layers are read bottom-up,
// a file never needs one above it). Node only, no dependency.
//
//   node scripts/check-cycles.mjs [DIR]     (DIR: crate/; --edges prints every import)
//
// How it reads the crate: the module tree is walked from each crate root (lib.rs, then each
// file with `fn main`) through `mod x;` declarations (`#[path]` honoured, inline `mod x { }`
// blocks followed). An arrow A -> B is a name A takes from B: every `use` item (trees,
// `self`, `as`, globs; `crate::`, `super::`, `self::`, `ggweb::` and child modules) and every
// path written in code that starts with `crate::`, `super::`, `self::`, `ggweb::` or a child
// module's name. A name is followed through `use`/`pub use` re-exports to the file that
// defines it (`crate::backend::Buffer` is the file where `trait Buffer` stands, not
// backend/mod.rs that re-exports it); a name that is a module is that module's file. `mod x;`
// itself is no arrow (declaring a child is not taking a name from it), and neither is a name a
// file takes from the files of the modules around it (its folder's mod.rs, lib.rs): Rust nests
// a module inside its parent, which sees it whole (farm-studio draws no circle there either).
// Comments, strings and `#[cfg]` are not looked at: test modules count like the rest.
import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { join, dirname, basename, relative, resolve } from 'node:path';

const args = process.argv.slice(2);
const showEdges = args.includes('--edges');
const dirArg = args.find((a) => !a.startsWith('--')) ?? join(dirname(new URL(import.meta.url).pathname), '..', 'crate');
const ROOT = resolve(dirArg);
if (!existsSync(join(ROOT, 'lib.rs'))) {
    console.error(`check-cycles: no lib.rs in ${ROOT}`);
    process.exit(2);
}
const rel = (f) => relative(resolve(ROOT, '..'), f);

// ---- tokens: idents, '::', single punctuation, strings (for #[path]); comments dropped ----
function tokenize(src) {
    const toks = [];
    let i = 0;
    const n = src.length;
    const isIdStart = (c) => /[A-Za-z_]/.test(c) || c > '\x7f';
    const isId = (c) => /[A-Za-z0-9_]/.test(c) || c > '\x7f';
    while (i < n) {
        const c = src[i];
        if (c === '/' && src[i + 1] === '/') {
            while (i < n && src[i] !== '\n') i++;
        } else if (c === '/' && src[i + 1] === '*') {
            let depth = 1;
            i += 2;
            while (i < n && depth > 0) {
                if (src[i] === '/' && src[i + 1] === '*') (depth++, (i += 2));
                else if (src[i] === '*' && src[i + 1] === '/') (depth--, (i += 2));
                else i++;
            }
        } else if (/\s/.test(c)) {
            i++;
        } else if ((c === 'r' || (c === 'b' && src[i + 1] === 'r') || (c === 'c' && src[i + 1] === 'r')) && /^[bc]?r#*"/.test(src.slice(i, i + 260))) {
            // raw string r"..", r#".."#, br#".."#
            const m = /^[bc]?r(#*)"/.exec(src.slice(i, i + 260));
            const end = src.indexOf('"' + m[1], i + m[0].length);
            const stop = end < 0 ? n : end + 1 + m[1].length;
            toks.push({ t: 'str', v: src.slice(i + m[0].length, end < 0 ? n : end) });
            i = stop;
        } else if (c === '"' || ((c === 'b' || c === 'c') && src[i + 1] === '"')) {
            let j = c === '"' ? i + 1 : i + 2;
            let v = '';
            while (j < n && src[j] !== '"') {
                if (src[j] === '\\') (v += src[j + 1]), (j += 2);
                else v += src[j++];
            }
            toks.push({ t: 'str', v });
            i = j + 1;
        } else if (c === "'" || (c === 'b' && src[i + 1] === "'")) {
            // char literal ('a', '\n', '\u{..}', b'x') or a lifetime ('a, 'static)
            const k = c === "'" ? i : i + 1;
            if (src[k + 1] === '\\') {
                let j = k + 3; // past the escaped character ('\'' included)
                while (j < n && src[j] !== "'") j++;
                i = j + 1;
            } else {
                const cp = src.codePointAt(k + 1);
                const w = cp > 0xffff ? 2 : 1;
                if (src[k + 1 + w] === "'") i = k + 2 + w;
                else i = k + 1; // lifetime: the ident follows
            }
        } else if (isIdStart(c)) {
            let j = i + 1;
            while (j < n && isId(src[j])) j++;
            let v = src.slice(i, j);
            if (v === 'r' && src[j] === '#' && isIdStart(src[j + 1] ?? '')) {
                // raw identifier r#type
                let k = j + 1;
                while (k < n && isId(src[k])) k++;
                v = src.slice(j + 1, k);
                j = k;
            }
            toks.push({ t: 'id', v });
            i = j;
        } else if (/[0-9]/.test(c)) {
            let j = i + 1;
            while (j < n && /[0-9A-Za-z_.]/.test(src[j]) && !(src[j] === '.' && src[j + 1] === '.')) j++;
            toks.push({ t: 'num', v: src.slice(i, j) });
            i = j;
        } else if (c === ':' && src[i + 1] === ':') {
            toks.push({ t: 'p', v: '::' });
            i += 2;
        } else {
            toks.push({ t: 'p', v: c });
            i++;
        }
    }
    return toks;
}

// ---- the module tree ----
// A module: { path: [..segments], crate, file, dir (where its `mod x;` children live),
//   children: Map<name, module>, defs: Set<name>, imports: Map<name, use>, globs: [use] }
// A use (or a path in code): { scope: module, segs: [...], name, file, top: bool }
const modules = [];
const refs = []; // every use item and path in code, resolved once the tree is whole
const crates = new Map(); // crate name ('lib', or the root file) -> root module
const fileSeen = new Set();
const warnings = [];

const KEYWORDS_DEF = new Set(['fn', 'struct', 'enum', 'trait', 'type', 'const', 'static', 'union']);
const NOT_PATH_START = new Set(['Self', 'crate', 'super', 'self', 'ggweb']);

function newModule(parent, name, file, dir, crate) {
    const m = {
        path: parent ? [...parent.path, name] : [],
        parent,
        crate,
        file,
        dir,
        children: new Map(),
        defs: new Set(),
        imports: new Map(),
        globs: [],
    };
    if (parent) parent.children.set(name, m);
    modules.push(m);
    return m;
}

function parseFile(file, mod) {
    if (fileSeen.has(file)) {
        warnings.push(`${rel(file)} is a module twice`);
        return;
    }
    fileSeen.add(file);
    const toks = tokenize(readFileSync(file, 'utf8'));
    // scopes: the file's module, then inline `mod x { }` blocks; depth = braces open inside it
    const scopes = [{ mod, depth: 0, dir: mod.dir }];
    let depth = 0;
    let pathAttr = null;
    const at = (k) => toks[k] ?? { t: 'eof', v: '' };
    for (let i = 0; i < toks.length; i++) {
        const tk = toks[i];
        const scope = scopes[scopes.length - 1];
        const top = depth === scope.depth;
        if (tk.t === 'p') {
            if (tk.v === '{') depth++;
            else if (tk.v === '}') {
                depth--;
                if (scopes.length > 1 && depth < scope.depth) scopes.pop();
            } else if (tk.v === '#' && (at(i + 1).v === '[' || (at(i + 1).v === '!' && at(i + 2).v === '['))) {
                // an attribute: remember #[path = "..."], skip the rest
                let k = i + (at(i + 1).v === '[' ? 2 : 3);
                if (at(k).v === 'path' && at(k + 1).v === '=' && at(k + 2).t === 'str') pathAttr = at(k + 2).v;
                let b = 1;
                for (; k < toks.length && b > 0; k++) {
                    if (toks[k].v === '[') b++;
                    else if (toks[k].v === ']') b--;
                }
                i = k - 1;
                continue;
            }
            continue;
        }
        if (tk.t !== 'id') continue;
        const prev = at(i - 1);
        if (tk.v === 'pub' && at(i + 1).v === '(') {
            // pub(crate), pub(in crate::x): a visibility, not a path
            let k = i + 2;
            while (k < toks.length && toks[k].v !== ')') k++;
            i = k;
            continue;
        }
        if (tk.v === 'extern' && at(i + 1).v === 'crate') {
            while (i < toks.length && toks[i].v !== ';') i++;
            continue;
        }
        if (tk.v === 'mod' && at(i + 1).t === 'id' && prev.v !== '::') {
            const name = at(i + 1).v;
            if (at(i + 2).v === ';') {
                let child;
                if (pathAttr) child = resolve(scope === scopes[0] ? dirname(file) : scope.dir, pathAttr);
                else {
                    const a = join(scope.dir, name + '.rs');
                    const b = join(scope.dir, name, 'mod.rs');
                    child = existsSync(a) ? a : existsSync(b) ? b : null;
                }
                if (!child || !existsSync(child)) warnings.push(`${rel(file)}: no file for mod ${name}`);
                else if (!child.startsWith(ROOT + '/')) {
                    // a module outside the directory (test support): not a room of this graph
                    newModule(scope.mod, name, null, null, scope.mod.crate);
                } else {
                    const isModRs = basename(child) === 'mod.rs';
                    const cdir = isModRs ? dirname(child) : join(dirname(child), basename(child, '.rs'));
                    const cm = newModule(scope.mod, name, child, cdir, scope.mod.crate);
                    parseFile(child, cm);
                }
                pathAttr = null;
                i += 2;
                continue;
            }
            if (at(i + 2).v === '{') {
                const cm = newModule(scope.mod, name, file, join(scope.dir, name), scope.mod.crate);
                depth++;
                scopes.push({ mod: cm, depth, dir: join(scope.dir, name) });
                pathAttr = null;
                i += 2;
                continue;
            }
        }
        if (tk.v !== 'pub') pathAttr = null;
        if (tk.v === 'use' && prev.v !== '::') {
            let k = i + 1;
            const body = [];
            while (k < toks.length && toks[k].v !== ';') body.push(toks[k++]);
            i = k;
            for (const u of useTree(body)) refs.push({ scope: scope.mod, ...u, file, top, isUse: true });
            continue;
        }
        if (top && KEYWORDS_DEF.has(tk.v) && at(i + 1).t === 'id' && prev.v !== '::') {
            scope.mod.defs.add(at(i + 1).v);
            continue;
        }
        if (top && tk.v === 'macro_rules' && at(i + 1).v === '!' && at(i + 2).t === 'id') {
            scope.mod.defs.add(at(i + 2).v);
            continue;
        }
        // a path in code: `crate::a::B`, `super::x`, `child::y` (not `x::y` after another `::`)
        if (at(i + 1).v === '::' && prev.v !== '::' && !(prev.v === '$' && tk.v !== 'crate')) {
            const segs = [tk.v];
            let k = i + 1;
            while (at(k).v === '::' && at(k + 1).t === 'id') {
                segs.push(at(k + 1).v);
                k += 2;
            }
            if (segs.length > 1 && tk.v !== 'Self') refs.push({ scope: scope.mod, segs, name: segs[segs.length - 1], file, isUse: false });
            i = k - 1;
        }
    }
}

// `use` tree -> [{ segs, name (the alias bound), glob }]
function useTree(body) {
    const out = [];
    let k = 0;
    if (body[0]?.v === '::') return out; // ::extern_crate
    function tree(prefix) {
        const segs = [...prefix];
        for (;;) {
            const t = body[k];
            if (!t) return;
            if (t.v === '*') {
                k++;
                out.push({ segs, name: '*', glob: true });
                return;
            }
            if (t.v === '{') {
                k++;
                while (body[k] && body[k].v !== '}') {
                    tree(segs);
                    if (body[k]?.v === ',') k++;
                }
                k++;
                return;
            }
            if (t.t === 'id') {
                k++;
                if (body[k]?.v === '::') {
                    segs.push(t.v);
                    k++;
                    continue;
                }
                let name = t.v;
                let full = [...segs, t.v];
                if (t.v === 'self') full = segs, (name = segs[segs.length - 1]);
                if (body[k]?.v === 'as' && body[k + 1]) {
                    name = body[k + 1].v;
                    k += 2;
                }
                out.push({ segs: full, name, glob: false });
                return;
            }
            k++; // stray token
            return;
        }
    }
    tree([]);
    return out;
}

// ---- walk every crate root ----
function listRs(d) {
    const out = [];
    for (const e of readdirSync(d).sort()) {
        const p = join(d, e);
        if (statSync(p).isDirectory()) out.push(...listRs(p));
        else if (e.endsWith('.rs')) out.push(p);
    }
    return out;
}
const allFiles = listRs(ROOT);
function addCrate(name, file) {
    const m = newModule(null, '', file, dirname(file), name);
    crates.set(name, m);
    parseFile(file, m);
}
addCrate('lib', join(ROOT, 'lib.rs'));
for (const f of allFiles) {
    if (!fileSeen.has(f) && /\bfn\s+main\s*\(/.test(readFileSync(f, 'utf8'))) addCrate(rel(f), f);
}
for (const f of allFiles) if (!fileSeen.has(f)) warnings.push(`${rel(f)} is in no module tree (not read)`);

// ---- resolving a path to the file that defines its name ----
function startOf(scope, first) {
    if (first === 'crate') return crates.get(scope.crate);
    if (first === 'ggweb') return crates.get('lib');
    if (first === 'self') return scope;
    if (first === 'super') return scope.parent;
    if (scope.children.has(first)) return scope; // a child module, relative to here
    return null; // an external crate (core, alloc, std, serde, ...) or a local name
}

// -> { mod, rest } where mod is the deepest module the segments walk to
function walk(scope, segs) {
    let m = startOf(scope, segs[0]);
    if (!m) return null;
    let i = segs[0] === 'crate' || segs[0] === 'ggweb' || segs[0] === 'self' || segs[0] === 'super' ? 1 : 0;
    while (i < segs.length && segs[i] === 'super' && m.parent) (m = m.parent), i++;
    while (i < segs.length && m.children.has(segs[i])) m = m.children.get(segs[i++]);
    return { mod: m, rest: segs.slice(i) };
}

// the module (file) that defines `name` as seen from module `m`, following its imports
function defining(m, name, seen = new Set()) {
    const key = m.path.join('::') + '#' + m.crate + '#' + name;
    if (seen.has(key)) return m;
    seen.add(key);
    if (m.defs.has(name) || m.children.has(name)) return m.children.get(name) ?? m;
    const imp = m.imports.get(name);
    if (imp) {
        const w = walk(imp.scope, imp.segs);
        if (w) return w.rest.length === 0 ? w.mod : defining(w.mod, w.rest[0], seen);
        return m;
    }
    for (const g of m.globs) {
        const w = walk(g.scope, g.segs);
        if (w && w.rest.length === 0 && w.mod !== m) {
            const d = defining(w.mod, name, seen);
            if (d !== w.mod || w.mod.defs.has(name)) return d;
        }
    }
    return m;
}

for (const r of refs) {
    if (!r.isUse || r.top === false) continue;
    if (r.glob) r.scope.globs.push(r);
    else if (r.name !== '_') r.scope.imports.set(r.name, r);
}

function ancestorFiles(m) {
    const out = new Set();
    for (let a = m.parent; a; a = a.parent) if (a.file) out.add(a.file);
    return out;
}

const edges = new Map(); // from -> Map<to, Set<names>>
for (const r of refs) {
    if (!r.isUse && !['crate', 'super', 'self', 'ggweb'].includes(r.segs[0]) && !r.scope.children.has(r.segs[0])) continue;
    const w = walk(r.scope, r.segs);
    if (!w) continue;
    let target = w.rest.length === 0 ? w.mod : defining(w.mod, w.rest[0]);
    const file = target.file;
    // a module is part of its parent: what a child takes from an ancestor's own file is no arrow
    if (!file || file === r.file || ancestorFiles(r.scope).has(file)) continue;
    const label = w.rest.length === 0 ? r.segs[r.segs.length - 1] : r.glob ? '*' : w.rest[0];
    if (!edges.has(r.file)) edges.set(r.file, new Map());
    const to = edges.get(r.file);
    if (!to.has(file)) to.set(file, new Set());
    to.get(file).add(label === 'self' ? basename(file, '.rs') : label);
}

// ---- strongly connected components (Tarjan) ----
const files = [...fileSeen].sort();
const index = new Map();
const low = new Map();
const onStack = new Set();
const stack = [];
const sccs = [];
let counter = 0;
function strong(v) {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of [...(edges.get(v)?.keys() ?? [])].sort()) {
        if (!index.has(w)) {
            strong(w);
            low.set(v, Math.min(low.get(v), low.get(w)));
        } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
        const c = [];
        let w;
        do {
            w = stack.pop();
            onStack.delete(w);
            c.push(w);
        } while (w !== v);
        if (c.length > 1) sccs.push(c.sort());
    }
}
for (const f of files) if (!index.has(f)) strong(f);

const nEdges = [...edges.values()].reduce((s, m) => s + m.size, 0);
for (const w of warnings) console.log(`warning: ${w}`);
if (showEdges) {
    for (const [from, to] of [...edges].sort()) for (const [f, names] of [...to].sort()) console.log(`${rel(from)} -> ${rel(f)}: ${[...names].sort().join(', ')}`);
}
sccs.sort((a, b) => a[0].localeCompare(b[0]));
sccs.forEach((c, k) => {
    console.log(`cycle ${k + 1}: ${c.length} files: ${c.map(rel).join(', ')}`);
    const inC = new Set(c);
    for (const from of c)
        for (const [to, names] of [...(edges.get(from) ?? [])].sort())
            if (inC.has(to)) console.log(`  ${rel(from)} -> ${rel(to)}: ${[...names].sort().join(', ')}`);
});
const summary = `${files.length} files, ${nEdges} file imports in ${rel(ROOT)}/`;
if (sccs.length) {
    console.log(`import cycles: ${sccs.length} (${summary}): FAILED`);
    process.exit(1);
}
console.log(`import cycles: 0 (${summary}): ok`);
