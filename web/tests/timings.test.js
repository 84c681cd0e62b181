import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_OPEN_TURNS, TurnTimings, waterfall } from '../voxline/timings.js';

/** A tracker that collects what it emits. */
function tracker() {
  const records = [];
  const timings = new TurnTimings((record) => records.push(record));
  const on = (name, detail = {}) => timings.observe(`voxline:${name}`, detail);
  return { records, timings, on };
}

/** One utterance heard and decoded: speech-start, speech-end at `end` (decided at end + 0.3), final transcript. */
function utterance(on, end, { transcript = true } = {}) {
  on('speech-start', { audio_t: end - 0.8 });
  on('speech-end', { end_t: end, audio_t: end + 0.3 });
  if (transcript) on('transcript', { text: 'x', final: true, end_t: end, audio_t: end + 0.45 });
}

test('a local command: one record once the intent is out, with its stages on the capture clock', () => {
  const { records, on } = tracker();
  utterance(on, 2.0);
  assert.equal(records.length, 0, 'not complete before the intent');
  on('intent', { intent: 'media.pause', source: 'local', audio_t: 2.5 });
  assert.deepEqual(records, [{ turn_id: 1, source: 'local',
    stages: { speech_end: 2.0, turn_end: 2.3, transcript: 2.45, intent: 2.5 } }]);
});

test('partial transcripts and server transcripts are not the final transcript of a page turn', () => {
  const { records, on } = tracker();
  on('speech-start', { audio_t: 1 });
  on('transcript', { text: 'pau', final: false, audio_t: 1.2 });
  on('speech-end', { end_t: 1.5, audio_t: 1.8 });
  on('transcript', { text: 'pause', final: true, source: 'server', turn_id: 4, audio_t: 1.85 });
  on('intent', { intent: 'media.pause', source: 'cache', audio_t: 1.9, early: true });
  assert.equal(records.length, 0);
  on('transcript', { text: 'pause', final: true, end_t: 1.5, audio_t: 1.95 });
  assert.equal(records.length, 1);
  assert.equal(records[0].stages.transcript, 1.95);
});

test('an early intent (a complete command in a partial) waits for the final transcript, and says it was early', () => {
  const { records, on } = tracker();
  on('speech-start', { audio_t: 1.0 });
  on('intent', { intent: 'media.mute', source: 'cache', early: true, audio_t: 1.7 });
  assert.equal(records.length, 0);
  on('speech-end', { end_t: 1.6, audio_t: 1.9 });
  on('transcript', { text: 'mute', final: true, end_t: 1.6, audio_t: 2.0 });
  assert.deepEqual(records, [{ turn_id: 1, source: 'cache', early: true,
    stages: { intent: 1.7, speech_end: 1.6, turn_end: 1.9, transcript: 2.0 } }]);
});

test('a server turn is complete at reply.done plus the server timings, and the first audio if any is queued', () => {
  const { records, timings, on } = tracker();
  utterance(on, 3.0);
  timings.sent(7, 3.5);
  on('reply', { text: 'Paris', final: false, turn_id: 7, audio_t: 3.9 });
  timings.replyDone(7, { audioPending: true });
  timings.serverTimings(7, { type: 'timings', turn_id: 7, interrupted: false, stages: { intent: 1, queue: 80 } });
  assert.equal(records.length, 0, 'its audio has not started playing yet');
  on('reply-audio', { first: true, turn_id: 7, audio_t: 4.2 });
  assert.deepEqual(records, [{ turn_id: 1, source: 'server', server_turn_id: 7, interrupted: false,
    stages: { speech_end: 3.0, turn_end: 3.3, transcript: 3.45, sent: 3.5, first_audio: 4.2 },
    timings: { interrupted: false, stages: { intent: 1, queue: 80 } } }]);
});

test('a server command without a confirmation has no audio to wait for; its server intent is a stage', () => {
  const { records, timings, on } = tracker();
  utterance(on, 1.0);
  timings.sent(1, 1.6);
  on('intent', { intent: 'lights.on', source: 'server', turn_id: 1, audio_t: 1.7 });
  timings.replyDone(1, { audioPending: false });
  assert.equal(records.length, 0, 'the server timings follow reply.done');
  timings.serverTimings(1, { type: 'timings', turn_id: 1, interrupted: false });
  assert.equal(records.length, 1);
  assert.equal(records[0].stages.intent, 1.7);
  assert.equal(records[0].stages.first_audio, undefined);
});

test('a reply stopped before its first sample (barge-in) completes with the last event', () => {
  const { records, timings, on } = tracker();
  utterance(on, 1.0);
  timings.sent(2, 1.5);
  timings.replyDone(2, { interrupted: true, audioPending: true });
  timings.serverTimings(2, { type: 'timings', turn_id: 2, interrupted: true });
  assert.equal(records.length, 0);
  on('reply-audio', { last: true, interrupted: true, turn_id: 2, played_ms: 0, audio_t: 2.0 });
  assert.equal(records.length, 1);
  assert.equal(records[0].interrupted, true);
});

test('a dropped link completes its turns with what they have', () => {
  const { records, timings, on } = tracker();
  utterance(on, 1.0);
  timings.sent(1, 1.5);
  timings.linkDown();
  assert.equal(records.length, 1);
  assert.deepEqual(Object.keys(records[0].stages), ['speech_end', 'turn_end', 'transcript', 'sent']);
  timings.serverTimings(1, { type: 'timings', turn_id: 1 });
  assert.equal(records.length, 1, 'never twice');
});

test('a turn with nothing intelligible does not take the next turn\'s transcript or intent', () => {
  const { records, on } = tracker();
  utterance(on, 1.0, { transcript: false });
  utterance(on, 4.0);
  on('intent', { intent: 'media.pause', source: 'local', audio_t: 4.5 });
  assert.equal(records.length, 1);
  assert.equal(records[0].turn_id, 2);
  assert.equal(records[0].stages.speech_end, 4.0);
});

test('turns still waiting are forgotten past MAX_OPEN_TURNS', () => {
  const { records, timings, on } = tracker();
  for (let i = 0; i < MAX_OPEN_TURNS + 3; i++) utterance(on, i * 5 + 1, { transcript: false });
  assert.equal(timings.open.length, MAX_OPEN_TURNS);
  assert.equal(timings.open[0].turn_id, 4);
  assert.equal(records.length, 0);
});

test('the waterfall of a local command: endpoint, transcript, intent, in ms after the end of speech', () => {
  const bars = waterfall({ turn_id: 1, source: 'local',
    stages: { speech_end: 2.0, turn_end: 2.3, transcript: 2.45, intent: 2.5 } });
  assert.deepEqual(bars, [
    { label: 'endpoint', start_ms: 0, end_ms: 300, lane: 'page' },
    { label: 'transcript', start_ms: 300, end_ms: 450, lane: 'page' },
    { label: 'intent', start_ms: 450, end_ms: 500, lane: 'page' },
  ]);
});

test('the waterfall of a server turn lays the server stages from the moment it was sent', () => {
  const bars = waterfall({ turn_id: 1, source: 'server', server_turn_id: 3,
    stages: { speech_end: 3.0, turn_end: 3.3, transcript: 3.45, sent: 3.5, first_audio: 4.2 },
    timings: { stages: { intent: 1, queue: 80, prefill: 100, decode: 200, tts: 20, transport: 1 } } });
  assert.deepEqual(bars.map((b) => [b.label, b.start_ms, b.end_ms, b.lane]), [
    ['endpoint', 0, 300, 'page'], ['transcript', 300, 450, 'page'], ['send', 450, 500, 'page'],
    ['intent', 500, 501, 'server'], ['queue', 501, 581, 'server'], ['prefill', 581, 681, 'server'],
    ['decode', 681, 881, 'server'], ['tts', 881, 901, 'server'], ['transport', 901, 902, 'server'],
    ['first audio', 902, 1200, 'page'],
  ]);
});

test('the waterfall of a speculative turn lays the server stages from its start, before it was confirmed', () => {
  const bars = waterfall({ turn_id: 1, source: 'server', server_turn_id: 3,
    stages: { speech_end: 3.0, turn_end: 3.3, transcript: 3.45, sent: 3.5, first_audio: 3.9 },
    timings: { confirmed_ms: 250, stages: { intent: 1, queue: 4, prefill: 300, decode: 200, tts: 20, transport: 1 } } });
  assert.deepEqual(bars.filter((b) => b.lane === 'server').map((b) => [b.label, b.start_ms, b.end_ms]), [
    ['intent', 250, 251], ['queue', 251, 255], ['prefill', 255, 555], ['decode', 555, 755], ['tts', 755, 775],
    ['transport', 775, 776],
  ]);
});

test('the waterfall marks an early intent where it happened, even before the turn ended', () => {
  const bars = waterfall({ turn_id: 1, source: 'cache', early: true,
    stages: { speech_end: 1.6, turn_end: 1.9, transcript: 2.0, intent: 1.7 } });
  assert.deepEqual(bars.at(-1), { label: 'intent (early)', start_ms: 100, end_ms: 100, lane: 'page' });
  assert.deepEqual(waterfall({ turn_id: 2, stages: {} }), []);
});

test('a turn the server could not take (it was down) does not take a later turn\'s send or intent', () => {
  const { records, timings, on } = tracker();
  on('speech-start', { audio_t: 1 });
  on('speech-end', { end_t: 2, audio_t: 2.3 });
  on('transcript', { text: 'what is the time in Lima', final: true, end_t: 2, audio_t: 2.5 });
  on('error', { code: 'backend_unreachable', audio_t: 2.6 });
  on('speech-start', { audio_t: 5 });
  on('speech-end', { end_t: 6, audio_t: 6.3 });
  on('transcript', { text: 'tell me a joke', final: true, end_t: 6, audio_t: 6.5 });
  timings.sent(1, 6.6, 'tell me a joke');
  timings.replyDone(1, { audioPending: false });
  timings.serverTimings(1, { type: 'timings', turn_id: 1 });
  on('speech-start', { audio_t: 9 });
  on('speech-end', { end_t: 10, audio_t: 10.3 });
  on('transcript', { text: 'pause', final: true, end_t: 10, audio_t: 10.5 });
  on('intent', { intent: 'media.pause', source: 'local', text: 'pause', audio_t: 10.6 });
  assert.deepEqual(records.map((r) => [r.turn_id, r.source, r.stages.speech_end]), [[2, 'server', 6], [3, 'local', 10]]);
});
