// ggweb/tokenizer: GPT-2's tokenizer without a model, for counting tokens or showing their
// boundaries in an editor. The model's own BPE (crate/tokenizer) in a small wasm module of
// its own (web/pkg-tokenizer/, crate/tokenizer_wasm.rs), on the calling thread: a page, a
// worker or Node.
//
//   import { Tokenizer } from 'ggweb/tokenizer';
//   const tok = await Tokenizer.gpt2();                   // the vocabulary shipped with the package
//   const tok2 = await Tokenizer.load('https://…/gpt2.Q8_0.gguf'); // only the file's header is read
//   tok.encode('Hello world');                            // Uint32Array [15496, 995]
//   tok.encode('Hello world', { offsets: true });         // { ids, offsets: [0, 5, 5, 11] }
//   tok.count('Hello world');                             // 2
//   tok.decode([15496, 995]);                             // 'Hello world'
import init, { WasmTokenizerReader } from './pkg-tokenizer/ggweb_tokenizer.js';
import { GgwebError, abortedError, toGgwebError } from './errors.js';
import { hubSource } from './hub.js';
import { boolOption, checkSignal, optionsObject, show, tokenIds, without } from './input.js';
import { wasmSource } from './node-fs.js';
import { baseUrl, describeSource, readHeader, stallTimeout } from './source.js';

export { GgwebError };

/** The options Tokenizer.load reads (as Model.inspect's, less the memory plan's). */
const LOAD_KEYS = ['signal', 'stallTimeoutMs', 'file', 'revision', 'hubUrl'];

let ready = null;
/** Instantiates the module once (its wasm found where the bundler put it; bytes in Node); a failure is retried on the next call. */
function loadModule() {
  if (!ready) {
    ready = (async () => init({ module_or_path: await wasmSource(new URL('./pkg-tokenizer/ggweb_tokenizer_bg.wasm', import.meta.url)) }))();
    ready.catch(() => { ready = null; });
  }
  return ready;
}

/** Only Tokenizer.load and Tokenizer.gpt2 make a Tokenizer. */
const CONSTRUCT = Symbol('Tokenizer');

export class Tokenizer {
  #t;

  constructor(key, wasm) {
    if (key !== CONSTRUCT) throw new GgwebError('invalid', 'new Tokenizer(): use `await Tokenizer.load(source)` or `await Tokenizer.gpt2()`');
    this.#t = wasm;
  }

  /**
   * The tokenizer of a GPT-2 GGUF file: only its header is read (a URL with Range requests
   * where the server allows them, else the download is cancelled once the header is in; a
   * File/Blob, bytes, a ReadableStream or Response, a Hub id with `file`, or a path in
   * Node), as Model.inspect reads it. A source without a GPT-2 tokenizer is 'format'.
   */
  static async load(source, options = undefined) {
    const o = optionsObject(options, 'Tokenizer.load', LOAD_KEYS);
    const signal = checkSignal(o.signal);
    const stallMs = stallTimeout(o.stallTimeoutMs);
    const hub = hubSource(source, without(o, ['signal', 'stallTimeoutMs']), 'Tokenizer.load', baseUrl());
    if (signal?.aborted) throw abortedError('Tokenizer.load');
    try {
      const [{ src }] = await Promise.all([describeSource(source, hub, 'Tokenizer.load'), loadModule()]);
      return new Tokenizer(CONSTRUCT, await readTokenizer(src, signal, stallMs));
    } catch (e) {
      throw toGgwebError(e, 'internal', 'Tokenizer.load');
    }
  }

  /** GPT-2's tokenizer from the vocabulary shipped with the package (pkg-tokenizer/gpt2-vocab.gguf). */
  static async gpt2(options = undefined) {
    const o = optionsObject(options, 'Tokenizer.gpt2', ['signal']);
    return Tokenizer.load(new URL('./pkg-tokenizer/gpt2-vocab.gguf', import.meta.url).href, o);
  }

  /** The vocabulary's size (50257 for GPT-2). */
  get nVocab() {
    return this.#live('nVocab').n_vocab;
  }

  /** The end-of-text token's id (`<|endoftext|>`, 50256 for GPT-2), or null. */
  get eos() {
    return this.#live('eos').eos ?? null;
  }

  /**
   * Token ids of `text`, as `model.tokenize` gives them. `special`: text like `<|endoftext|>`
   * becomes its control token (default false: it is plain text). `offsets`: returns
   * `{ ids, offsets }` instead, `offsets` holding each token's `[start, end)` in UTF-16
   * code units of `text`, flat (see tokenizer.d.ts).
   */
  encode(text, options = undefined) {
    const o = optionsObject(options, 'Tokenizer.encode', ['special', 'offsets']);
    const special = boolOption(o.special, 'special', false);
    const offsets = boolOption(o.offsets, 'offsets', false);
    const t = this.#live('encode');
    checkText(text, 'Tokenizer.encode');
    if (!offsets) return t.encode(text, special);
    const flat = t.encode_offsets(text, special);
    const n = flat[0];
    return { ids: flat.slice(1, 1 + n), offsets: flat.slice(1 + n) };
  }

  /** How many tokens `text` is (without special tokens, as `encode(text)`). */
  count(text) {
    const t = this.#live('count');
    checkText(text, 'Tokenizer.count');
    return t.encode(text, false).length;
  }

  /** The text of token ids; an id outside the vocabulary is 'invalid', naming it. */
  decode(ids) {
    const t = this.#live('decode');
    const checked = tokenIds(ids, 'Tokenizer.decode');
    try {
      return t.decode(checked);
    } catch (e) {
      throw toGgwebError(e, 'invalid', 'Tokenizer.decode');
    }
  }

  /** Frees the tokenizer's wasm memory now (else when it is garbage collected); later calls are 'disposed'. */
  dispose() {
    this.#t?.free();
    this.#t = null;
  }

  #live(what) {
    if (!this.#t) throw new GgwebError('disposed', `Tokenizer.${what}: the tokenizer was disposed`);
    return this.#t;
  }
}

function checkText(text, what) {
  if (typeof text !== 'string') throw new GgwebError('invalid', `${what}: text must be a string, got ${show(text)}`);
}

/** The tokenizer in `src`'s header (a describeSource descriptor). */
async function readTokenizer(src, signal, stallMs) {
  const { sink } = await readHeader(src, { signal, stallMs, what: 'Tokenizer.load' }, (total) => new WasmTokenizerReader(total));
  return sink.finish(); // consumes the reader; an incomplete header, or no GPT-2 tokenizer, is 'format'
}
