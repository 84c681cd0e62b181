import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Outcome, Phase, TurnMachine } from '../voxline/turn.js';

/** Feed inputs (a string is an input type); returns every effect, and the machine. */
function run(...inputs) {
  const machine = new TurnMachine();
  const effects = inputs.flatMap((input, t) => machine.input(
    typeof input === 'string' ? { type: input, t } : { t, ...input }));
  return { effects, machine };
}

const phases = (effects) => effects.filter((e) => e.type === 'phase')
  .map((e) => (e.outcome ? `${e.phase}:${e.outcome}` : e.phase));
const ofType = (effects, type) => effects.filter((e) => e.type === type);
const sent = (turnId) => ({ type: 'sent', turnId });
const audio = (turnId) => ({ type: 'reply-audio', turnId });
const done = (turnId, interrupted = false) => ({ type: 'reply-done', turnId, text: 'Done.', interrupted });
const ended = (turnId) => ({ type: 'playback-ended', turnId });

test('a command after the turn is over: hearing, deciding, idle (local)', () => {
  const { effects, machine } = run('speech-start', 'speech-end', 'command');
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'idle:local']);
  assert.equal(machine.phase, Phase.IDLE);
  assert.equal(machine.answering, false);
});

test('a command acted at a pause ends the exchange when the turn ends, not before', () => {
  const { effects } = run('speech-start', 'command', 'speech-end');
  assert.deepEqual(phases(effects), ['hearing', 'idle:local']);
});

test('a command acted at a pause does not carry over to the next utterance', () => {
  const { effects } = run('speech-start', 'command', 'speech-end', 'speech-start', 'speech-end');
  assert.deepEqual(phases(effects), ['hearing', 'idle:local', 'hearing', 'deciding']);
});

test('a turn with nothing to act on ends idle (nothing), so no host waits on a timer', () => {
  assert.deepEqual(phases(run('speech-start', 'speech-end', 'nothing').effects),
    ['hearing', 'deciding', 'idle:nothing']);
});

test('a turn that needs the server when there is none ends idle (unreachable)', () => {
  assert.deepEqual(phases(run('speech-start', 'speech-end', 'unreachable').effects),
    ['hearing', 'deciding', 'idle:unreachable']);
});

test('decisions that come too late for their turn change nothing', () => {
  // the user is speaking again: a late "nothing" or "command" of the turn before must not end this one
  const { effects, machine } = run('speech-start', 'speech-end', 'speech-start', 'nothing', 'unreachable');
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'hearing']);
  assert.equal(machine.phase, Phase.HEARING);
});

test('a question: server-pending, replying with its audio, idle (reply) once the last sample played', () => {
  const { effects, machine } = run('speech-start', 'speech-end', 'sending', sent(1),
    { type: 'reply-text', turnId: 1, text: 'Paris' }, audio(1), audio(1), done(1), ended(1));
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'server-pending', 'replying', 'idle:reply']);
  assert.deepEqual(ofType(effects, 'play').map((e) => e.begin), [true, false]);
  assert.deepEqual(ofType(effects, 'end-playback'), [{ type: 'end-playback', turnId: 1 }]);
  const replies = ofType(effects, 'reply');
  assert.deepEqual(replies.map((r) => [r.text, r.final]), [['Paris', false], ['Done.', true]]);
  assert.equal(replies[1].audioPending, true);
  assert.equal(machine.answering, false);
  assert.equal(ofType(effects, 'barge-in').length, 0);
});

test('a reply without audio (an intent the server resolved) ends at reply.done', () => {
  const { effects } = run('speech-start', 'speech-end', 'sending', sent(1), done(1));
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'server-pending', 'idle:reply']);
  assert.equal(ofType(effects, 'reply')[0].audioPending, false);
  assert.equal(ofType(effects, 'end-playback').length, 0);
});

test('a reply whose audio already played out by reply.done ends at reply.done', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), audio(1), ended(1), done(1));
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'server-pending', 'replying', 'idle:reply']);
});

test('reply.done that says interrupted ends idle (interrupted)', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), done(1, true));
  assert.deepEqual(phases(effects).at(-1), 'idle:interrupted');
});

test('barge-in while the server is still answering: one transition back to hearing', () => {
  const { effects, machine } = run('speech-start', 'speech-end', sent(1), audio(1), 'speech-start');
  const last = effects.slice(-2);
  assert.deepEqual(last[0], { type: 'barge-in', turnId: 1 });
  assert.deepEqual(last[1], { type: 'phase', phase: 'hearing', interrupted: 1 });
  assert.equal(machine.answering, false);
});

test('after a barge-in, audio of that turn still in flight is never played, and its reply.done has no playback', () => {
  const { effects, machine } = run('speech-start', 'speech-end', sent(1), audio(1), 'speech-start', audio(1),
    done(1, true));
  assert.equal(ofType(effects, 'play').length, 1);
  assert.equal(ofType(effects, 'end-playback').length, 0);
  const final = ofType(effects, 'reply').at(-1);
  assert.deepEqual([final.final, final.interrupted, final.audioPending], [true, true, false]);
  // the new utterance owns the phase: the old reply's end does not make it idle
  assert.equal(machine.phase, Phase.HEARING);
  assert.equal(machine.silenced.size, 0);
});

test('speech before any audio holds the server turn; sending a new turn cancels it with nothing heard', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), 'speech-start', 'speech-end', 'sending');
  assert.deepEqual(ofType(effects, 'barge-in'), [{ type: 'barge-in', turnId: 1 }]);
});

test('with holding off (the design before), speech before any audio barges in on the server turn at once', () => {
  const machine = new TurnMachine({ hold: false });
  const effects = [{ type: 'speech-start' }, { type: 'speech-end' }, sent(1), { type: 'speech-start' }]
    .flatMap((input, t) => machine.input({ t, ...input }));
  assert.deepEqual(ofType(effects, 'barge-in'), [{ type: 'barge-in', turnId: 1 }]);
  assert.equal(effects.at(-1).interrupted, 1);
  assert.equal(machine.held, null);
});

test('barge-in on the tail of a reply the server has finished sending stops the playback', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), audio(1), done(1), 'speech-start');
  assert.deepEqual(ofType(effects, 'barge-in'), [{ type: 'barge-in', turnId: null }]);
  assert.deepEqual(phases(effects).slice(-1), ['hearing']);
  assert.equal(effects.at(-1).interrupted, 1);
});

test('speech after the reply has played out is a new utterance, not a barge-in', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), audio(1), done(1), ended(1), 'speech-start');
  assert.equal(ofType(effects, 'barge-in').length, 0);
  assert.deepEqual(effects.at(-1), { type: 'phase', phase: 'hearing' });
});

test('a stopped playback reported after the barge-in changes nothing', () => {
  const { effects, machine } = run('speech-start', 'speech-end', sent(1), audio(1), 'speech-start', ended(1));
  assert.deepEqual(phases(effects).at(-1), 'hearing');
  assert.equal(machine.phase, Phase.HEARING);
});

test('sending while a server turn is unfinished finishes it first (one unfinished turn at a time)', () => {
  const machine = new TurnMachine();
  for (const input of ['speech-start', 'speech-end']) machine.input({ type: input, t: 0 });
  machine.input(sent(1));
  // the page decided a second turn without a speech-start in between (e.g. typed)
  assert.deepEqual(machine.input({ type: 'sending', t: 1 }), [{ type: 'barge-in', turnId: 1 }]);
  assert.deepEqual(machine.input({ type: 'sending', t: 1 }), []);
});

test('a turn sent after the user started speaking again does not take the phase from the new utterance', () => {
  const { effects, machine } = run('speech-start', 'speech-end', 'speech-start', sent(1), audio(1));
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'hearing']);
  assert.equal(machine.phase, Phase.HEARING);
  assert.equal(ofType(effects, 'play').length, 1); // its audio still plays, and speaking next barges in on it
  assert.equal(machine.answering, true);
});

test('the link drops while the server is thinking: its turn ends interrupted and idle', () => {
  const { effects, machine } = run('speech-start', 'speech-end', sent(1), { type: 'reply-text', turnId: 1, text: 'Th' },
    'link-down');
  assert.deepEqual(ofType(effects, 'reply').at(-1),
    { type: 'reply', turnId: 1, text: 'Th', final: true, interrupted: true, audioPending: false });
  assert.deepEqual(phases(effects).at(-1), `idle:${Outcome.INTERRUPTED}`);
  assert.equal(machine.answering, false);
  assert.equal(machine.replies.size, 0);
});

test('the link drops while a reply plays: what arrived plays out, then idle (interrupted)', () => {
  const { effects, machine } = run('speech-start', 'speech-end', sent(1), audio(1), 'link-down');
  assert.deepEqual(ofType(effects, 'end-playback'), [{ type: 'end-playback', turnId: 1 }]);
  assert.equal(ofType(effects, 'reply').at(-1).audioPending, true);
  assert.equal(machine.phase, Phase.REPLYING);
  assert.deepEqual(phases(machine.input(ended(1))), ['idle:interrupted']);
});

test('the link drops after a barge-in: the silenced turn gets its final reply, without playback', () => {
  const { effects } = run('speech-start', 'speech-end', sent(1), audio(1), 'speech-start', 'link-down');
  assert.deepEqual(ofType(effects, 'end-playback'), []);
  assert.equal(ofType(effects, 'reply').at(-1).interrupted, true);
  assert.deepEqual(phases(effects).at(-1), 'hearing');
});

test('the link dropping with nothing in flight changes nothing', () => {
  assert.deepEqual(run('speech-start', 'link-down').effects.slice(1), []);
});

test('messages about turns this page does not know are ignored', () => {
  const { effects } = run({ type: 'reply-text', turnId: 9, text: 'x' }, audio(9), ended(9));
  assert.deepEqual(effects, []);
});

test('an unknown input is a programming error', () => {
  assert.throws(() => new TurnMachine().input({ type: 'speech-middle' }), /unknown turn input/);
});

// A held server turn: speech started while it was pending and nothing of its answer was audible.

/** Inputs up to a server turn 1 held by a new utterance that has ended (deciding). */
const HELD = ['speech-start', 'speech-end', 'sending', sent(1), 'speech-start'];
const DECIDING_OVER_HELD = [...HELD, 'speech-end'];

test('speech over a pending turn with nothing audible holds it: no barge-in, hearing without interrupted', () => {
  const { effects, machine } = run(...HELD);
  assert.equal(ofType(effects, 'barge-in').length, 0);
  assert.deepEqual(effects.at(-1), { type: 'phase', phase: 'hearing' });
  assert.equal(machine.held.turnId, 1);
  assert.equal(machine.serverTurn, 1); // still unfinished on the server: no speculative turn may go out
});

test('a held turn\'s audio is kept, not played; its text and reply.done are reported as usual', () => {
  const { effects, machine } = run(...HELD, { type: 'reply-text', turnId: 1, text: 'Paris' }, audio(1), audio(1),
    done(1));
  assert.equal(ofType(effects, 'play').length, 0);
  assert.equal(ofType(effects, 'end-playback').length, 0);
  assert.deepEqual(ofType(effects, 'hold'), [{ type: 'hold', turnId: 1 }, { type: 'hold', turnId: 1 }]);
  assert.deepEqual(ofType(effects, 'reply').map((r) => [r.text, r.final, r.audioPending]),
    [['Paris', false, undefined], ['Done.', true, true]]);
  assert.equal(machine.phase, Phase.HEARING);
  assert.equal(machine.serverTurn, null); // finished on the server: it holds no turn any more
  assert.equal(machine.answering, false);
});

test('held, then a command at a pause: barge-in on the held turn, its kept audio dropped', () => {
  const { effects, machine } = run(...HELD, audio(1), 'command');
  assert.deepEqual(effects.slice(-2),
    [{ type: 'drop', turnId: 1, replied: false }, { type: 'barge-in', turnId: 1 }]);
  assert.equal(machine.held, null);
  assert.deepEqual(phases(machine.input({ type: 'speech-end', t: 9 })), ['idle:local']);
});

test('held, then a command once the turn is over: barge-in on the held turn, idle (local)', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, 'command');
  assert.deepEqual(effects.slice(-2), [{ type: 'barge-in', turnId: 1 }, { type: 'phase', phase: 'idle',
    outcome: 'local' }]);
  assert.equal(machine.answering, false);
});

test('held, then the utterance goes to the server: barge-in on the held turn, its late audio never played', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, 'sending', sent(2), audio(1), done(1, true), audio(2));
  assert.deepEqual(ofType(effects, 'barge-in'), [{ type: 'barge-in', turnId: 1 }]);
  assert.deepEqual(ofType(effects, 'play'), [{ type: 'play', turnId: 2, begin: true }]);
  assert.equal(ofType(effects, 'hold').length, 0);
  assert.deepEqual(phases(effects).slice(-2), ['server-pending', 'replying']);
  assert.equal(ofType(effects, 'reply').at(-1).audioPending, false);
  assert.equal(machine.serverTurn, 2);
});

test('held past its reply.done, then a real turn: the server is still told nothing of it was heard', () => {
  const { effects } = run(...DECIDING_OVER_HELD, audio(1), done(1), 'sending');
  assert.deepEqual(effects.slice(-2),
    [{ type: 'drop', turnId: 1, replied: true }, { type: 'barge-in', turnId: 1 }]);
});

test('held, then nothing, before any reply: back to server-pending, and the reply plays as usual', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, 'nothing');
  assert.deepEqual(effects.at(-1), { type: 'phase', phase: 'server-pending', turnId: 1 });
  assert.equal(ofType(effects, 'barge-in').length, 0);
  const rest = [audio(1), done(1), ended(1)].flatMap((input) => machine.input(input));
  assert.deepEqual(ofType(rest, 'play'), [{ type: 'play', turnId: 1, begin: true }]);
  assert.deepEqual(phases(rest), ['replying', 'idle:reply']);
});

test('held, then nothing, with audio kept: replying, the kept audio released from its start', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, audio(1), audio(1), 'nothing');
  assert.deepEqual(effects.slice(-2),
    [{ type: 'release', turnId: 1 }, { type: 'phase', phase: 'replying', turnId: 1 }]);
  const rest = [audio(1), done(1)].flatMap((input) => machine.input(input));
  assert.deepEqual(ofType(rest, 'play'), [{ type: 'play', turnId: 1, begin: false }]);
  assert.equal(ofType(rest, 'reply').at(-1).audioPending, true);
  assert.deepEqual(phases(machine.input(ended(1))), ['idle:reply']);
});

test('held, then nothing, after its reply.done with audio: released, ended, idle once it has played', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, audio(1), done(1, true), 'nothing');
  assert.deepEqual(effects.slice(-3), [{ type: 'release', turnId: 1 }, { type: 'end-playback', turnId: 1 },
    { type: 'phase', phase: 'replying', turnId: 1 }]);
  assert.deepEqual(phases(machine.input(ended(1))), ['idle:interrupted']);
});

test('held, then nothing, after its reply.done without audio: idle with the outcome it would have had', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, done(1), 'nothing');
  assert.deepEqual(effects.at(-1), { type: 'phase', phase: 'idle', outcome: 'reply', turnId: 1 });
  assert.equal(ofType(effects, 'release').length, 0);
  assert.equal(machine.held, null);
  assert.equal(machine.answering, false);
});

test('a resumed turn whose audio plays is barged in on at once by the next speech', () => {
  const { effects } = run(...DECIDING_OVER_HELD, audio(1), 'nothing', 'speech-start');
  assert.deepEqual(effects.slice(-2),
    [{ type: 'barge-in', turnId: 1 }, { type: 'phase', phase: 'hearing', interrupted: 1 }]);
});

test('speech while a reply plays after a hold is a barge-in at once, not a hold', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, 'nothing', audio(1), 'speech-start');
  assert.deepEqual(ofType(effects, 'barge-in'), [{ type: 'barge-in', turnId: 1 }]);
  assert.equal(machine.held, null);
});

test('a second utterance over a held turn keeps holding it; the last one decides', () => {
  const { effects, machine } = run(...DECIDING_OVER_HELD, 'speech-start', 'speech-end', 'nothing');
  assert.equal(ofType(effects, 'barge-in').length, 0);
  assert.deepEqual(phases(effects).slice(-3), ['hearing', 'deciding', 'server-pending']);
  assert.equal(machine.held, null);
});

test('held, then a real turn with no server: barge-in on the held turn, idle (unreachable)', () => {
  const { effects } = run(...DECIDING_OVER_HELD, 'unreachable');
  assert.deepEqual(effects.slice(-2), [{ type: 'barge-in', turnId: 1 },
    { type: 'phase', phase: 'idle', outcome: 'unreachable' }]);
});

test('the link drops while a turn is held: its final reply, its kept audio dropped, the utterance leads', () => {
  const { effects, machine } = run(...HELD, audio(1), 'link-down');
  assert.deepEqual(effects.slice(-2), [{ type: 'drop', turnId: 1, replied: false },
    { type: 'reply', turnId: 1, text: '', final: true, interrupted: true, audioPending: false }]);
  assert.equal(ofType(effects, 'end-playback').length, 0);
  assert.equal(machine.held, null);
  assert.equal(machine.phase, Phase.HEARING);
  assert.deepEqual(phases(['speech-end', 'nothing'].flatMap((type) => machine.input({ type, t: 9 }))),
    ['deciding', 'idle:nothing']);
});

test('the link drops while a finished turn is held: its kept audio is dropped, no second final reply', () => {
  const { effects, machine } = run(...HELD, audio(1), done(1), 'link-down');
  assert.deepEqual(effects.at(-1), { type: 'drop', turnId: 1, replied: true });
  assert.equal(ofType(effects, 'reply').filter((r) => r.final).length, 1);
  assert.equal(machine.held, null);
});

test('a command acted at a pause, then the speaker went on: what they added is decided as a turn', () => {
  const wentOn = { type: 'speech-end', wentOn: true };
  // nothing more to act on ("pause" … "the music"): the exchange still ended with the command
  assert.deepEqual(phases(run('speech-start', 'command', wentOn, 'nothing').effects),
    ['hearing', 'deciding', 'idle:local']);
  // a command of its own ("skip this song" … "and set a timer for ten minutes"), or an amendment
  assert.deepEqual(phases(run('speech-start', 'command', wentOn, 'command').effects),
    ['hearing', 'deciding', 'idle:local']);
  // a request for the server ("pause the music" … "and what's the weather"): answered as any question
  const { effects, machine } = run('speech-start', 'command', wentOn, 'sending', sent(1), audio(1), done(1),
    ended(1));
  assert.deepEqual(phases(effects), ['hearing', 'deciding', 'server-pending', 'replying', 'idle:reply']);
  assert.equal(machine.answering, false);
  // the next utterance starts afresh: no command acted in it yet
  assert.deepEqual(phases(run('speech-start', 'command', wentOn, 'nothing', 'speech-start', 'speech-end',
    'nothing').effects), ['hearing', 'deciding', 'idle:local', 'hearing', 'deciding', 'idle:nothing']);
});
