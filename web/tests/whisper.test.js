import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  agreement, commandConfidence, continuation, repeatStart, WhisperTokenizer, withoutTrailingRepeats, wordCount,
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
  const base = { spelled: 0.5, margin: -1, freeConfidence: 0.5, readingWords: 3, freeWords: 3, agreement: 0.8 };
  const p = commandConfidence(base);
  assert.ok(p > 0 && p < 1);
  assert.ok(commandConfidence({ ...base, spelled: 0.9 }) > p, 'better spelled');
  assert.ok(commandConfidence({ ...base, margin: -3 }) < p, 'further below the free transcript');
  const gain = commandConfidence({ ...base, margin: 2 });
  assert.equal(gain, commandConfidence({ ...base, margin: 0 }), 'a gain is no margin');
  assert.ok(commandConfidence({ ...base, readingWords: 1 }) < p, 'a command read into part of a sentence');
  assert.ok(commandConfidence({ ...base, agreement: 0.1 }) < p, 'a reading the free transcript does not bear out');
  const older = { bias: 1, spelled: 0.5, margin: 0.5, freeConfidence: 0.5, wordRatio: 2 };
  assert.equal(commandConfidence({ ...base, agreement: 0 }, older), commandConfidence(base, older),
    'a model fitted before the agreement existed gives it no weight');
  assert.ok(commandConfidence({ ...base, support: -6 }) < commandConfidence({ ...base, support: -1 }),
    'a reading the unprompted decoder finds less likely');
  assert.equal(commandConfidence({ ...base, support: -1 }), p, 'without a forced decode, support is the margin');
  assert.equal(commandConfidence({ ...base, support: 3 }), commandConfidence({ ...base, support: 0 }),
    'a reading likelier than the greedy transcript gains nothing more');
  assert.equal(commandConfidence({ ...base, support: -9 }, older), commandConfidence(base, older),
    'a model fitted before support existed gives it no weight');
});

test('agreement: letters and digits alike, case, spaces and punctuation aside', () => {
  assert.equal(agreement('Pause.', 'pause'), 1);
  assert.equal(agreement('Lights off', 'lightsoff!'), 1);
  assert.equal(agreement('', '...'), 1, 'two texts without a letter');
  assert.equal(agreement('Stop', ''), 0);
  assert.equal(agreement('pause', 'Paul.'), 0.6, 'two letters of five differ');
  assert.equal(agreement('abc', 'xyz'), 0);
  assert.ok(agreement('What time is it?', 'One song.') < 0.2);
  assert.equal(agreement('Volume to 40%', 'volume to 40'), 1);
  assert.equal(agreement('Ünmute', 'unmute'), 5 / 6, 'accents are letters of their own');
  assert.equal(agreement('resume', 'Reneu'), agreement('Reneu', 'resume'), 'symmetric');
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

test('drafts from an earlier decode go on where the tokens so far last meet it', () => {
  assert.equal(continuation([], [5, 6, 7]), 0, 'nothing decoded yet: from its start');
  assert.equal(continuation([1, 5], [5, 6, 7]), 1);
  assert.equal(continuation([5, 6, 7], [5, 6, 7]), 3, 'all of it decoded: nothing left to draft');
  assert.equal(continuation([9], [5, 6, 7]), -1);
  assert.equal(continuation([1, 2, 3, 4], [4, 9, 9, 4, 8]), 4, 'of two places, the one nearest the position');
  assert.equal(continuation([7, 4, 9], [4, 9, 8, 7, 4, 9, 5]), 6, 'the longest run of last tokens decides');
});
