// Turn endpointing from Silero VAD probabilities, one 32 ms frame at a time.
//
//   SILENCE ──voiced ≥ minSpeechSecs──► SPEECH ──unvoiced──► PAUSE ──silence ≥ hangoverSecs──► (turn ends) SILENCE
//                                          ▲                   │  ├─silence ≥ commandSilenceSecs, then ≥
//                                          │                   │  │ prefixCommandSilenceSecs: say so once each (a
//                                          │                   │  │ complete command, then one that could go on, acts)
//                                          └──voiced ≥ resume──┘  └─silence ≥ turnCheckSecs: ask smart-turn once;
//                                                                    P(complete) ≥ turnCompleteProb ends the turn
//                                                                    once silence ≥ turnCompleteMinSilenceSecs (and,
//                                                                    with prefixOnTurnComplete, gives the command
//                                                                    marks not given yet at once)
//
// A click or a cough is shorter than minSpeechSecs, so it cannot start a turn; ending needs silence, so it cannot
// end one either. The voiced audio that starts a turn is counted over an onset whose gaps are at most
// `onsetGapSecs` long: a word is often heard as two voiced runs split by its stop consonant ("mu|te", "sto|p": the
// closure reads as one or two unvoiced frames), and neither run alone is as long as minSpeechSecs. Hysteresis: a
// frame is voiced at p ≥ vadStartProb, unvoiced at p < vadStopProb, and between the two it keeps the previous
// frame's class. Voiced blips inside a pause that are too short to resume it do not move the end of speech
// either. Positions are absolute sample indices on the capture clock.
//
// While no turn is going on, a frame is classed by its *onset probability*, which the listening worker may take from
// more than one Silero stream (`vadOnsetPhases`: the larger of two streams half a frame apart): how many frames of a
// short word Silero calls voiced depends on where the frame boundaries fall in it ("mute", one espeak voice: 1 to 9
// of its frames as the boundaries move by 64 samples), so one stream misses some short words outright. Within a
// turn the one stream decides, so the end of speech is placed as before and no pause is seen later.

export const State = Object.freeze({ SILENCE: 'silence', SPEECH: 'speech', PAUSE: 'pause' });
/** Voiced audio that ends a pause: shorter blips (a breath, a click) leave the pause running. */
export const RESUME_SECS = 0.096;

/**
 * @typedef {{type: 'speech-start', start: number, voicedAt: number}
 *   | {type: 'pause', start: number, end: number, pauseId: number}
 *   | {type: 'resume', pauseId: number, start: number, voicedAt: number}
 *   | {type: 'turn-check', start: number, end: number, pauseId: number}
 *   | {type: 'command-silence', kind: 'complete'|'prefix', pauseId: number, silence_s: number, by?: 'smart-turn'}
 *   | {type: 'speech-end', start: number, end: number, silence_s: number,
 *      reason: 'smart-turn'|'hangover'|'max-length'}} EndpointEvent
 */

export class Endpointer {
  /** @param {import('./settings.js').Settings} settings */
  constructor(settings) {
    this.s = settings;
    this.rate = settings.sampleRate;
    this.pauseId = 0; // increases across turns, so an answer about any earlier pause is recognisably stale
    /** The silences a command waits for before it acts, by kind, shortest first. */
    this.commandMarks = [['complete', settings.commandSilenceSecs], ['prefix', settings.prefixCommandSilenceSecs]]
      .sort((a, b) => a[1] - b[1]);
    this.reset();
  }

  reset() {
    this.state = State.SILENCE;
    this.voiced = false;
    this.runStart = -1; // first sample of the current voiced run
    this.onsetStart = -1; // first sample of the onset (voiced runs whose gaps are at most onsetGapSecs)
    this.onsetVoiced = 0; // voiced samples in the onset
    this.onsetEnd = -1; // sample after the onset's last voiced frame
    this.turnStart = -1; // first sample of the turn (pre-roll included)
    this.lastVoicedEnd = -1; // sample after the last voiced frame: the end of speech
    this.turnChecked = false;
    this.silenceMarks = 0; // how many of the command-silence marks this pause has had
    this.completeAt = 0; // a pause smart-turn called complete too soon (voice heard again, or not silent enough)
  }

  /**
   * @param {number} prob Silero's speech probability for the frame [end - frameSamples, end)
   * @param {number} end absolute index of the sample after the frame
   * @param {number} frameSamples
   * @param {number} [onsetProb] the probability that classes the frame while no turn is going on (see above)
   * @returns {EndpointEvent[]}
   */
  push(prob, end, frameSamples, onsetProb = prob) {
    const start = end - frameSamples;
    this.lastSeen = end;
    const wasVoiced = this.voiced;
    const p = this.state === State.SILENCE ? onsetProb : prob;
    this.voiced = p >= this.s.vadStartProb || (wasVoiced && p >= this.s.vadStopProb);
    if (this.voiced && !wasVoiced) this.runStart = start;
    const runSecs = this.voiced ? (end - this.runStart) / this.rate : 0;

    switch (this.state) {
      case State.SILENCE:
        return this.#onset(start, end) ? this.#startTurn(end) : [];
      case State.SPEECH:
        if (this.voiced) {
          this.lastVoicedEnd = end;
          return this.#tooLong(end);
        }
        this.state = State.PAUSE;
        this.turnChecked = false;
        this.silenceMarks = 0;
        this.completeAt = 0;
        this.pauseId += 1;
        return [{ type: 'pause', start: this.turnStart, end: this.lastVoicedEnd, pauseId: this.pauseId }];
      case State.PAUSE:
        return this.#inPause(end, runSecs);
    }
    return [];
  }

  /**
   * smart-turn's answer for a pause; ends the turn when confident and the pause is still the current one, once
   * the silence is `turnCompleteMinSilenceSecs` long (smart-turn alone does not tell a pause in the middle of a
   * sentence from its end well enough: see settings.js). When it comes while voice is heard again (not yet long
   * enough to resume), it waits for the next silent frame: the speaker may be going on, and smart-turn only heard
   * what came before.
   */
  turnResult(pauseId, probComplete) {
    if (this.state !== State.PAUSE || pauseId !== this.pauseId || probComplete < this.s.turnCompleteProb) return [];
    if (this.voiced || this.lastSeen - this.lastVoicedEnd < this.s.turnCompleteMinSilenceSecs * this.rate) {
      this.completeAt = pauseId;
      return this.#commandMarksNow(probComplete);
    }
    return this.#endTurn('smart-turn', this.lastSeen);
  }

  /**
   * smart-turn calls the pause complete before the silence a command that could go on waits for
   * (`prefixCommandSilenceSecs`): with `prefixOnTurnComplete`, at `prefixTurnCompleteProb` or more, every command
   * mark not given yet is given now (once each, in order), so such a command acts on smart-turn's word. Not while
   * voice is heard again: the speaker may be going on.
   */
  #commandMarksNow(probComplete) {
    if (!this.s.prefixOnTurnComplete || this.voiced || probComplete < this.s.prefixTurnCompleteProb) return [];
    const silence_s = (this.lastSeen - this.lastVoicedEnd) / this.rate;
    const events = [];
    while (this.silenceMarks < this.commandMarks.length) events.push(this.#nextMark(silence_s, { by: 'smart-turn' }));
    return events;
  }

  /** The next command mark of this pause (`silence_s` heard so far), counted as given. */
  #nextMark(silence_s, extra = {}) {
    const [kind] = this.commandMarks[this.silenceMarks++];
    return { type: 'command-silence', kind, pauseId: this.pauseId, silence_s, ...extra };
  }

  /** In silence: counts the frame [start, end) into the onset; whether the onset now has enough voice. */
  #onset(start, end) {
    if (!this.voiced) {
      if (this.onsetVoiced && end - this.onsetEnd > this.s.onsetGapSecs * this.rate) this.onsetVoiced = 0;
      return false;
    }
    if (!this.onsetVoiced) this.onsetStart = start;
    this.onsetVoiced += end - start;
    this.onsetEnd = end;
    return this.onsetVoiced >= this.s.minSpeechSecs * this.rate;
  }

  #startTurn(end) {
    this.state = State.SPEECH;
    this.lastVoicedEnd = end;
    this.turnStart = Math.max(0, this.onsetStart - Math.round(this.s.preRollSecs * this.rate));
    return [{ type: 'speech-start', start: this.turnStart, voicedAt: this.onsetStart }];
  }

  #inPause(end, runSecs) {
    if (this.voiced && runSecs >= RESUME_SECS) {
      this.state = State.SPEECH;
      this.lastVoicedEnd = end;
      const start = Math.max(this.turnStart, this.runStart - Math.round(this.s.preRollSecs * this.rate));
      return [{ type: 'resume', pauseId: this.pauseId, start, voicedAt: this.runStart }, ...this.#tooLong(end)];
    }
    const silentSecs = (end - this.lastVoicedEnd) / this.rate;
    if (silentSecs >= this.s.hangoverSecs) return this.#endTurn('hangover', end);
    if (this.completeAt === this.pauseId && !this.voiced && silentSecs >= this.s.turnCompleteMinSilenceSecs) {
      return this.#endTurn('smart-turn', end);
    }
    // The mark goes first: the listening worker runs smart-turn for a turn check before it reads on.
    const events = [];
    // Not on a voiced frame: it may be the start of the words that extend the command.
    const marks = this.commandMarks;
    while (!this.voiced && this.silenceMarks < marks.length && silentSecs >= marks[this.silenceMarks][1]) {
      events.push(this.#nextMark(silentSecs));
    }
    if (!this.turnChecked && silentSecs >= this.s.turnCheckSecs) {
      this.turnChecked = true;
      events.push({ type: 'turn-check', start: this.turnStart, end: this.lastVoicedEnd, pauseId: this.pauseId });
    }
    return events;
  }

  #tooLong(end) {
    return (end - this.turnStart) / this.rate >= this.s.maxTurnSecs ? this.#endTurn('max-length', end) : [];
  }

  /** @param {number} decidedAt the sample position at which the decision was taken */
  #endTurn(reason, decidedAt) {
    const silence_s = (decidedAt - this.lastVoicedEnd) / this.rate;
    const event = { type: 'speech-end', start: this.turnStart, end: this.lastVoicedEnd, reason, silence_s };
    this.reset();
    return [event];
  }
}
