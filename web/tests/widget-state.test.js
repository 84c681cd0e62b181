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

test('a local command: loading, idle, listening, thinking, back to listening', () => {
  assert.deepEqual(run('voxline:ready', 'listen', ev('speech-start'), ev('speech-end'),
    ev('transcript', { text: 'pause the music', final: true }), ev('intent', { intent: 'media.pause', source: 'local' })),
  ['idle', 'listening', 'listening', 'thinking', 'thinking', 'listening']);
});

test('a question: thinking while the text streams, speaking until the audio has played', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply', { text: 'The', final: false }),
    ev('reply-audio', { first: true }), ev('reply', { text: 'The capital.', final: true, audioPending: true }),
    ev('reply-audio', { last: true, played_ms: 1500 }));
  assert.deepEqual(shown, ['idle', 'listening', 'thinking', 'thinking', 'speaking', 'speaking', 'listening']);
});

test('reply text may finish before its first sample plays', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply', { text: 'Hi.', final: true, audioPending: true }),
    ev('reply-audio', { first: true }), ev('reply-audio', { last: true, played_ms: 400 }));
  assert.deepEqual(shown, ['idle', 'listening', 'thinking', 'speaking', 'speaking', 'listening']);
});

test('a server command with a confirmation is spoken before the turn is over', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'),
    ev('intent', { intent: 'media.volume_set', source: 'server', confirmation: 'Volume 30.' }), ev('reply-audio', { first: true }));
  assert.deepEqual(shown.slice(-2), ['thinking', 'speaking']);
});

test('speech over a reply goes back to listening (barge-in)', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('reply-audio', { first: true }), ev('speech-start'));
  assert.equal(shown.at(-1), 'listening');
});

test('an unintelligible turn settles back to listening', () => {
  assert.deepEqual(run('voxline:ready', 'listen', ev('speech-end'), 'settle').slice(-2), ['thinking', 'listening']);
});

test('the server unreachable is offline, not an error, and clears when it answers again', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-end'), ev('error', { code: 'backend_unreachable' }),
    ev('speech-end'), ev('intent', { intent: 'media.pause', source: 'local' }), ev('link', { state: 'connecting' }), ev('link', { state: 'open' }));
  assert.deepEqual(shown.slice(2), ['thinking', 'offline', 'thinking', 'offline', 'offline', 'listening']);
});

test('the link: offline while it reconnects or when refused; an idle close or a connection attempt changes nothing', () => {
  const after = (...states) => run('voxline:ready', 'listen', ...states.map((detail) => ev('link', detail))).at(-1);
  assert.equal(after({ state: 'connecting' }, { state: 'open' }), 'listening');
  assert.equal(after({ state: 'open' }, { state: 'offline', retry_ms: 500 }), 'offline');
  assert.equal(after({ state: 'offline' }, { state: 'connecting' }), 'offline');
  assert.equal(after({ state: 'open' }, { state: 'closed', reason: 'refused' }), 'offline');
  assert.equal(after({ state: 'open' }, { state: 'closed', reason: 'idle' }), 'listening');
  assert.equal(after({ state: 'closed', reason: 'idle' }, { state: 'connecting' }, { state: 'open' }), 'listening');
});

test('a refused microphone is an error until the user tries again', () => {
  const shown = run('voxline:ready', 'listen', ev('error', { code: 'mic_denied' }), ev('speech-start'), 'listen');
  assert.deepEqual(shown, ['idle', 'listening', 'error', 'error', 'listening']);
});

test('models that fail to load are an error; a failed turn is not', () => {
  assert.equal(run(ev('error', { code: 'model_download_failed' })).at(-1), 'error');
  assert.equal(run('voxline:ready', 'listen', ev('speech-end'), ev('error', { code: 'llm_failed', turn_id: 3 })).at(-1), 'thinking');
});

test('a press while loading listens once the models are ready', () => {
  assert.deepEqual(run('listen', 'voxline:ready'), ['loading', 'listening']);
  assert.deepEqual(run('listen', 'stop', 'voxline:ready'), ['loading', 'loading', 'idle']);
});

test('stop closes the microphone whatever the phase', () => {
  const status = [{ type: 'voxline:ready' }, { type: 'listen' }, ev('speech-end'), { type: 'stop' }]
    .reduce(nextStatus, INITIAL_STATUS);
  assert.equal(status.listening, false);
  assert.equal(shownState(status), 'idle');
});

test('statuses are never mutated', () => {
  const before = { ...INITIAL_STATUS };
  nextStatus(INITIAL_STATUS, { type: 'voxline:ready' });
  assert.deepEqual(INITIAL_STATUS, before);
});

test('a command dispatched before the end of speech does not leave the button thinking', () => {
  const shown = run('voxline:ready', 'listen', ev('speech-start'), ev('intent', { intent: 'media.pause', source: 'local', early: true }),
    ev('speech-end'), ev('transcript', { text: 'pause the music', final: true }));
  assert.deepEqual(shown.slice(2), ['listening', 'listening', 'listening', 'listening']);
  const next = run('voxline:ready', 'listen', ev('speech-start'), ev('intent', { intent: 'media.pause', source: 'local' }),
    ev('speech-start'), ev('speech-end'));
  assert.equal(next.at(-1), 'thinking'); // the next utterance is a new question
});

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
