// Mistakes ggweb.d.ts must catch: each line under a `// @ts-expect-error: TEXT` directive
// must fail to compile (an unused directive is itself an error, TS2578), and
// tests/types/types.test.mjs checks that it fails for that reason (its message contains TEXT).
import { Model, type GenerateOptions, type ModelInfo, type InspectResult } from 'ggweb';
import { Tokenizer } from 'ggweb/tokenizer';

declare const model: Model;
declare const info: ModelInfo;
declare const inspected: InspectResult;
declare const tokenizer: Tokenizer;

export async function typos(): Promise<unknown[]> {
  const out: unknown[] = [];
  // @ts-expect-error: 'maxToken' does not exist in type 'GenerateOptions'
  out.push(model.generate('x', { maxToken: 5 }));
  // @ts-expect-error: 'reuse_prompt' does not exist in type 'GenerateOptions'
  const o: GenerateOptions = { reuse_prompt: false };
  out.push(o);
  // @ts-expect-error: 'nctx' does not exist in type 'LoadOptions'
  out.push(await Model.load('m.gguf', { nctx: 512 }));
  // @ts-expect-error: Type 'string' is not assignable to type 'boolean | undefined'
  out.push(await Model.load('m.gguf', { shared: 'yes' }));
  // @ts-expect-error: Type '"yes"' is not assignable to type 'boolean | "auto" | undefined'
  out.push(await Model.load('m.gguf', { memory64: 'yes' }));
  // @ts-expect-error: Property 'joined' does not exist on type
  out.push(info.load.joined);
  // @ts-expect-error: Property 'nVocabs' does not exist on type 'Hparams'
  out.push(info.hparams.nVocabs);
  // @ts-expect-error: Property 'n_embed' does not exist on type 'Hparams'
  out.push(inspected.hparams.n_embed);
  // @ts-expect-error: Property 'backendNotes' does not exist on type 'ModelInfo'
  out.push(info.backendNotes);
  // @ts-expect-error: Property 'cachedToken' does not exist on type 'GenerateStats'
  out.push((await model.generate('x').stats)?.cachedToken);
  // @ts-expect-error: Type '"f8"' is not assignable to type
  out.push(await Model.load('m.gguf', { kvType: 'f8' }));
  // @ts-expect-error: Property 'toStream' does not exist on type 'Generation'
  out.push(model.generate('x').toStream());
  // @ts-expect-error: 'topk' does not exist in type 'ScoreOptions'
  out.push(await model.score('x', { topk: 3 }));
  // @ts-expect-error: Type 'AbortController' is missing the following properties from type 'AbortSignal'
  out.push(await model.patch('a', 'b', { at: 'z', answer: 1, against: 2, signal: new AbortController() }));
  // @ts-expect-error: Property 'steps' is missing
  out.push(model.train('text', { seqLen: 8 }));
  // @ts-expect-error: Type '"adam"' is not assignable to type '"adamw" | "sgd"'
  out.push(model.train('text', { steps: 1, optimizer: { type: 'adam', lr: 1 } }));
  // @ts-expect-error: Type '"exp"' is not assignable to type '"none" | "linear" | "cosine"'
  out.push(model.train('text', { steps: 1, lrSchedule: { decay: 'exp' } }));
  // @ts-expect-error: Type '"disk"' is not assignable to type '"opfs"'
  out.push(await model.save({ type: 'f32', to: 'disk', name: 'x' }));
  // @ts-expect-error: Type '"opf"' is not assignable to type '"cache" | "opfs" | undefined'
  out.push(await Model.cache.list({ store: 'opf' }));
  // @ts-expect-error: Type 'string' is not assignable to type 'boolean | undefined'
  out.push(await model.save({ type: 'f32', optimizer: 'yes' }));
  // @ts-expect-error: Type '"q4_0"' is not assignable to type '"f32" | "f16" | "q8_0" | undefined'
  out.push(await model.save({ type: 'q4_0' }));
  // @ts-expect-error: 'offset' does not exist in type
  out.push(tokenizer.encode('x', { offset: true }));
  // @ts-expect-error: Property 'offsets' does not exist on type 'Uint32Array
  out.push(tokenizer.encode('x', { special: true }).offsets);
  // @ts-expect-error: Constructor of class 'Tokenizer' is private
  out.push(new Tokenizer());
  return out;
}
