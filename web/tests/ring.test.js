import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SampleRing } from '../voxline/ring.js';

globalThis.self ??= { crossOriginIsolated: false };

test('reads by absolute index across the wrap', () => {
  const ring = SampleRing.allocate(10, true);
  assert.ok(ring.shared);
  ring.write(Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7]));
  ring.write(Float32Array.from([8, 9, 10, 11, 12]));
  assert.equal(ring.written, 13);
  assert.deepEqual([...ring.read(4, 13)], [4, 5, 6, 7, 8, 9, 10, 11, 12]);
});

test('refuses ranges that were overwritten or not yet written', () => {
  const ring = SampleRing.allocate(4, false);
  ring.write(Float32Array.from([1, 2, 3, 4, 5, 6]));
  assert.throws(() => ring.read(0, 3), RangeError);
  assert.throws(() => ring.read(4, 7), RangeError);
  assert.deepEqual([...ring.read(2, 6)], [3, 4, 5, 6]);
});

test('a second view on the same shared buffer sees the writes', () => {
  const ring = SampleRing.allocate(8, true);
  const reader = new SampleRing(ring.buffer);
  ring.write(Float32Array.from([0.5, 0.25]));
  assert.equal(reader.written, 2);
  assert.deepEqual([...reader.read(0, 2)], [0.5, 0.25]);
});
