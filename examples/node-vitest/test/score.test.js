// ggweb in a Vitest test: Node.js loads a GGUF model from a file path (no worker, no fetch) and
// scores a text. The expected values are Hugging Face transformers' for the tiny GPT-2 test model
// (ggweb's tests/fixtures/tiny-gpt2.inside-ref.json); with your own model, assert what matters to you.
//
//   MODEL=/path/to/model.gguf npx vitest run
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Model } from 'ggweb';

const MODEL = process.env.MODEL ?? new URL('../models/tiny-gpt2-f32.gguf', import.meta.url).pathname;

describe('ggweb in Vitest', () => {
  /** @type {import('ggweb').Model} */
  let model;
  beforeAll(async () => {
    model = await Model.load(MODEL);
  });
  afterAll(async () => {
    await model?.dispose();
  });

  test('the model runs in this process, on the wasm build for Node', () => {
    expect(model.inWorker).toBe(false);
    expect(model.info().arch).toBe('gpt2');
  });

  test("score('Hello world'): GPT-2's token ids, finite negative logprobs", async () => {
    const s = await model.score('Hello world');
    expect(Array.from(s.tokens)).toEqual([15496, 995]); // 'Hello', ' world'
    expect(s.logprobs).toHaveLength(1); // ln p(' world' | 'Hello')
    for (const lp of s.logprobs) {
      expect(Number.isFinite(lp)).toBe(true);
      expect(lp).toBeLessThan(0);
    }
  });

  test("score('Hello, my name is'): the logprobs Hugging Face computes, within 1e-4", async () => {
    const s = await model.score('Hello, my name is', { topK: 1 });
    expect(Array.from(s.tokens)).toEqual([15496, 11, 616, 1438, 318]);
    const hf = [-8.24919605255127, -11.388140678405762, -11.199593544006348, -11.188482284545898];
    s.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(hf[i], 4));
    expect(Array.from(s.ranks)).toEqual([404, 16372, 14581, 14184]);
    expect(s.top.map((row) => row.length)).toEqual([1, 1, 1, 1]);
  });

  test('a missing file fails with a typed error', async () => {
    await expect(Model.load(`${MODEL}.missing`)).rejects.toMatchObject({ name: 'GgwebError', code: 'invalid' });
  });
});
