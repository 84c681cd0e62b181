import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  commandConfidence, repeatStart, WhisperTokenizer, withoutTrailingRepeats, wordCount,
} from '../voxline/whisper.js';

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

test('command confidence: a probability that rises with the evidence for the reading', () => {
  const base = { spelled: 0.5, margin: -1, freeConfidence: 0.5, readingWords: 3, freeWords: 3 };
  const p = commandConfidence(base);
  assert.ok(p > 0 && p < 1);
  assert.ok(commandConfidence({ ...base, spelled: 0.9 }) > p, 'better spelled');
  assert.ok(commandConfidence({ ...base, margin: -3 }) < p, 'further below the free transcript');
  const gain = commandConfidence({ ...base, margin: 2 });
  assert.equal(gain, commandConfidence({ ...base, margin: 0 }), 'a gain is no margin');
  assert.ok(commandConfidence({ ...base, readingWords: 1 }) < p, 'a command read into part of a sentence');
});

test('words are counted as the confidence model counts them', () => {
  assert.equal(wordCount('Stop, sides are red.'), 4);
  assert.equal(wordCount("Let's skip this song."), 4);
  assert.equal(wordCount('volume to 40%'), 3);
  assert.equal(wordCount(''), 0);
});

test('a loop the repeat guard cut counts its words once', () => {
  assert.equal(wordCount('Console Console Console', true), 1);
  assert.equal(wordCount('Console Console Console'), 3, 'a decode that stopped on its own counts every word');
  assert.equal(wordCount('Turn the music, the music, the music', true), 3);
  assert.equal(wordCount('Set a timer for ten ten', true), 5);
  assert.equal(wordCount('Stop the music', true), 3, 'nothing repeated: every word counts');
  assert.equal(withoutTrailingRepeats(['x', 'y', 'y', 'x', 'y', 'y']), 3, 'the run that removes most');
  assert.equal(withoutTrailingRepeats([]), 0);
});
