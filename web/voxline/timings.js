// Where each turn's time went, on the capture clock: the `voxline:timings` event and the waterfall the demo page
// draws from it. Pure: it is fed the page's own `voxline:*` events (and three facts of the backend link that are
// not events) and says when a turn's record is complete; nothing here reads a clock.
//
//   speech_end ─ turn_end ─ transcript ─┬─ intent ───────────────────────────────────────── (a command: done)
//                                       └─ sent ─ [server: uplink asr intent queue prefill decode tts transport]
//                                                   ─ first_audio ─ reply done + server timings (done)
//
// Every stage is an `audio_t` (seconds of microphone audio captured) except `speech_end`, which is where speech
// ended in the input (the last voiced sample): so `stage − speech_end` is the latency the user lived through.

import { EVENTS } from './protocol.js';

/** The stages a record may hold, in the order a turn without surprises reaches them. */
export const STAGES = Object.freeze(['speech_end', 'turn_end', 'transcript', 'intent', 'sent', 'first_audio']);
/** Turns waiting for a stage that may never come (nothing intelligible was said, the server was down) are
 * forgotten once this many newer turns are open. */
export const MAX_OPEN_TURNS = 8;

/**
 * @typedef {{turn_id: number, stages: Partial<Record<typeof STAGES[number], number>>, source?: string,
 *   early?: boolean, server_turn_id?: number, interrupted?: boolean, timings?: object}} TurnRecord
 *   turn_id: the page's count of turns (each utterance the endpointer found); server_turn_id: the id of the
 *   backend turn it became, which the `voxline:reply*` events carry; timings: the server's own `timings` message.
 */

export class TurnTimings {
  /** @param {(record: TurnRecord) => void} emit called once per turn, when its record is complete */
  constructor(emit) {
    this.emit = emit;
    /** @type {(TurnRecord & {text?: string, replied?: boolean, audioPending?: boolean})[]} oldest first */
    this.open = [];
    this.nextTurnId = 1;
  }

  /**
   * Feed every `voxline:*` event the page emits, in order.
   * @param {string} name @param {any} d its detail (with `audio_t`)
   */
  observe(name, d) {
    switch (name) {
      case EVENTS.speechStart:
        this.open.push({ turn_id: this.nextTurnId++, stages: {} });
        this.open.splice(0, Math.max(0, this.open.length - MAX_OPEN_TURNS));
        return;
      case EVENTS.speechEnd: {
        const turn = this.#newest((t) => t.stages.speech_end === undefined);
        if (!turn) return;
        turn.stages.speech_end = d.end_t;
        turn.stages.turn_end = d.audio_t;
        return;
      }
      case EVENTS.transcript: {
        if (!d.final || d.source === 'server') return;
        // The final transcript names the end of speech it was decoded up to: that picks its turn exactly.
        const turn = this.#newest((t) => t.stages.transcript === undefined && t.stages.speech_end === d.end_t)
          ?? this.#newest((t) => t.stages.transcript === undefined && t.stages.speech_end !== undefined);
        if (!turn) return;
        turn.stages.transcript = d.audio_t;
        turn.text = d.text;
        return this.#check(turn);
      }
      case EVENTS.intent: {
        if (d.source === 'server') {
          const turn = this.#server(d.turn_id);
          if (turn && turn.stages.intent === undefined) turn.stages.intent = d.audio_t;
          return;
        }
        // A final transcript's intent belongs to the turn still deciding with that transcript (a turn the server
        // could not take stays undecided: the text keeps it from taking a later turn's intent); an early one (a
        // complete command heard in a partial transcript) to the turn being heard.
        const turn = (d.early ? undefined : this.#deciding(d.text))
          ?? this.#newest((t) => t.stages.transcript === undefined && !t.source);
        if (!turn) return;
        turn.stages.intent = d.audio_t;
        turn.source = d.source;
        if (d.early) turn.early = true;
        return this.#check(turn);
      }
      case EVENTS.replyAudio: {
        const turn = this.#server(d.turn_id);
        if (!turn) return;
        if (d.first && turn.stages.first_audio === undefined) turn.stages.first_audio = d.audio_t;
        if (d.last) turn.audioPending = false;
        return this.#check(turn);
      }
      default:
    }
  }

  /** The page sent the turn with final transcript `text` to the backend, as `serverTurnId`, at `audioT`. */
  sent(serverTurnId, audioT, text) {
    const turn = this.#deciding(text);
    if (!turn) return;
    turn.stages.sent = audioT;
    turn.source = 'server';
    turn.server_turn_id = serverTurnId;
  }

  /** The server's `reply.done` for a turn; `audioPending`: its reply audio is queued but may not have started
   * playing (the record then waits for `voxline:reply-audio` first or last). */
  replyDone(serverTurnId, { interrupted = false, audioPending = false } = {}) {
    const turn = this.#server(serverTurnId);
    if (!turn) return;
    turn.replied = true;
    turn.interrupted = interrupted;
    turn.audioPending = audioPending;
    this.#check(turn);
  }

  /** The server's `timings` message for a turn (it follows `reply.done`). */
  serverTimings(serverTurnId, timings) {
    const turn = this.#server(serverTurnId);
    if (!turn) return;
    const { type: _type, turn_id: _id, ...own } = timings;
    turn.timings = own;
    this.#check(turn);
  }

  /** The link dropped: what its turns were waiting for will not come; they are complete with what they have. */
  linkDown() {
    for (const turn of this.open.filter((t) => t.server_turn_id !== undefined)) this.#complete(turn);
  }

  /** The oldest turn with a final transcript and no answer yet: the one with `text` if any has it. */
  #deciding(text) {
    const deciding = this.open.filter((t) => t.stages.transcript !== undefined && !t.source);
    return deciding.find((t) => t.text === text) ?? deciding[0];
  }

  #server(serverTurnId) {
    return this.open.find((t) => t.server_turn_id === serverTurnId);
  }

  #newest(predicate) {
    for (let i = this.open.length - 1; i >= 0; i--) if (predicate(this.open[i])) return this.open[i];
    return undefined;
  }

  #check(turn) {
    const s = turn.stages;
    const local = turn.source && turn.source !== 'server';
    if (local ? s.transcript !== undefined && s.intent !== undefined
      : turn.replied && turn.timings && (s.first_audio !== undefined || !turn.audioPending)) this.#complete(turn);
  }

  #complete(turn) {
    this.open.splice(this.open.indexOf(turn), 1);
    const { replied: _r, audioPending: _a, text: _t, ...record } = turn;
    this.emit(record);
  }
}

/**
 * @typedef {{label: string, start_ms: number, end_ms: number, lane: 'page'|'server'}} Bar
 *   a span of a turn in milliseconds after the end of speech (negative: before it)
 */

/** The server's stages (`timings.stages`, durations in ms from when it received the turn), in their order. */
export const SERVER_STAGES = Object.freeze(['uplink', 'asr', 'intent', 'classify', 'queue', 'prefill', 'decode', 'tts',
  'transport']);

/**
 * The waterfall of one `voxline:timings` record: each stage as a bar from the stage before it; the server's own
 * stages laid from the moment the turn was sent, or for a speculative turn from its start, `confirmed_ms` before
 * its confirmation (their clock is the server's: loopback or LAN puts them within a few milliseconds of where they
 * really were).
 * @param {TurnRecord} record
 * @returns {Bar[]}
 */
export function waterfall(record) {
  const s = record.stages;
  if (s.speech_end === undefined) return [];
  const ms = (t) => Math.round((t - s.speech_end) * 1000);
  const bars = [];
  let previous = 0;
  const bar = (label, t, from = previous) => {
    if (t === undefined) return;
    const end = ms(t);
    bars.push({ label, start_ms: Math.min(from, end), end_ms: end, lane: 'page' });
    previous = Math.max(previous, end);
  };
  bar('endpoint', s.turn_end);
  bar('transcript', s.transcript);
  if (record.early && s.intent !== undefined) bars.push({ label: 'intent (early)', start_ms: ms(s.intent), end_ms: ms(s.intent), lane: 'page' });
  else if (s.sent === undefined) bar('intent', s.intent);
  if (s.sent !== undefined) {
    bar('send', s.sent);
    const sentMs = ms(s.sent);
    let at = sentMs - Math.round(record.timings?.confirmed_ms ?? 0);
    for (const name of SERVER_STAGES) {
      const duration = record.timings?.stages?.[name];
      if (duration === undefined) continue;
      bars.push({ label: name, start_ms: Math.round(at), end_ms: Math.round(at + duration), lane: 'server' });
      at += duration;
    }
    if (s.intent !== undefined) bars.push({ label: 'server intent', start_ms: sentMs, end_ms: ms(s.intent), lane: 'page' });
    // From the server's last stage (its first audio frame left) to the first sample played: network and jitter buffer.
    bar('first audio', s.first_audio, Math.round(at));
  }
  return bars;
}
