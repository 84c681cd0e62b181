import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CommandGraph, foldToken, LEXICON_FORMAT } from '../voxline/grammar-decode.js';

// A hand-made graph in voxline.intents.lexicon's layout:
//   start: "please" loops back to start; "pause" [the music] ends; "volume to" {level} ends; "play" then free text.
//   {level} is the sub-graph at node 8: "ten" | "10" | "thirty five" return.
const LEXICON = {
  format: LEXICON_FORMAT, version: 'test', lang: 'en', start: 0, tail: 1,
  nodes: [
    /* 0 start */ { w: { please: [0], pause: [2], volume: [4], play: [7] } },
    /* 1 tail */ { e: 1, w: { please: [1] } },
    /* 2 */ { e: 1, w: { the: [3] } },
    /* 3 */ { w: { music: [12] } },
    /* 4 */ { w: { to: [5] } },
    /* 5 */ { c: [[8, 6]] },
    /* 6 after {level} */ { e: 1, w: { '%': [13] } },
    /* 7 */ { f: 1 },
    /* 8 level entry */ { w: { ten: [9], 10: [9], thirty: [10] } },
    /* 9 */ { r: 1 },
    /* 10 */ { w: { five: [11] } },
    /* 11 */ { r: 1 },
    /* 12 */ { e: 1 },
    /* 13 */ { e: 1 },
  ],
};

function walk(graph, tokens) {
  let state = graph.start();
  for (const token of tokens) {
    state = graph.feed(state, token);
    if (!state) return 'refused';
  }
  return graph.complete(state) ? 'complete' : 'partial';
}

test('Whisper-style tokens walk the graph whatever their case, spacing and punctuation', () => {
  const graph = new CommandGraph(LEXICON);
  assert.equal(walk(graph, [' Pause', ' the', ' music', '.']), 'complete');
  assert.equal(walk(graph, ['P', 'AUSE', '!']), 'complete');
  assert.equal(walk(graph, [' Pause', ' the']), 'partial');
  assert.equal(walk(graph, [' Pause', ' the', ' musical']), 'refused');
  assert.equal(walk(graph, [' Paused']), 'refused');
});

test('a word may be split over tokens, and is checked as a prefix on the way', () => {
  const graph = new CommandGraph(LEXICON);
  assert.equal(walk(graph, [' pa', 'use']), 'complete');
  assert.equal(walk(graph, [' px']), 'refused');
});

test('slot calls return to the template, in digits or words, and % is a word of its own', () => {
  const graph = new CommandGraph(LEXICON);
  assert.equal(walk(graph, [' Volume', ' to', ' 10', '%']), 'complete');
  assert.equal(walk(graph, [' volume', ' to', ' thirty', '-', 'five', '.']), 'complete');
  assert.equal(walk(graph, [' volume', ' to', ' thirty']), 'partial');
  assert.equal(walk(graph, [' volume', ' to', ' eleven']), 'refused');
});

test('skip words loop at the start and after a complete command', () => {
  const graph = new CommandGraph(LEXICON);
  assert.equal(walk(graph, [' Please', ' please', ' pause', ',', ' please', '.']), 'complete');
  assert.equal(walk(graph, [' please']), 'partial');
  assert.equal(walk(graph, [' pause', ' the', ' music', ' please', ' the']), 'refused');
});

test('free text takes any words and may end anywhere after the anchor', () => {
  const graph = new CommandGraph(LEXICON);
  assert.equal(walk(graph, [' Play', ' Kind', ' of', ' Blue', '.']), 'complete');
  assert.equal(walk(graph, [' Play']), 'complete');
});

test('apostrophes vanish as in normalize.js, and broken UTF-8 never walks', () => {
  const graph = new CommandGraph({ ...LEXICON, nodes: [{ w: { whats: [1] } }, { e: 1 }] , start: 0, tail: 1 });
  assert.equal(walk(graph, [' What', "'s"]), 'complete');
  assert.equal(walk(graph, [' What', '\u2019', 's']), 'complete');
  assert.equal(walk(graph, [' What', '\ufffd']), 'refused');
});

test('a lexicon of another format is refused', () => {
  assert.throws(() => new CommandGraph({ ...LEXICON, format: 99 }), /format 99/);
});

test('folded tokens compare readings without case, space or punctuation', () => {
  assert.equal(foldToken(' Stop.'), 'stop');
  assert.equal(foldToken('STOP'), 'stop');
  assert.equal(foldToken(' 30%'), '30%');
  assert.equal(foldToken('.'), '');
});

test('short commands for the decoder prompt: one per intent first, no skip words, no slots', () => {
  const lexicon = {
    ...LEXICON, root: 14,
    nodes: [...LEXICON.nodes.map((n, i) => (i === 0 ? { w: { please: [0], pause: [2], volume: [4], play: [7] } } : n)),
      /* 14 root */ { w: { pause: [2], volume: [4], play: [7], halt: [15] } },
      /* 15 */ { e: 1, i: ['media.pause'] }],
  };
  lexicon.nodes[2] = { ...lexicon.nodes[2], i: ['media.pause'] };
  lexicon.nodes[12] = { ...lexicon.nodes[12], i: ['media.pause'] };
  const sentences = new CommandGraph(lexicon).shortCommands().map((s) => s.join(' '));
  // "halt" is media.pause's first (in word order); "pause" follows as another first word; never "please", never
  // "pause the music" (its first word is taken), never "volume to {level}" or "play ..." (a slot, free text).
  assert.deepEqual(sentences, ['halt', 'pause']);
});

test('the skill files\' own prompt commands come with the lexicon when it has them', () => {
  assert.equal(new CommandGraph(LEXICON).prompt, null);
  const prompt = [['stop'], ['pause', 'the', 'music']];
  assert.deepEqual(new CommandGraph({ ...LEXICON, prompt }).prompt, prompt);
});

test('openings of no command: whole words at the start of a transcript, as normalize.js reads them', () => {
  const graph = new CommandGraph({ ...LEXICON, no_command_openings: [['dont'], ['who'], ['how', 'do']] });
  assert.ok(graph.opensAsNoCommand("Don't stop the music."));
  assert.ok(graph.opensAsNoCommand('DON’T pause'), 'case and a curly apostrophe');
  assert.ok(graph.opensAsNoCommand('Who turned the lights off?'));
  assert.ok(graph.opensAsNoCommand('how do timers work'));
  assert.ok(!graph.opensAsNoCommand('how loud is it'), 'only the whole phrase');
  assert.ok(!graph.opensAsNoCommand('Whoever you are, pause'), 'a whole word, not a prefix of one');
  assert.ok(!graph.opensAsNoCommand("pause, don't stop"), 'only at the start');
  assert.ok(!graph.opensAsNoCommand(''));
  assert.ok(!new CommandGraph(LEXICON).opensAsNoCommand("Don't stop"), 'an older lexicon has none');
});

test('a reading that leaves out what may be the start of its word, heard as a word of its own, is dropped', () => {
  const graph = new CommandGraph({ ...LEXICON, misheard_starts: { pause: [['and'], ['in']], mute: [['and'], ['on']] } });
  assert.ok(graph.dropsAMisheardStart('Okay, in pause.', 'okay pause'), '"in pause" may be "unpause"');
  assert.ok(graph.dropsAMisheardStart('And pause the music.', 'Pause the music.'));
  assert.ok(graph.dropsAMisheardStart('on mute the sound', 'mute the sound'));
  assert.ok(graph.dropsAMisheardStart('Pause it and mute it', 'pause it mute it'), 'each occurrence, in order');
  assert.ok(!graph.dropsAMisheardStart('You mute the sound', 'mute the sound'), 'a word that sounds like no "un"');
  assert.ok(!graph.dropsAMisheardStart('Pause the music.', 'pause the music'), 'nothing before it');
  assert.ok(!graph.dropsAMisheardStart('put it on mute', 'put it on mute'), 'the phrase kept');
  assert.ok(!graph.dropsAMisheardStart('Play some jazz', 'play some jazz'), 'no such word');
  assert.ok(!graph.dropsAMisheardStart('and pause', 'unpause'), 'the whole word read');
  assert.ok(!new CommandGraph(LEXICON).dropsAMisheardStart('in pause', 'pause'), 'an older lexicon has none');
});
