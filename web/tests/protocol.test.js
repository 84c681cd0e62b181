// The page's side of the protocol: its names come from the generated protocol.js, and it obeys the server's
// `welcome` (the re-recognition gate, the reply sample rate, the limits on a turn's audio). The same link against a
// real server: tests/test_welcome_terms.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EVENTS as EVENT_NAMES } from '../voxline/events.js';
import { BackendLink, FATAL_CLOSES, packetsWithinLimits, serverTerms } from '../voxline/link.js';
import * as protocol from '../voxline/protocol.js';
import { DEFAULTS } from '../voxline/settings.js';

const WELCOME = {
  type: 'welcome', session_id: 's', v: 1,
  limits: { asr_confidence_gate: 0.6, max_turn_audio_s: 30, max_opus_turn_bytes: 1000, max_frame_bytes: 300,
    max_text_chars: 1000 },
  reply_audio: { encoding: 'pcm16le', sample_rate: 22050, channels: 1, header_bytes: 12 },
};

/** A link that took `welcome` (its socket never opened: only the decisions are under test here). */
function welcomedLink(welcome) {
  const link = new BackendLink('ws://127.0.0.1:9/ws', { onStatus() {} });
  link.terms = serverTerms(welcome);
  return link;
}

test('events.js hands out the generated event names, which are the public ones', () => {
  assert.equal(EVENT_NAMES, protocol.EVENTS);
  assert.equal(protocol.EVENTS.replyAudio, 'voxline:reply-audio');
  assert.ok(Object.isFrozen(protocol.EVENTS));
});

test("the link's refusals are the server's closing errors, by the server's close codes", () => {
  for (const [close, [code]] of FATAL_CLOSES) assert.equal(protocol.CLOSING_ERRORS[code], close, code);
  assert.deepEqual([...FATAL_CLOSES.keys()].sort(), [4000, 4001, 4002, 4401, 4403]);
  assert.equal(FATAL_CLOSES.has(protocol.CLOSE.IDLE_TIMEOUT), false); // dormant, not refused
});

test("a turn between the page's floor and the server's gate goes with its audio", () => {
  const floor = DEFAULTS.localIntentMinConfidence;
  const link = welcomedLink(WELCOME);
  assert.equal(floor, 0.5);
  assert.equal(link.wantsAudio(0.55, floor), true); // the server re-recognises below 0.6
  assert.equal(link.wantsAudio(0.45, floor), true);
  assert.equal(link.wantsAudio(0.6, floor), false);
  assert.equal(link.wantsAudio(0.9, floor), false);
});

test("the page's own floor holds against a lower gate, and alone before any welcome", () => {
  assert.equal(welcomedLink({ ...WELCOME, limits: { asr_confidence_gate: 0.3 } }).wantsAudio(0.4, 0.5), true);
  assert.equal(welcomedLink(null).wantsAudio(0.55, 0.5), false);
  assert.equal(welcomedLink(null).wantsAudio(0.45, 0.5), true);
});

test('the reply sample rate and limits are the announced ones, else protocol v1 values', () => {
  const terms = serverTerms(WELCOME);
  assert.equal(terms.replySampleRate, 22050);
  assert.equal(terms.maxOpusTurnBytes, 1000);
  const old = serverTerms({ type: 'welcome', limits: { asr_confidence_gate: 'x', max_frame_bytes: -1 } });
  assert.deepEqual(old, {
    asrConfidenceGate: 0, replySampleRate: protocol.REPLY_AUDIO_RATE_HZ, maxTextChars: protocol.MAX_TEXT_CHARS,
    maxTurnAudioSeconds: protocol.MAX_TURN_AUDIO_SECONDS, maxOpusTurnBytes: protocol.MAX_OPUS_TURN_BYTES,
    maxFrameBytes: protocol.MAX_FRAME_BYTES,
  });
});

test("a turn's audio is cut to the frame, byte and seconds limits the server announced", () => {
  const terms = serverTerms(WELCOME);
  const packets = (sizes) => sizes.map((n) => new ArrayBuffer(n));
  const sizes = (kept) => kept.map((p) => p.byteLength);
  assert.deepEqual(sizes(packetsWithinLimits(packets([100, 100, 100]), 3, terms)), [100, 100, 100]);
  assert.deepEqual(sizes(packetsWithinLimits(packets([250, 250, 250, 250, 250]), 1, terms)), [250, 250, 250, 250]);
  assert.deepEqual(sizes(packetsWithinLimits(packets([100, 300, 100]), 1, terms)), [100]); // 8 + 300 > a frame
  const long = serverTerms({ ...WELCOME, limits: { ...WELCOME.limits, max_turn_audio_s: 2 } });
  assert.equal(packetsWithinLimits(packets(Array(100).fill(10)), 4, long).length, 50);
});

test('frame layouts are the generated ones', () => {
  assert.deepEqual(protocol.UPLINK_HEADER, { kind: 0, flags: 1, reserved: 2, turn_id: 4, bytes: 8 });
  assert.equal(protocol.REPLY_HEADER.bytes % 2, 0); // PCM16 after it stays 2-byte aligned
  assert.equal(protocol.FRAME_KIND.replyAudio, 0x81);
});
