// What the widget's mic button shows, as a pure function of the `voxline:*` events and the user's actions, so the
// rules can be read (and tested) in one place. The exchange's phase comes from `voxline:turn` (Voxline's own turn
// state machine, voxline/turn.js), so the button never guesses with a timer:
//
//   loading ── ready ──► idle ── press ──► listening ── turn deciding / server-pending ──► thinking
//                          ▲                  ▲  ▲                                             │ turn replying
//                          └──── press ───────┘  └── turn idle (any outcome), or hearing ◄── speaking
//                                                    (speech over the reply: barge-in)
//
// `offline` is not a phase but a flag: the server cannot be reached (`voxline:link` offline, or refused), yet local
// commands still work, so the button keeps listening and only looks different. `error` is the one phase that needs
// the user (models could not load, the microphone was refused).

import { ERRORS, EVENTS } from '../voxline/protocol.js';

/** @typedef {'loading'|'idle'|'listening'|'thinking'|'speaking'|'error'} Phase */
/** @typedef {Phase|'offline'} ShownState what the button shows: a phase, or `offline` while idle or listening */
/**
 * @typedef {{phase: Phase, listening: boolean, offline: boolean, hearing: boolean}} WidgetStatus
 *   listening: the microphone is open; hearing: speech is going on right now
 */
/**
 * @typedef {{type: string, detail?: any}} WidgetInput a `voxline:*` event (its name and detail), or an action:
 *   `load` (a Voxline instance starts loading), `listen`, `stop` (the user), `failed` (loading or opening the
 *   microphone threw)
 */

export const INITIAL_STATUS = Object.freeze({ phase: 'loading', listening: false, offline: false, hearing: false });

/** Error codes after which nothing works until the user acts (reload, allow the microphone). */
const FATAL_ERROR = /^(mic_|model_|load_failed$)/;
/** Errors that mean the server could not be reached, or will not serve this page (local commands still work). */
const OFFLINE_ERRORS = new Set([ERRORS.backendUnreachable, ERRORS.tokenUnavailable, ERRORS.unauthenticated,
  ERRORS.originNotAllowed, ERRORS.unauthorized, ERRORS.unsupportedVersion, ERRORS.unsupportedLanguage]);

/** @param {WidgetStatus} status @returns {Phase} where a finished turn leaves the button */
function rest(status) {
  return status.listening ? 'listening' : 'idle';
}

/** @param {WidgetStatus} status @param {string} state `voxline:turn`'s @returns {Phase} */
function turnPhase(status, state) {
  switch (state) {
    case 'deciding': return status.listening ? 'thinking' : status.phase; // stopped mid-sentence: nothing to await
    case 'server-pending': return 'thinking';
    case 'replying': return 'speaking';
    default: return rest(status); // hearing (a new utterance, or speech over a reply), idle
  }
}

/**
 * @param {WidgetStatus} status
 * @param {WidgetInput} input
 * @returns {WidgetStatus} a new status (the old one is never changed)
 */
export function nextStatus(status, { type, detail = {} }) {
  const s = { ...status };
  if (s.phase === 'error' && !['load', 'listen', EVENTS.ready].includes(type)) return s;
  const fromServer = detail.source === 'server';
  switch (type) {
    case 'load':
      return { ...s, phase: 'loading' };
    case EVENTS.ready:
      return { ...s, phase: rest(s) };
    case 'listen':
      return { ...s, listening: true, phase: s.phase === 'loading' ? 'loading' : 'listening' };
    case 'stop':
      return { ...s, listening: false, hearing: false, phase: s.phase === 'loading' ? 'loading' : 'idle' };
    case EVENTS.speechStart:
      return { ...s, hearing: true };
    case EVENTS.speechEnd:
      return { ...s, hearing: false };
    case EVENTS.turn:
      return { ...s, phase: turnPhase(s, detail.state) };
    case EVENTS.transcript:
    case EVENTS.intent:
      return fromServer ? { ...s, offline: false } : s;
    case EVENTS.reply:
    case EVENTS.replyAudio:
      return { ...s, offline: false };
    case EVENTS.link:
      // Open: reachable again. Offline (reconnecting) or refused: local commands only. Connecting, an idle close
      // (reopened with the next turn) and the page's own stop say nothing new about the server.
      if (detail.state === 'open') return { ...s, offline: false };
      if (detail.state === 'offline' || detail.reason === 'refused') return { ...s, offline: true };
      return s;
    case EVENTS.error:
      if (OFFLINE_ERRORS.has(detail.code)) return { ...s, offline: true, phase: s.phase === 'loading' ? s.phase : rest(s) };
      if (FATAL_ERROR.test(detail.code ?? '')) return { ...s, phase: 'error', listening: false, hearing: false };
      return s; // a failed turn still ends with a reply (an apology); nothing to change here
    case 'failed':
      return { ...s, phase: 'error', listening: false, hearing: false };
    default:
      return s;
  }
}

/** @param {WidgetStatus} status @returns {ShownState} */
export function shownState(status) {
  if (status.offline && (status.phase === 'idle' || status.phase === 'listening')) return 'offline';
  return status.phase;
}
