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
const turn = (state, detail = {}) => ev('turn', { state, ...detail });

test('a local command: loading, idle, listening, thinking, back to listening', () => {
  assert.deepEqual(run('voxline:ready', 'listen', ev('speech-start'), turn('hearing'), ev('speech-end'),
    turn('deciding'), ev('transcript', { text: 'pause the music', final: true }),
    ev('intent', { intent: 'media.pause', source: 'local' }),
    turn('idle', { outcome: 'local' })),
  ['idle', 'listening', 'listening', 'listening', 'listening', 'thinking', 'thinking', 'thinking', 'listening']);
});

test('a command acted at a pause never shows thinking: the turn goes from hearing to idle', () => {
  const shown = run('voxline:ready', 'listen', turn('hearing'), ev('intent', { intent: 'media.pause', source: 'local' }),
    ev('speech-end'), turn('idle', { outcome: 'local' }));
  assert.deepEqual(shown.slice(2), ['listening', 'listening', 'listening', 'listening']);
});

test('a question: thinking while the server answers, speaking while its audio plays, listening once it has', () => {
  const shown = run('voxline:ready', 'listen', turn('hearing'), turn('deciding'), turn('server-pending'),
    ev('reply', { text: 'The', final: false }), turn('replying'), ev('reply', { text: 'The capital.', final: true }),
    ev('reply-audio', { last: true, played_ms: 1500 }), turn('idle', { outcome: 'reply' }));
  assert.deepEqual(shown.slice(2),
    ['listening', 'thinking', 'thinking', 'thinking', 'speaking', 'speaking', 'speaking', 'listening']);
});

test('speech over a reply goes back to listening (barge-in)', () => {
  const shown = run('voxline:ready', 'listen', turn('deciding'), turn('server-pending'), turn('replying'),
    turn('hearing', { interrupted: 4 }));
  assert.equal(shown.at(-1), 'listening');
});

test('an unintelligible turn is over when Voxline says so: no timer', () => {
  assert.deepEqual(run('voxline:ready', 'listen', turn('deciding'), turn('idle', { outcome: 'nothing' })).slice(-2),
    ['thinking', 'listening']);
});

test('the server unreachable is offline, not an error, and clears when it answers again', () => {
  const shown = run('voxline:ready', 'listen', turn('deciding'), ev('error', { code: 'backend_unreachable' }),
    turn('idle', { outcome: 'unreachable' }), turn('deciding'), ev('intent', { intent: 'media.pause', source: 'local' }),
    turn('idle', { outcome: 'local' }), ev('link', { state: 'connecting' }), ev('link', { state: 'open' }));
  assert.deepEqual(shown.slice(2), ['thinking', 'offline', 'offline', 'thinking', 'thinking', 'offline', 'offline',
    'listening']);
});

test('a server answer clears offline', () => {
  const offline = [ev('error', { code: 'backend_unreachable' })];
  assert.equal(run('voxline:ready', 'listen', ...offline, ev('intent', { source: 'server', intent: 'x' })).at(-1),
    'listening');
  assert.equal(run('voxline:ready', 'listen', ...offline, ev('intent', { source: 'local', intent: 'x' })).at(-1),
    'offline');
  assert.equal(run('voxline:ready', 'listen', ...offline, ev('reply', { text: 'Hi', final: false })).at(-1), 'listening');
});

test('the microphone stopped mid-sentence: its turn does not leave the button thinking', () => {
  const shown = run('voxline:ready', 'listen', turn('hearing'), 'stop', turn('deciding'), turn('idle', { outcome: 'nothing' }));
  assert.deepEqual(shown.slice(2), ['listening', 'idle', 'idle', 'idle']);
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
  assert.equal(run('voxline:ready', 'listen', turn('server-pending'), ev('error', { code: 'llm_failed', turn_id: 3 })).at(-1), 'thinking');
});

test('a press while loading listens once the models are ready', () => {
  assert.deepEqual(run('listen', 'voxline:ready'), ['loading', 'listening']);
  assert.deepEqual(run('listen', 'stop', 'voxline:ready'), ['loading', 'loading', 'idle']);
});

test('stop closes the microphone whatever the phase', () => {
  const status = [{ type: 'voxline:ready' }, { type: 'listen' }, turn('server-pending'), { type: 'stop' }]
    .reduce(nextStatus, INITIAL_STATUS);
  assert.equal(status.listening, false);
  assert.equal(shownState(status), 'idle');
});

test('statuses are never mutated', () => {
  const before = { ...INITIAL_STATUS };
  nextStatus(INITIAL_STATUS, { type: 'voxline:ready' });
  assert.deepEqual(INITIAL_STATUS, before);
});

