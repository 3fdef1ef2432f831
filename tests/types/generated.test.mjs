// web/ggweb.types.d.ts is what scripts/gen-types.mjs makes from the Rust structs today: a
// change to an option or result struct that was not followed by `node scripts/gen-types.mjs`
// fails here (npm test, step "types").
//   node --test tests/types/generated.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { OUT, generate } from '../../scripts/gen-types.mjs';

test('web/ggweb.types.d.ts is current (node scripts/gen-types.mjs writes it)', () => {
  assert.equal(readFileSync(OUT, 'utf8'), generate(), 'web/ggweb.types.d.ts is stale: run node scripts/gen-types.mjs');
});
