// The conversation's turn as one state machine: where the exchange stands, which server turn is unfinished,
// which replies are playing, and what speaking over them means. Pure: each input returns the effects the page
// must carry out (play, hold, stop, tell the server, emit); times come in on the capture clock. The page
// (voxline.js) feeds it the endpointer's events, its own decisions and the server's messages, and does what it says.
//
//   idle ──speech-start──► hearing ──speech-end──► deciding ──command acted──────────────────────► idle (local)
//    ▲ ▲                   │  ▲  │                 │  ├──nothing to act on, or no server ─────────► idle (nothing,
//    │ │  a command acted  │  │  │                 │  │                                                unreachable)
//    │ │  at a pause ◄─────┘  │  │                 │  └──sent to the server──► server-pending ──reply audio──► replying
//    │ │  (idle at its end;   │  │                 │                               │                          │
//    │ │  deciding if the     │  │                 │                               │                          │
//    │ │  speaker went on)    │  │                 │                               │                          │
//    │ │                      │  ├──────── speech-start, nothing audible: hold ───◄┤                          │
//    │ │                      │  └──────── speech-start: barge-in (one transition) ◄┼──────────────────────────┤
//    │ └─ reply.done, nothing (more) to play: idle (reply, interrupted) ◄──────────┘                          │
//    └─── its last sample played, or the link dropped ◄──────────────────────────────────────────────────────┘
//
// Barge-in is the one transition from server-pending or replying back to hearing: the reply stops playing, the
// server is told how much was heard, and audio of that turn still in flight is never played. It happens at once
// when speech starts while reply audio is queued or playing.
//
// Hold: speech that starts while the server is still answering and nothing of its answer is audible yet may be a
// cough, a noise, or a word that leads nowhere; cancelling then would lose an answer (often a command the server
// needs a second or two to resolve) to a sound. So the server turn is held: the new utterance leads (hearing), the
// turn's text, `reply.done` and intent go on as usual, and its audio is kept, not played. The new utterance decides:
//
//   held ──the utterance is a real turn (sending, command, unreachable)──► barge-in on the held turn (nothing heard)
//        ──the utterance is nothing─────────────────────────────────────► resume: server-pending; replying, its kept
//                                                                          audio from the start; idle (its outcome)
//        ──the link dropped─────────────────────────────────────────────► its final reply (interrupted), audio dropped
//
// `voxline:turn` reports every phase change; a turn that produced nothing ends in `idle` too, so a host never has to
// guess with a timer. `hearing` carries `interrupted` (the turn id) only when speech barged in on something.

export const Phase = Object.freeze({
  IDLE: 'idle', HEARING: 'hearing', DECIDING: 'deciding', SERVER_PENDING: 'server-pending', REPLYING: 'replying',
});

/** How an exchange ended, reported with `idle`. */
export const Outcome = Object.freeze({
  LOCAL: 'local', // a command acted on the device (cache or grammar): no network
  REPLY: 'reply', // the server answered (an intent, a spoken reply, or both) and its audio has played
  INTERRUPTED: 'interrupted', // the server's answer ended early (it said so, or its connection dropped)
  NOTHING: 'nothing', // nothing intelligible was said: no transcript, nothing to act on
  UNREACHABLE: 'unreachable', // the turn needed the server, and there is none right now
});

/**
 * @typedef {{type: 'speech-start', t: number} | {type: 'speech-end', t: number, wentOn?: boolean}
 *   | {type: 'command', t: number} | {type: 'nothing', t: number} | {type: 'unreachable', t: number}
 *   | {type: 'sending', t: number} | {type: 'sent', t: number, turnId: number}
 *   | {type: 'reply-text', turnId: number, text: string} | {type: 'reply-audio', turnId: number}
 *   | {type: 'reply-done', turnId: number, text: string, interrupted: boolean}
 *   | {type: 'playback-ended', turnId: number} | {type: 'link-down'}} TurnInput
 *   speech-end `wentOn`: a command acted at a pause and the speaker went on; what they added is decided as a turn
 *   is (the turn still ends local when that is nothing, or amends the command).
 *   command: a local or cached command acted (at a pause, or once the turn was over); nothing: the turn's final
 *   transcript gave nothing to act on or send; sending: a server turn is about to go out (the previous one must be
 *   finished first); playback-ended: the reply's last sample played, or its playback was stopped.
 */
/**
 * @typedef {{type: 'phase', phase: string, outcome?: string, turnId?: number, interrupted?: number}
 *   | {type: 'barge-in', turnId: number|null}
 *   | {type: 'play', turnId: number, begin: boolean}
 *   | {type: 'hold', turnId: number} | {type: 'release', turnId: number}
 *   | {type: 'drop', turnId: number, replied: boolean}
 *   | {type: 'end-playback', turnId: number}
 *   | {type: 'reply', turnId: number, text: string, final: boolean, interrupted?: boolean,
 *      audioPending?: boolean}} TurnEffect
 *   barge-in: stop playback now and tell the server how much of `turnId` (null: only what is playing) was heard;
 *   play: queue this reply audio (`begin`: its first chunk); end-playback: the reply has no more audio coming.
 *   hold: keep this reply audio of the held turn, unplayed; release: play all of it kept so far, from its start
 *   (its later audio comes as `play`); drop: forget it, none of it will play (`replied`: its final `reply` said
 *   audio was pending).
 */

/** A server turn held by speech that started before anything of its answer was audible. */
class HeldTurn {
  /** @param {number} turnId */
  constructor(turnId) {
    /** The server turn held. */
    this.turnId = turnId;
    /** Whether reply audio of it has been kept (`hold`). */
    this.audio = false;
    /** How it ended, once its `reply.done` came (it is then finished on the server); null before. */
    this.outcome = null;
  }
}

export class TurnMachine {
  /** @param {{hold?: boolean}} options hold: speech over a silent answer holds it (default); false barges in */
  constructor({ hold = true } = {}) {
    this.hold = hold;
    this.phase = Phase.IDLE;
    /** @type {number|null} the server turn sent and not yet finished (`reply.done`): at most one */
    this.serverTurn = null;
    /** @type {HeldTurn|null} the server turn held until the utterance that started over it is decided */
    this.held = null;
    /** @type {Map<number, {text: string, audio: boolean}>} server turn → its reply so far, until `reply.done` */
    this.replies = new Map();
    /** @type {Set<number>} turns barged in on before their `reply.done`: their late audio is dropped */
    this.silenced = new Set();
    /** @type {Set<number>} turns whose audio is queued or playing and whose last sample has not played */
    this.playing = new Set();
    /** Whether a command acted while the user was still in the turn (at a pause). */
    this.acted = false;
    /** How the exchange ends once the reply still playing has played out. */
    this.ending = Outcome.REPLY;
  }

  /** @param {TurnInput} input @returns {TurnEffect[]} */
  input(input) {
    switch (input.type) {
      case 'speech-start': return this.#speechStart();
      case 'speech-end':
        if (this.phase !== Phase.HEARING) return [];
        return this.acted && !input.wentOn ? this.#to(Phase.IDLE, Outcome.LOCAL) : this.#to(Phase.DECIDING);
      case 'command': return this.#command();
      case 'nothing':
        if (this.phase !== Phase.DECIDING) return [];
        if (this.held) return this.#resume();
        return this.#to(Phase.IDLE, this.acted ? Outcome.LOCAL : Outcome.NOTHING); // acted: before the speaker went on
      case 'unreachable':
        if (this.phase !== Phase.DECIDING) return [];
        return [...this.#bargeInOnHeld(), ...this.#to(Phase.IDLE, Outcome.UNREACHABLE)];
      case 'sending': return this.serverTurn === null && !this.held ? [] : this.#bargeIn();
      case 'sent': return this.#sent(input.turnId);
      case 'reply-text': return this.#replyText(input.turnId, input.text);
      case 'reply-audio': return this.#replyAudio(input.turnId);
      case 'reply-done': return this.#replyDone(input.turnId, input.text, input.interrupted);
      case 'playback-ended': return this.#playbackEnded(input.turnId);
      case 'link-down': return this.#linkDown();
      default: throw new Error(`unknown turn input ${input.type}`);
    }
  }

  /** Whether the assistant is answering: a server turn unfinished, or reply audio queued or playing. */
  get answering() {
    return this.serverTurn !== null || this.playing.size > 0;
  }

  /** Whether the phase is the server's answer (not an utterance of the user's). */
  #answering() {
    return this.phase === Phase.SERVER_PENDING || this.phase === Phase.REPLYING;
  }

  /** Move to `phase`; reported when it changes, or always (`force`: a new utterance over an answer). */
  #to(phase, outcome = undefined, extra = {}, force = false) {
    if (phase === this.phase && outcome === undefined && !force) return [];
    this.phase = phase;
    if (phase === Phase.IDLE || phase === Phase.HEARING) this.acted = false;
    return [{ type: 'phase', phase, ...(outcome === undefined ? {} : { outcome }), ...extra }];
  }

  /**
   * The user speaks: a new utterance. Over audio of an answer, a barge-in at once (the user hears it stop within
   * one chunk); over a server turn nothing of which is audible yet, a hold (the utterance may be a cough).
   */
  #speechStart() {
    if (this.held || (this.hold && this.#silentServerTurn())) {
      this.held ??= new HeldTurn(this.serverTurn);
      return this.#to(Phase.HEARING);
    }
    if (!this.answering) return this.#to(Phase.HEARING);
    const interrupted = this.serverTurn ?? [...this.playing].at(-1);
    return [...this.#bargeIn(), ...this.#to(Phase.HEARING, undefined, { interrupted }, true)];
  }

  /** Whether a server turn is unfinished and nothing of its answer has reached the player yet. */
  #silentServerTurn() {
    return this.serverTurn !== null && !this.replies.get(this.serverTurn)?.audio && this.playing.size === 0;
  }

  /** A local command acted: a real turn, so a turn it held is barged in on. */
  #command() {
    if (this.phase === Phase.HEARING) {
      this.acted = true;
      return this.#bargeInOnHeld();
    }
    if (this.phase !== Phase.DECIDING) return [];
    return [...this.#bargeInOnHeld(), ...this.#to(Phase.IDLE, Outcome.LOCAL)];
  }

  /**
   * Stop what plays, and finish the unfinished server turn: nothing more of it may be heard. A held turn is
   * barged in on as if at the speech that held it: nothing of it was heard, whether or not it has finished.
   */
  #bargeIn() {
    const held = this.held;
    this.held = null;
    const turnId = this.serverTurn ?? held?.turnId ?? null;
    if (this.serverTurn !== null) this.silenced.add(this.serverTurn); // until its reply.done: no audio may start
    this.serverTurn = null;
    this.playing.clear();
    const dropped = held?.audio ? [{ type: 'drop', turnId: held.turnId, replied: held.outcome !== null }] : [];
    return [...dropped, { type: 'barge-in', turnId }];
  }

  #bargeInOnHeld() {
    return this.held ? this.#bargeIn() : [];
  }

  /**
   * The utterance that held a server turn was nothing: the turn goes on where it stands, as if never held. Its
   * kept audio plays from its start, so the user hears the whole answer.
   */
  #resume() {
    const { turnId, audio, outcome } = this.held;
    this.held = null;
    if (outcome !== null) this.ending = outcome;
    if (!audio) {
      return outcome === null ? this.#to(Phase.SERVER_PENDING, undefined, { turnId })
        : this.#to(Phase.IDLE, outcome, { turnId });
    }
    this.playing.add(turnId);
    const ended = outcome === null ? [] : [{ type: 'end-playback', turnId }];
    return [{ type: 'release', turnId }, ...ended, ...this.#to(Phase.REPLYING, undefined, { turnId })];
  }

  /** The turn went to the server (while the user has not started a new utterance meanwhile: then that one leads). */
  #sent(turnId) {
    this.serverTurn = turnId;
    this.replies.set(turnId, { text: '', audio: false });
    this.ending = Outcome.REPLY;
    return this.phase === Phase.DECIDING ? this.#to(Phase.SERVER_PENDING, undefined, { turnId }) : [];
  }

  #replyText(turnId, text) {
    const reply = this.replies.get(turnId);
    if (!reply) return [];
    reply.text += text;
    return [{ type: 'reply', turnId, text: reply.text, final: false }];
  }

  #replyAudio(turnId) {
    const reply = this.replies.get(turnId);
    if (!reply || this.silenced.has(turnId)) return []; // sent before the server heard the barge-in
    const begin = !reply.audio;
    reply.audio = true;
    if (this.held?.turnId === turnId) {
      this.held.audio = true;
      return [{ type: 'hold', turnId }];
    }
    this.playing.add(turnId);
    const effects = [{ type: 'play', turnId, begin }];
    if (turnId === this.serverTurn && this.phase === Phase.SERVER_PENDING) {
      effects.push(...this.#to(Phase.REPLYING, undefined, { turnId }));
    }
    return effects;
  }

  #replyDone(turnId, text, interrupted) {
    const reply = this.replies.get(turnId);
    const audio = Boolean(reply?.audio) && !this.silenced.has(turnId);
    this.replies.delete(turnId);
    this.silenced.delete(turnId);
    const outcome = interrupted ? Outcome.INTERRUPTED : Outcome.REPLY;
    if (this.held?.turnId === turnId) {
      // finished on the server; on the page its kept audio (if any) is pending until the hold is decided
      this.serverTurn = null;
      this.held.outcome = outcome;
      return [{ type: 'reply', turnId, text, final: true, interrupted, audioPending: this.held.audio }];
    }
    const effects = audio ? [{ type: 'end-playback', turnId }] : [];
    const audioPending = audio && this.playing.has(turnId);
    effects.push({ type: 'reply', turnId, text, final: true, interrupted, audioPending });
    if (turnId !== this.serverTurn) return effects; // barged in on: the new utterance owns the phase
    this.serverTurn = null;
    this.ending = outcome;
    if (!this.#answering() || audioPending) return effects; // replying until its last sample has played
    return [...effects, ...this.#to(Phase.IDLE, this.ending, { turnId })];
  }

  #playbackEnded(turnId) {
    this.playing.delete(turnId);
    if (this.phase !== Phase.REPLYING || this.serverTurn !== null || this.playing.size) return [];
    return this.#to(Phase.IDLE, this.ending, { turnId });
  }

  /**
   * The connection dropped: the turns it was answering are over, with what arrived of them. Audio already received
   * still plays out (a held turn's kept audio does not: the utterance over it leads); each turn gets its final
   * reply (interrupted), and none is barged in on later.
   */
  #linkDown() {
    const held = this.held;
    this.held = null;
    const effects = held?.audio ? [{ type: 'drop', turnId: held.turnId, replied: held.outcome !== null }] : [];
    const turnIds = new Set(this.replies.keys());
    if (this.serverTurn !== null) turnIds.add(this.serverTurn);
    for (const turnId of turnIds) {
      const reply = this.replies.get(turnId);
      const audio = Boolean(reply?.audio) && !this.silenced.has(turnId) && turnId !== held?.turnId;
      if (audio) effects.push({ type: 'end-playback', turnId });
      effects.push({ type: 'reply', turnId, text: reply?.text ?? '', final: true, interrupted: true,
        audioPending: audio && this.playing.has(turnId) });
    }
    this.replies.clear();
    this.silenced.clear();
    this.serverTurn = null;
    this.ending = Outcome.INTERRUPTED;
    if (!this.#answering() || this.playing.size) return effects; // what arrived plays out, then idle
    return [...effects, ...this.#to(Phase.IDLE, Outcome.INTERRUPTED)];
  }
}
