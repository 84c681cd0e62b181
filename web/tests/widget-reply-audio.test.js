import { test } from 'node:test';
import assert from 'node:assert/strict';
import { INITIAL_STATUS, nextStatus, shownState } from '../widget/state.js';

/** Feed inputs from the initial status; returns the shown state after each. */
function run(...inputs) {
  let status = INITIAL_STATUS;
  return inputs.map((input) => {
    status = nextStatus(status, typeof input === 'string' ? { type: input } : input);
    return shownState(status);
  });
}

const ev = (name, detail = {}) => ({ type: `voxline:${name}`, detail });

test('reply-audio last (played out) ends speaking, like played', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply-audio', { first: true }),
    ev('reply', { text: 'Hi.', final: true, audioPending: true }), ev('reply-audio', { last: true, played_ms: 900 }));
  assert.deepEqual(shown.slice(2), ['thinking', 'speaking', 'speaking', 'listening']);
});

test('reply-audio last after a barge-in never brings speaking back', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply-audio', { first: true }), ev('speech-start'),
    ev('reply-audio', { last: true, interrupted: true, played_ms: 1200 }));
  assert.deepEqual(shown.slice(3), ['speaking', 'listening', 'listening']);
});

test('reply-audio last while thinking about the next turn leaves it thinking', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply-audio', { last: true, played_ms: 0 }));
  assert.equal(shown.at(-1), 'thinking');
});
