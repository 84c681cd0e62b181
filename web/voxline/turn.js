// The conversation's turn as one state machine: where the exchange stands, which server turn is unfinished,
// which replies are playing, and what speaking over them means. Pure: each input returns the effects the page
// must carry out (play, stop, tell the server, emit); times come in on the capture clock. The page (voxline.js)
// feeds it the endpointer's events, its own decisions and the server's messages, and does what it says.
//
//   idle ──speech-start──► hearing ──speech-end──► deciding ──command acted──────────────────────► idle (local)
//    ▲ ▲                   │  ▲  │                 │  ├──nothing to act on, or no server ─────────► idle (nothing,
//    │ │  a command acted  │  │  │                 │  │                                                unreachable)
//    │ │  at a pause ◄─────┘  │  │                 │  └──sent to the server──► server-pending ──reply audio──► replying
//    │ │  (idle at its end)   │  │                 │                               │                          │
//    │ │                      │  └──────── speech-start: barge-in (one transition) ◄┴──────────────────────────┤
//    │ └─ reply.done, nothing (more) to play: idle (reply, interrupted) ◄──────────┘                          │
//    └─── its last sample played, or the link dropped ◄──────────────────────────────────────────────────────┘
//
// Barge-in is the one transition from server-pending or replying back to hearing: the reply stops playing, the
// server is told how much was heard, and audio of that turn still in flight is never played. `voxline:turn`
// reports every phase change; a turn that produced nothing ends in `idle` too, so a host never has to guess with a
// timer.

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
 * @typedef {{type: 'speech-start', t: number} | {type: 'speech-end', t: number}
 *   | {type: 'command', t: number} | {type: 'nothing', t: number} | {type: 'unreachable', t: number}
 *   | {type: 'sending', t: number} | {type: 'sent', t: number, turnId: number}
 *   | {type: 'reply-text', turnId: number, text: string} | {type: 'reply-audio', turnId: number}
 *   | {type: 'reply-done', turnId: number, text: string, interrupted: boolean}
 *   | {type: 'playback-ended', turnId: number} | {type: 'link-down'}} TurnInput
 *   command: a local or cached command acted (at a pause, or once the turn was over); nothing: the turn's final
 *   transcript gave nothing to act on or send; sending: a server turn is about to go out (the previous one must be
 *   finished first); playback-ended: the reply's last sample played, or its playback was stopped.
 */
/**
 * @typedef {{type: 'phase', phase: string, outcome?: string, turnId?: number, interrupted?: number}
 *   | {type: 'barge-in', turnId: number|null}
 *   | {type: 'play', turnId: number, begin: boolean}
 *   | {type: 'end-playback', turnId: number}
 *   | {type: 'reply', turnId: number, text: string, final: boolean, interrupted?: boolean,
 *      audioPending?: boolean}} TurnEffect
 *   barge-in: stop playback now and tell the server how much of `turnId` (null: only what is playing) was heard;
 *   play: queue this reply audio (`begin`: its first chunk); end-playback: the reply has no more audio coming.
 */

export class TurnMachine {
  constructor() {
    this.phase = Phase.IDLE;
    /** @type {number|null} the server turn sent and not yet finished (`reply.done`): at most one */
    this.serverTurn = null;
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
        return this.acted ? this.#to(Phase.IDLE, Outcome.LOCAL) : this.#to(Phase.DECIDING);
      case 'command':
        if (this.phase === Phase.HEARING) {
          this.acted = true;
          return [];
        }
        return this.phase === Phase.DECIDING ? this.#to(Phase.IDLE, Outcome.LOCAL) : [];
      case 'nothing': return this.phase === Phase.DECIDING ? this.#to(Phase.IDLE, Outcome.NOTHING) : [];
      case 'unreachable': return this.phase === Phase.DECIDING ? this.#to(Phase.IDLE, Outcome.UNREACHABLE) : [];
      case 'sending': return this.serverTurn === null ? [] : this.#bargeIn();
      case 'sent': return this.#sent(input.turnId);
      case 'reply-text': return this.#replyText(input.turnId, input.text);
      case 'reply-audio': return this.#replyAudio(input.turnId);
      case 'reply-done': return this.#replyDone(input.turnId, input.text, input.interrupted);
      case 'playback-ended': return this.#playbackEnded(input.turnId);
      case 'link-down': return this.#linkDown();
      default: throw new Error(`unknown turn input ${input.type}`);
    }
  }

  /** Whether speaking now would interrupt the assistant. */
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

  /** The user speaks: a new utterance, and over an answer a barge-in. */
  #speechStart() {
    if (!this.answering) return this.#to(Phase.HEARING);
    const interrupted = this.serverTurn ?? [...this.playing].at(-1);
    return [...this.#bargeIn(), ...this.#to(Phase.HEARING, undefined, { interrupted }, true)];
  }

  /** Stop what plays, and finish the unfinished server turn: nothing more of it may be heard. */
  #bargeIn() {
    const turnId = this.serverTurn;
    if (turnId !== null) this.silenced.add(turnId); // until its reply.done: no audio of it may start any more
    this.serverTurn = null;
    this.playing.clear();
    return [{ type: 'barge-in', turnId }];
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
    const effects = audio ? [{ type: 'end-playback', turnId }] : [];
    const audioPending = audio && this.playing.has(turnId);
    effects.push({ type: 'reply', turnId, text, final: true, interrupted, audioPending });
    if (turnId !== this.serverTurn) return effects; // barged in on: the new utterance owns the phase
    this.serverTurn = null;
    this.ending = interrupted ? Outcome.INTERRUPTED : Outcome.REPLY;
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
   * still plays out; each turn gets its final reply (interrupted), and none is barged in on later.
   */
  #linkDown() {
    const turnIds = new Set(this.replies.keys());
    if (this.serverTurn !== null) turnIds.add(this.serverTurn);
    const effects = [];
    for (const turnId of turnIds) {
      const reply = this.replies.get(turnId);
      const audio = Boolean(reply?.audio) && !this.silenced.has(turnId);
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
