import { test } from 'node:test';
import assert from 'node:assert/strict';
import { repeatStart, WhisperTokenizer } from '../voxline/whisper.js';

test('the repeat guard finds a restarted 3-gram and nothing else', () => {
  assert.equal(repeatStart([1, 2, 3, 4, 5, 6]), -1);
  assert.equal(repeatStart([1, 2, 3, 4, 1, 2, 3]), 4);
  assert.equal(repeatStart([7, 7, 7, 7, 7, 7]), 3);
  assert.equal(repeatStart([1, 2, 1, 2]), -1);
});

test('byte-level tokens decode to UTF-8 text and skip special ids', () => {
  // 'Ġ' is the byte-level spelling of a space; 'Ã©' the two bytes of 'é'.
  const table = { tokens: ['Ġcaf', 'Ã©', '.', '<|endoftext|>'], special: { eot: 3 } };
  assert.equal(new WhisperTokenizer(table).decode([0, 1, 2, 3]), 'café.');
});
