// The cache's schema and origin checks, which decide what may ever reach the zero-RTT hit path. IndexedDB itself
// is exercised in real Chromium (e2e/test_intents_browser.py); node has none.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { entryProblem, serverOrigin } from '../voxline/intent-cache.js';
import { isCompleteCommand } from '../voxline/intents.js';

const GOOD = Object.freeze({
  key: 'set a timer for 10 minutes',
  intent: 'timer.set',
  slots: { seconds: 600 },
  confirmation: 'Timer set for 10 minutes.',
  grammar_version: '34676709eaa82cc2',
  source_of_entry: 'local',
  hits: 3,
  last_used: 1_700_000_000_500,
  created: 1_700_000_000_000,
});

const check = (record, key = GOOD.key, version = GOOD.grammar_version) => entryProblem(record, key, version);

test('a well-formed entry passes', () => {
  assert.equal(check({ ...GOOD }), null);
  assert.equal(check({ ...GOOD, confirmation: null, slots: {} }), null);
  assert.equal(check({ ...GOOD, slots: { area: 'kitchen', on: true, level: 0.5 } }), null);
});

test('the record must be stored under its own normalised key', () => {
  assert.match(check({ ...GOOD }, 'another key'), /key/);
  assert.match(check({ ...GOOD, key: 'Set a timer' }, 'Set a timer'), /normalised/);
  assert.match(check({ ...GOOD, key: '' }, ''), /key/);
});

test('a record from another grammar version, or none known, is invalid', () => {
  assert.match(check({ ...GOOD }, GOOD.key, 'ffffffffffffffff'), /grammar version/);
  assert.match(check({ ...GOOD }, GOOD.key, null), /grammar version/);
});

test('fields are exactly the schema', () => {
  const { hits, ...missing } = GOOD;
  assert.match(check(missing), /fields/);
  assert.match(check({ ...GOOD, extra: 1 }), /fields/);
  assert.match(check(null), /object/);
  assert.match(check([GOOD]), /object/);
  assert.match(check('timer.set'), /object/);
});

test('each field is checked', () => {
  const bad = {
    intent: [42, '', 'has space', 'x'.repeat(129), 'bell\u0007'],
    slots: [null, [], { 'bad-name': 1 }, { n: Infinity }, { n: { deep: 1 } }, { s: 'x'.repeat(513) }],
    confirmation: [undefined, 7, 'x'.repeat(513)],
    source_of_entry: ['cache', 'evil', null],
    hits: [-1, 1.5, '3', Number.MAX_SAFE_INTEGER + 1],
    last_used: [-1, NaN, '1'],
    created: [Infinity, null],
  };
  for (const [field, values] of Object.entries(bad)) {
    for (const value of values) {
      assert.notEqual(check({ ...GOOD, [field]: value }), null, `${field} = ${String(value).slice(0, 20)}`);
    }
  }
});

test('too many slots is invalid', () => {
  const slots = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`s${i}`, i]));
  assert.match(check({ ...GOOD, slots }), /too many/);
});

test('slots with a foreign prototype are not plain data', () => {
  class Slots { constructor() { this.seconds = 600; } }
  assert.notEqual(check({ ...GOOD, slots: new Slots() }), null);
});

test('a WebSocket URL and the HTTP URL of one server share an origin', () => {
  assert.equal(serverOrigin('ws://127.0.0.1:8000/ws'), 'http://127.0.0.1:8000');
  assert.equal(serverOrigin('http://127.0.0.1:8000/'), 'http://127.0.0.1:8000');
  assert.equal(serverOrigin('wss://voice.example/ws'), 'https://voice.example');
  assert.equal(serverOrigin('https://voice.example:443/x'), 'https://voice.example');
  assert.notEqual(serverOrigin('ws://voice.example/ws'), serverOrigin('wss://voice.example/ws'));
  assert.notEqual(serverOrigin('http://127.0.0.1:8000'), serverOrigin('http://127.0.0.1:8001'));
});

test('anything but an absolute http(s) or ws(s) URL has no server origin', () => {
  for (const value of ['server', 'local', '/ws', 'file:///etc/passwd', 'javascript:alert(1)', '']) {
    assert.equal(serverOrigin(value), null, value);
  }
});

test('a complete command is a match that no longer command could change', () => {
  const match = { intent: 'media.pause', slots: {} };
  assert.equal(isCompleteCommand({ match, prefix: false, couldChange: false }), true);
  // "pause" may go on as "pause the music", which pauses all the same
  assert.equal(isCompleteCommand({ match, prefix: true, couldChange: false }), true);
  // "stop" may go on as "stop the timer", another intent
  assert.equal(isCompleteCommand({ match, prefix: true, couldChange: true }), false);
  assert.equal(isCompleteCommand({ match: null, prefix: true, couldChange: true }), false);
  assert.equal(isCompleteCommand({ match: null, prefix: false, couldChange: false }), false);
  assert.equal(isCompleteCommand(null), false);
});
