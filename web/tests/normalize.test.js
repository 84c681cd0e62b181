// The browser's normalisation against the shared vectors (tests/vectors/normalize.json), which the Python
// suite (tests/test_intents_normalize.py) also reads: both implementations must give the same bytes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { foldCase, isCjk, normalize } from '../voxline/normalize.js';

const VECTORS = JSON.parse(readFileSync(new URL('../../tests/vectors/normalize.json', import.meta.url), 'utf8'));

test('the vectors file is the shared one, not empty', () => {
  assert.ok(VECTORS.length >= 40);
});

for (const { input, output, note } of VECTORS) {
  test(`vector ${JSON.stringify(input).slice(0, 40)}${note ? ` (${note})` : ''}`, () => {
    assert.equal(normalize(input), output);
    assert.equal(normalize(output), output, 'normalising twice changes nothing');
  });
}

test('contractions join and percent is a token whatever its width', () => {
  assert.equal(normalize("What's"), 'whats');
  assert.equal(normalize('What\u2019s'), 'whats');
  assert.equal(normalize('30%'), '30 %');
  assert.equal(normalize('30\uff05'), '30 %');
});

test('case folding follows Python casefold, not toLowerCase', () => {
  assert.equal(foldCase('ß'), 'ss');
  assert.equal(foldCase('ẞ'), 'ss');
  assert.equal(foldCase('Σ'), 'σ');
  assert.equal(foldCase('ς'), 'σ');
  assert.equal(foldCase('ᾳ'), 'αι'); // Greek iota subscript expands
  assert.equal(foldCase('ǰ'), 'j\u030c'); // no precomposed lowercase: casefold decomposes
  assert.equal(foldCase('\u13a0'), '\u13a0'); // Cherokee folds to capitals
  assert.equal(foldCase('\uab70'), '\u13a0');
  assert.equal(foldCase('\u0131'), '\u0131'); // dotless i stays
  assert.equal(normalize('ΟΔΟΣ ΣΑΣ'), 'οδοσ σασ');
});

test('CJK ranges', () => {
  for (const char of ['灯', 'カ', '〇', '\u{20000}']) assert.ok(isCjk(char), char);
  for (const char of ['a', '한', '。']) assert.ok(!isCjk(char), char);
});

test('astral characters are one character each', () => {
  assert.equal(normalize('1\u{1F3B5}.5'), '1 5'); // the emoji, not half of it, sits between the digits
  assert.equal(normalize('\u{20000}\u{20001}'), '\u{20000} \u{20001}');
});
