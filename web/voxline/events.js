// Voxline's browser events (names and fields are a public interface: ../../shared/DESIGN.md).
// Each is dispatched on the target (document by default), bubbling and composed, with `t` = performance.now()
// and `audio_t` = seconds of microphone audio captured since listening started, at the moment it fires.

// The names are defined once, in the protocol's source (backend/voxline/server/protocol.py, BROWSER_EVENTS), and
// generated into protocol.js.
export { EVENTS } from './protocol.js';

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
