// Voxline's browser events (names and fields are a public interface: ../../shared/DESIGN.md).
// Each is dispatched on the target (document by default), bubbling and composed, with `t` = performance.now()
// and `audio_t` = seconds of microphone audio captured since listening started, at the moment it fires.

export const EVENTS = Object.freeze({
  ready: 'voxline:ready',
  speechStart: 'voxline:speech-start',
  speechEnd: 'voxline:speech-end',
  transcript: 'voxline:transcript',
  intent: 'voxline:intent',
  reply: 'voxline:reply',
  replyAudio: 'voxline:reply-audio',
  timings: 'voxline:timings',
  link: 'voxline:link',
  /** Where the exchange stands (turn.js): `state` hearing, deciding, server-pending, replying or idle (with
   * `outcome`: local, reply, interrupted, nothing, unreachable); `interrupted` names a reply spoken over. */
  turn: 'voxline:turn',
  error: 'voxline:error',
});

export class Emitter {
  /**
   * @param {EventTarget} target
   * @param {() => number} audioTime the capture clock in seconds
   */
  constructor(target, audioTime) {
    this.target = target;
    this.audioTime = audioTime;
    /** @type {((name: string, detail: object) => void)[]} see every event after it is dispatched */
    this.observers = [];
  }

  /** @param {(name: string, detail: object) => void} observer called after each event, with its full detail */
  observe(observer) {
    this.observers.push(observer);
  }

  /** @param {string} name one of EVENTS @param {object} detail */
  emit(name, detail = {}) {
    const full = { ...detail, t: performance.now(), audio_t: this.audioTime() };
    this.target.dispatchEvent(new CustomEvent(name, { detail: full, bubbles: true, composed: true }));
    for (const observer of this.observers) observer(name, full);
    return full;
  }
}
