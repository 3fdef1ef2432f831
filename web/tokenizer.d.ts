// Types of the `ggweb/tokenizer` entry (web/tokenizer.js): GPT-2's tokenizer without a model.
import type { ModelSource } from './ggweb.js';

export { GgwebError } from './ggweb.js';

/** Tokenizer.load's options: how the file's header is read (as Model.inspect's). */
export interface TokenizerLoadOptions {
  /** Aborting makes the load fail with code 'aborted'. */
  signal?: AbortSignal;
  /** Fail with code 'timeout' when the download brings no byte for this long (ms; default 30000, 0: no limit). */
  stallTimeoutMs?: number;
  /** With a Hub id ("owner/name") as the source: the file in that repository. */
  file?: string;
  /** With `file`: the branch, tag or commit (default 'main'). */
  revision?: string;
  /** With `file`: the Hub's base URL (default https://huggingface.co; a relative one resolves against the page). */
  hubUrl?: string | URL;
}

export interface EncodeOptions {
  /** Parse control tokens' text such as `<|endoftext|>` into their ids (default false: it is plain text), as `model.tokenize`. */
  special?: boolean;
  /** Return `{ ids, offsets }` instead of the ids alone. */
  offsets?: false;
}

export interface EncodeOffsetsOptions {
  special?: boolean;
  offsets: true;
}

export interface EncodedWithOffsets {
  ids: Uint32Array;
  /**
   * Each token's `[start, end)` in UTF-16 code units of the text (string indices), flat:
   * token i is `text.slice(offsets[2 * i], offsets[2 * i + 1])`. A token's span includes its
   * leading space, so the spans tile the text; tokens holding parts of one character (an
   * emoji's bytes split by BPE) each span that whole character.
   */
  offsets: Uint32Array;
}

/**
 * GPT-2's byte-level BPE, the model's own (the same ids as `model.tokenize`), in a small wasm
 * module of its own: no model, no worker. Made by `Tokenizer.load` or `Tokenizer.gpt2`; its
 * calls are synchronous.
 */
export declare class Tokenizer {
  private constructor();
  /**
   * The tokenizer of a GPT-2 GGUF file: only its header is read (Range requests where the
   * server allows them). A source without a GPT-2 tokenizer fails with code 'format'.
   */
  static load(source: ModelSource, options?: TokenizerLoadOptions | null): Promise<Tokenizer>;
  /** GPT-2's tokenizer from the vocabulary shipped with the package. */
  static gpt2(options?: { signal?: AbortSignal } | null): Promise<Tokenizer>;
  /** The vocabulary's size (50257 for GPT-2). */
  readonly nVocab: number;
  /** The end-of-text token's id (50256 for GPT-2), or null. */
  readonly eos: number | null;
  encode(text: string, options?: EncodeOptions | null): Uint32Array;
  encode(text: string, options: EncodeOffsetsOptions): EncodedWithOffsets;
  /** How many tokens `text` is (as `encode(text).length`). */
  count(text: string): number;
  /** The text of token ids (U+FFFD where bytes do not form UTF-8); an id outside the vocabulary is 'invalid'. */
  decode(ids: ArrayLike<number>): string;
  /** Frees its wasm memory now; later calls fail with code 'disposed'. */
  dispose(): void;
}
