import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Endpointer, State } from '../voxline/endpointer.js';
import { DEFAULTS } from '../voxline/settings.js';

const FRAME = 512;
const RATE = 16000;

/** Feed probabilities, one per 32 ms frame; returns every event with the frame index it came at. */
function run(probs, settings = DEFAULTS, onCheck = () => null) {
  const ep = new Endpointer(settings);
  const events = [];
  probs.forEach((p, i) => {
    for (const ev of ep.push(p, (i + 1) * FRAME, FRAME)) {
      events.push({ ...ev, frame: i });
      if (ev.type === 'turn-check') {
        const answer = onCheck(ev);
        if (answer !== null) for (const next of ep.turnResult(ev.pauseId, answer)) events.push({ ...next, frame: i });
      }
    }
  });
  return { events, ep };
}

const frames = (secs) => Math.round((secs * RATE) / FRAME);
const speech = (secs) => Array(frames(secs)).fill(0.9);
const silence = (secs) => Array(frames(secs)).fill(0.02);

test('a turn starts after the minimum speech length and ends after the hangover', () => {
  const { events } = run([...silence(0.5), ...speech(1.0), ...silence(1.0)]);
  // the pause's marks in the order of the silences they wait for (a command mark first when they are equal)
  const marks = [['command-silence', DEFAULTS.commandSilenceSecs],
    ['command-silence', DEFAULTS.prefixCommandSilenceSecs], ['turn-check', DEFAULTS.turnCheckSecs]]
    .sort((a, b) => a[1] - b[1]).map(([type]) => type);
  assert.deepEqual(events.map((e) => e.type), ['speech-start', 'pause', ...marks, 'speech-end']);
  const [start, , , , , end] = events;
  assert.equal(start.voicedAt, frames(0.5) * FRAME);
  assert.equal(start.start, start.voicedAt - DEFAULTS.preRollSecs * RATE);
  assert.equal(end.end, (frames(0.5) + frames(1.0)) * FRAME);
  assert.equal(end.reason, 'hangover');
  assert.ok(end.silence_s >= DEFAULTS.hangoverSecs && end.silence_s < DEFAULTS.hangoverSecs + 0.04);
});

test('a confident smart-turn answer ends the turn before the hangover, once the silence is long enough', () => {
  const { events } = run([...speech(1.0), ...silence(1.0)], DEFAULTS, () => 0.95);
  const end = events.find((e) => e.type === 'speech-end');
  assert.equal(end.reason, 'smart-turn');
  assert.ok(end.silence_s >= DEFAULTS.turnCompleteMinSilenceSecs
    && end.silence_s < DEFAULTS.turnCompleteMinSilenceSecs + 0.04, `ended after ${end.silence_s} s`);
  assert.ok(DEFAULTS.turnCompleteMinSilenceSecs < DEFAULTS.hangoverSecs);
});

test('smart-turn answering "complete" in a mid-sentence pause does not end the turn', () => {
  // A 0.4 s pause (shorter than turnCompleteMinSilenceSecs), asked at 0.2 s: "complete", then the speaker goes on.
  const { events } = run([...speech(1.0), ...silence(0.4), ...speech(0.6), ...silence(1.0)], DEFAULTS, () => 0.99);
  const ends = events.filter((e) => e.type === 'speech-end');
  assert.equal(ends.length, 1, 'one turn');
  assert.equal(ends[0].end, frames(2.0) * FRAME);
});

test('the minimum silence is on the capture clock: an answer that comes late ends the turn at once', () => {
  const ep = new Endpointer(DEFAULTS);
  const probs = [...speech(1.0), ...silence(1.0)];
  // past the minimum silence, before the hangover
  const lateAt = frames(1.0) + frames((DEFAULTS.turnCompleteMinSilenceSecs + DEFAULTS.hangoverSecs) / 2);
  let ended = null;
  probs.forEach((p, i) => {
    for (const ev of ep.push(p, (i + 1) * FRAME, FRAME)) if (ev.type === 'speech-end') ended ??= { ...ev, frame: i };
    if (i === lateAt && !ended) for (const ev of ep.turnResult(ep.pauseId, 0.99)) ended = { ...ev, frame: i };
  });
  assert.equal(ended.reason, 'smart-turn');
  assert.equal(ended.frame, lateAt);
});

test('an unsure smart-turn answer leaves the hangover in charge', () => {
  const { events } = run([...speech(1.0), ...silence(1.0)], DEFAULTS, () => 0.4);
  assert.equal(events.find((e) => e.type === 'speech-end').reason, 'hangover');
});

test('a click or a short cough does not start a turn', () => {
  const { events, ep } = run([...silence(0.3), 0.95, ...silence(0.5), ...speech(0.1), ...silence(0.5)]);
  assert.deepEqual(events, []);
  assert.equal(ep.state, State.SILENCE);
});

test('a word split by its stop consonant starts a turn from its first voiced frame', () => {
  // "mu|te" as heard in the page: three voiced frames, one unvoiced (the closure of the t), two voiced: neither run
  // alone is minSpeechSecs long.
  const word = [0.66, 0.75, 0.84, 0.30, 0.95, 0.72];
  assert.ok(3 * FRAME < DEFAULTS.minSpeechSecs * RATE && 5 * FRAME >= DEFAULTS.minSpeechSecs * RATE);
  const { events } = run([...silence(0.5), ...word, ...silence(1.0)]);
  const start = events.find((e) => e.type === 'speech-start');
  assert.ok(start, 'the word starts a turn');
  assert.equal(start.voicedAt, frames(0.5) * FRAME);
  assert.equal(start.start, start.voicedAt - DEFAULTS.preRollSecs * RATE);
  assert.equal(events.find((e) => e.type === 'speech-end').end, (frames(0.5) + word.length) * FRAME);
  const before = run([...silence(0.5), ...word, ...silence(1.0)], { ...DEFAULTS, onsetGapSecs: 0 });
  assert.deepEqual(before.events, [], 'the design before: each run alone is too short');
});

test('the gaps of an onset are not counted as voice, and a longer gap starts the count again', () => {
  const gap = frames(DEFAULTS.onsetGapSecs); // unvoiced frames an onset may hold
  const enough = Math.ceil((DEFAULTS.minSpeechSecs * RATE) / FRAME); // voiced frames that start a turn
  const voiced = (n) => Array(n).fill(0.9);
  const short = voiced(Math.floor(enough / 2));
  const rest = voiced(enough - short.length);
  // within the gap: the two runs add up
  assert.ok(run([...silence(0.3), ...short, ...silence(gap * 0.032), ...rest, ...silence(1.0)]).events.length);
  // one unvoiced frame longer than the gap: they do not
  const apart = run([...silence(0.3), ...short, ...Array(gap + 1).fill(0.02), ...rest, ...silence(1.0)]);
  assert.deepEqual(apart.events, []);
  // the gap frames themselves are not voice: one voiced frame short of enough, however the gaps fall
  const almost = run([...silence(0.3), ...short, ...Array(gap).fill(0.02), ...voiced(rest.length - 1), ...silence(1.0)]);
  assert.deepEqual(almost.events, []);
});

/** As `run`, with the onset probability of each frame given apart (`[prob, onset]` pairs). */
function runWithOnset(pairs, settings = DEFAULTS) {
  const ep = new Endpointer(settings);
  const events = [];
  pairs.forEach(([p, onset], i) => {
    for (const ev of ep.push(p, (i + 1) * FRAME, FRAME, onset)) events.push({ ...ev, frame: i });
  });
  return events;
}

test('outside a turn the onset probability classes a frame, so a word one stream half hears starts a turn', () => {
  const enough = Math.ceil((DEFAULTS.minSpeechSecs * RATE) / FRAME);
  const quiet = (secs) => silence(secs).map((p) => [p, p]);
  // The main stream hears the word for two frames, the onset stream for enough of them.
  const word = Array.from({ length: enough }, (_, i) => [i % 2 ? 0.9 : 0.2, 0.9]);
  const events = runWithOnset([...quiet(0.5), ...word, ...quiet(1.0)]);
  const start = events.find((e) => e.type === 'speech-start');
  assert.ok(start, 'the word starts a turn');
  assert.equal(start.voicedAt, frames(0.5) * FRAME);
  assert.deepEqual(run([...silence(0.5), ...word.map(([p]) => p), ...silence(1.0)]).events, [],
    'the main stream alone hears too little of it');
});

test('within a turn the main stream alone decides: the onset stream neither delays the pause nor resumes', () => {
  const voiced = (secs) => speech(secs).map((p) => [p, p]);
  // After the last word, the onset stream (half a frame behind) still hears a frame of it, and then a blip.
  const tail = [[0.02, 0.9], ...silence(0.3).map((p) => [p, p]), ...Array(4).fill([0.02, 0.9]),
    ...silence(1.5).map((p) => [p, p])];
  const events = runWithOnset([...silence(0.3).map((p) => [p, p]), ...voiced(1.0), ...tail]);
  const pause = events.find((e) => e.type === 'pause');
  assert.equal(pause.frame, frames(0.3) + frames(1.0), 'the pause is seen at the first frame the main stream calls silent');
  assert.equal(events.find((e) => e.type === 'speech-end').end, (frames(0.3) + frames(1.0)) * FRAME);
  assert.ok(!events.some((e) => e.type === 'resume'));
});

test('a blip inside a pause neither resumes the turn nor moves the end of speech', () => {
  const { events } = run([...speech(1.0), ...silence(0.3), 0.9, ...silence(1.0)]);
  const end = events.find((e) => e.type === 'speech-end');
  assert.equal(end.end, frames(1.0) * FRAME);
  assert.ok(!events.some((e) => e.type === 'resume'));
});

test('speech after a short pause resumes the turn and cancels the stale smart-turn answer', () => {
  const ep = new Endpointer(DEFAULTS);
  let at = 0;
  const feed = (probs) => probs.flatMap((p) => ep.push(p, (at += FRAME), FRAME));
  feed(speech(1.0));
  const check = feed(silence(0.3)).find((e) => e.type === 'turn-check');
  assert.ok(check);
  assert.ok(feed(speech(0.5)).some((e) => e.type === 'resume'));
  assert.deepEqual(ep.turnResult(check.pauseId, 0.99), [], 'an answer about an old pause is ignored');
  assert.equal(ep.state, State.SPEECH);
});

test('hysteresis keeps a frame between the thresholds in its previous class', () => {
  const mid = (DEFAULTS.vadStartProb + DEFAULTS.vadStopProb) / 2;
  const { events } = run([...speech(1.0), ...Array(frames(0.5)).fill(mid), ...silence(1.0)]);
  assert.equal(events.find((e) => e.type === 'speech-end').end, frames(1.5) * FRAME);
});

test('a turn never outgrows the maximum length', () => {
  const { events } = run(speech(DEFAULTS.maxTurnSecs + 1));
  const end = events.find((e) => e.type === 'speech-end');
  assert.equal(end.reason, 'max-length');
  assert.ok((end.end - end.start) / RATE <= DEFAULTS.maxTurnSecs + 0.05);
});

test('each kind of command is told once, when the silence is long enough for it', () => {
  const between = (DEFAULTS.commandSilenceSecs + DEFAULTS.prefixCommandSilenceSecs) / 2;
  const { events } = run([...speech(1.0), ...silence(between), ...speech(0.3), ...silence(1.0)], DEFAULTS, () => 0.2);
  const marks = events.filter((e) => e.type === 'command-silence');
  const pauses = events.filter((e) => e.type === 'pause');
  assert.equal(pauses.length, 2);
  assert.deepEqual(marks.map((m) => [m.kind, m.pauseId]),
    [['complete', pauses[0].pauseId], ['complete', pauses[1].pauseId], ['prefix', pauses[1].pauseId]],
    'the first pause is long enough for a complete command, too short for one that could go on');
  for (const mark of marks) {
    const wanted = mark.kind === 'complete' ? DEFAULTS.commandSilenceSecs : DEFAULTS.prefixCommandSilenceSecs;
    assert.ok(mark.silence_s >= wanted && mark.silence_s < wanted + 0.04, `${mark.kind} at ${mark.silence_s}`);
  }
  assert.equal(events.at(-1).type, 'speech-end');
});

test('prefixOnTurnComplete: a confident smart-turn gives the marks not given yet at once, a less sure one none', () => {
  const settings = { ...DEFAULTS, prefixOnTurnComplete: true };
  assert.ok(DEFAULTS.turnCheckSecs < DEFAULTS.prefixCommandSilenceSecs);
  const sure = run([...speech(1.0), ...silence(1.0)], settings, () => DEFAULTS.prefixTurnCompleteProb);
  const check = sure.events.find((e) => e.type === 'turn-check');
  const marks = sure.events.filter((e) => e.type === 'command-silence');
  assert.deepEqual(marks.map((m) => [m.kind, m.by]), [['complete', undefined], ['prefix', 'smart-turn']],
    'each kind once: the complete mark on its silence, the prefix mark on smart-turn\'s word');
  assert.equal(marks[1].frame, check.frame, 'at the answer, not after prefixCommandSilenceSecs');
  assert.ok(marks[1].silence_s < DEFAULTS.prefixCommandSilenceSecs);
  assert.equal(sure.events.at(-1).reason, 'smart-turn', 'the turn still ends after turnCompleteMinSilenceSecs');
  // complete for the turn, not sure enough for a command that could go on: that waits for its silence
  const between = (DEFAULTS.turnCompleteProb + DEFAULTS.prefixTurnCompleteProb) / 2;
  const unsure = run([...speech(1.0), ...silence(1.0)], settings, () => between);
  const prefix = unsure.events.find((e) => e.kind === 'prefix');
  assert.equal(prefix.by, undefined);
  assert.ok(prefix.silence_s >= DEFAULTS.prefixCommandSilenceSecs);
  // off (the default until measured): smart-turn's word gives no mark
  const off = run([...speech(1.0), ...silence(1.0)], DEFAULTS, () => 0.99);
  assert.ok(off.events.filter((e) => e.type === 'command-silence').every((m) => m.by === undefined));
});

test('prefixOnTurnComplete: no mark from smart-turn while voice is heard again', () => {
  const ep = new Endpointer({ ...DEFAULTS, prefixOnTurnComplete: true });
  const probs = [...speech(1.0), ...silence(0.25), 0.9];
  probs.forEach((p, i) => ep.push(p, (i + 1) * FRAME, FRAME));
  // the answer lands on a voiced blip: the speaker may be going on
  assert.deepEqual(ep.turnResult(ep.pauseId, 0.99), []);
  assert.equal(ep.state, State.PAUSE);
});

test('a pause between words is too short for any command to act', () => {
  // 0.1 s: the gaps inside fluent speech; a complete command acts after `commandSilenceSecs` (0.12 s), one that
  // more words could change after `prefixCommandSilenceSecs`
  const gap = 0.1;
  assert.ok(gap < DEFAULTS.commandSilenceSecs);
  const { events } = run([...speech(1.0), ...silence(gap), ...speech(0.3), ...silence(gap), ...speech(0.3)]);
  assert.deepEqual(events.filter((e) => e.type === 'command-silence'), []);
});

test('no command mark on a voiced frame, even past its silence (the words that extend it may be starting)', () => {
  // silence up to just before the complete mark, then a 64 ms blip (too short to resume) across it, then silence
  const before = DEFAULTS.commandSilenceSecs - 0.03;
  const probs = [...speech(1.0), ...silence(before), 0.9, 0.9, ...silence(1.0)];
  const { events } = run(probs);
  const first = events.find((e) => e.type === 'command-silence');
  assert.equal(first.frame, frames(1.0) + frames(before) + 2, 'the mark waits for the next silent frame');
});

test('with the mark due at the turn check, the mark comes first (smart-turn then holds the worker)', () => {
  const settings = { ...DEFAULTS, commandSilenceSecs: DEFAULTS.turnCheckSecs };
  const { events } = run([...speech(1.0), ...silence(1.0)], settings);
  const types = events.map((e) => e.type);
  assert.ok(types.indexOf('command-silence') < types.indexOf('turn-check'), types.join());
  assert.equal(events.find((e) => e.type === 'command-silence').frame, events.find((e) => e.type === 'turn-check').frame);
});

test('smart-turn calling a pause complete while the speaker goes on again does not cut the turn', () => {
  // 0.25 s of silence: smart-turn is asked at 0.2 s and answers "complete" on the frame the voice comes back
  // (no minimum silence here: this is about the answer racing the voice).
  const probs = [...speech(1.0), ...silence(0.25), ...speech(0.5), ...silence(1.0)];
  const ep = new Endpointer({ ...DEFAULTS, turnCompleteMinSilenceSecs: 0, commandSilenceSecs: 0.3 });
  const seen = [];
  probs.forEach((p, i) => {
    for (const ev of ep.push(p, (i + 1) * FRAME, FRAME)) seen.push(ev.type);
    if (i === frames(1.0) + frames(0.25)) seen.push(...ep.turnResult(ep.pauseId, 0.99).map((e) => e.type));
  });
  assert.deepEqual(seen, ['speech-start', 'pause', 'turn-check', 'resume', 'pause', 'turn-check', 'command-silence',
    'command-silence', 'speech-end'], 'one turn, ended after the second pause');
});

test('a complete answer that came during a blip ends the turn at the next silent frame', () => {
  const ep = new Endpointer({ ...DEFAULTS, turnCompleteMinSilenceSecs: 0 });
  const probs = [...speech(1.0), ...silence(0.25), 0.9, ...silence(1.0)];
  const ends = [];
  probs.forEach((p, i) => {
    for (const ev of ep.push(p, (i + 1) * FRAME, FRAME)) if (ev.type === 'speech-end') ends.push({ ...ev, frame: i });
    if (i === frames(1.0) + frames(0.25)) ends.push(...ep.turnResult(ep.pauseId, 0.99).map((e) => ({ ...e, frame: i })));
  });
  assert.equal(ends.length, 1);
  assert.equal(ends[0].reason, 'smart-turn');
  assert.equal(ends[0].frame, frames(1.0) + frames(0.25) + 1, 'at the first silent frame after the blip');
});

test('a resume says where the speech that resumed the turn starts (with its pre-roll, inside the turn)', () => {
  const { events } = run([...silence(0.5), ...speech(1.0), ...silence(0.4), ...speech(0.5), ...silence(1.0)]);
  const start = events.find((e) => e.type === 'speech-start');
  const resume = events.find((e) => e.type === 'resume');
  assert.equal(resume.voicedAt, (frames(0.5) + frames(1.0) + frames(0.4)) * FRAME);
  assert.equal(resume.start, resume.voicedAt - DEFAULTS.preRollSecs * RATE);
  assert.ok(resume.start > start.voicedAt);
  // a pause shorter than the pre-roll: the resumed speech starts no earlier than the turn
  const short = run([...speech(0.2), ...silence(0.15), ...speech(0.5), ...silence(1.0)]).events;
  const early = short.find((e) => e.type === 'resume');
  assert.equal(early.start, Math.max(0, early.voicedAt - DEFAULTS.preRollSecs * RATE));
});
