// web/errors.js's toGgwebError: how an error thrown by the wasm bindings becomes a GgwebError.
//   node --test tests/node/errors.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GgwebError, toGgwebError } from '../../web/errors.js';

test('the call is named once, whether or not the crate named it already', () => {
  const tagged = (code, message) => Object.assign(new Error(message), { code });
  const a = toGgwebError(tagged('unsupported', 'save: the 9-byte file does not fit in memory'), 'internal', 'save');
  assert.ok(a instanceof GgwebError);
  assert.equal(a.code, 'unsupported');
  assert.equal(a.message, 'save: the 9-byte file does not fit in memory');
  const b = toGgwebError(tagged('invalid', "type must be 'f32'"), 'internal', 'save');
  assert.equal(b.message, "save: type must be 'f32'");
  // A message that only starts with the call's letters is still prefixed.
  const c = toGgwebError(tagged('invalid', 'saveLora: rank'), 'internal', 'save');
  assert.equal(c.message, 'save: saveLora: rank');
  const d = toGgwebError(new Error('boom'), 'internal', 'save');
  assert.deepEqual([d.code, d.message], ['internal', 'save: boom']);
});
