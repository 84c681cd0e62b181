// The page's connection to the Voxline backend: protocol v1 over one WebSocket (docs/protocol.md).
//
// It sends a turn (the browser's transcript and confidence, plus the turn's Opus packets when the server should
// re-recognise), and turns what comes back into calls on the page: server transcript, intent, reply text deltas,
// reply audio (PCM16 at the rate `welcome` announces), timings and errors. The connection is re-opened with
// exponential backoff when it drops (jittered and capped: `reconnectDelayMs`); while it is down, `connected` is
// false and local intents keep working. A turn of a connection that dropped is over: nothing is ever sent for it on
// the next connection.
//
// A server with site keys wants a token in `hello`: `token` is a string, or a function that fetches a fresh one
// before every connection (`tokenFromUrl`). Close codes that reconnecting cannot fix (a refused token or origin, a
// protocol or language the server lacks) end the link for good with one `voxline:error`. A session the server closed
// for being idle (4408) is not reopened until the page has a turn to send (`wake`).
//
// The page obeys the server's `welcome` (`terms`): it sends a turn's audio whenever the server will re-recognise it
// (below the server's `asr_confidence_gate` as well as below the page's own floor), plays the reply at the announced
// sample rate, and keeps a turn's audio within the announced frame and turn limits. Message types, frame layouts,
// close codes and error codes come from protocol.js, generated from the server's protocol.py.
//
// Link states (`onState`, the page's `voxline:link`), each reported once when it changes:
//
//   connecting ── welcome ──► open ── drop / server restart / no token ──► offline ── backoff ──► connecting
//        │                     ├── idle close (4408) ──► closed {reason: 'idle'} ── wake (a turn to send) ──► connecting
//        └── refused (4000, 4001, 4002, 4401, 4403) ──► closed {reason: 'refused'}  (for good)
//   close() from any state ──► closed {reason: 'stopped'}

import {
  CLIENT_MESSAGES as SEND, CLOSE, CLOSING_ERRORS, ERRORS, FLAG_CLAUSE_END, FRAME_KIND, MAX_FRAME_BYTES,
  MAX_OPUS_TURN_BYTES, MAX_TEXT_CHARS, MAX_TURN_AUDIO_SECONDS, PCM16_UPLINK_RATE_HZ, PROTOCOL_VERSION,
  REPLY_AUDIO_RATE_HZ, REPLY_HEADER, SERVER_MESSAGES as RECEIVE, UPLINK_HEADER,
} from './protocol.js';

export { PROTOCOL_VERSION };
/** The defaults of settings.js (reconnectFirstMs, reconnectMaxMs, reconnectJitter). */
export const RECONNECT_DEFAULTS = Object.freeze({ firstMs: 500, maxMs: 10000, jitter: 0.5 });
/** How long `wake` waits for a dormant link to be welcomed again. */
const WAKE_TIMEOUT_MS = 3000;

/**
 * Why the server may refuse this page for good, reconnecting cannot help (docs/protocol.md): the error code and the
 * message the page shows.
 * @type {[string, (host: string) => string][]}
 */
const REFUSALS = [
  [ERRORS.unsupportedVersion, (host) => `The Voxline server at ${host} speaks another protocol version: update this page. Local commands still work.`],
  [ERRORS.unauthorized, (host) => `The Voxline server at ${host} refused this page's token. Local commands still work.`],
  [ERRORS.unsupportedLanguage, (host) => `The Voxline server at ${host} has no grammar for this language. Local commands still work.`],
  [ERRORS.unauthenticated, (host) => `The Voxline server at ${host} needs a valid token for this site (check the token URL and the site key); not reconnecting. Local commands still work.`],
  [ERRORS.originNotAllowed, (host) => `The Voxline server at ${host} does not serve pages from ${globalThis.location?.origin ?? 'this origin'}; not reconnecting. Local commands still work.`],
];

/**
 * Close codes after which reconnecting cannot help: the `voxline:error` code and message, by the close code the
 * server uses for each refusal (protocol.js `CLOSING_ERRORS`).
 * @type {Map<number, [string, (host: string) => string]>}
 */
export const FATAL_CLOSES = new Map(REFUSALS.map(([code, message]) => [CLOSING_ERRORS[code], [code, message]]));

/**
 * @typedef {{
 *   asrConfidenceGate: number, replySampleRate: number, maxTextChars: number, maxTurnAudioSeconds: number,
 *   maxOpusTurnBytes: number, maxFrameBytes: number,
 * }} ServerTerms
 */

/** A positive number the server announced, else the protocol's own value. */
function announced(value, otherwise) {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : otherwise;
}

/**
 * What the page obeys of a server's `welcome` (docs/protocol.md): its re-recognition gate, the reply audio's sample
 * rate and the limits on a turn. An older server's `welcome` that leaves a field out gets protocol v1's value; with
 * no `welcome` at all (no server yet) the gate is 0, so the page's own floor decides alone.
 * @param {object|null} welcome
 * @returns {ServerTerms}
 */
export function serverTerms(welcome) {
  const limits = welcome?.limits ?? {};
  const gate = limits.asr_confidence_gate;
  return Object.freeze({
    asrConfidenceGate: typeof gate === 'number' && gate >= 0 && gate <= 1 ? gate : 0,
    replySampleRate: announced(welcome?.reply_audio?.sample_rate, REPLY_AUDIO_RATE_HZ),
    maxTextChars: announced(limits.max_text_chars, MAX_TEXT_CHARS),
    maxTurnAudioSeconds: announced(limits.max_turn_audio_s, MAX_TURN_AUDIO_SECONDS),
    maxOpusTurnBytes: announced(limits.max_opus_turn_bytes, MAX_OPUS_TURN_BYTES),
    maxFrameBytes: announced(limits.max_frame_bytes, MAX_FRAME_BYTES),
  });
}

/**
 * The packets of a turn's audio that the server takes (`terms`): none larger than a frame may be, no more seconds
 * (`seconds`: the turn's length; packets are of equal length) and no more bytes than a turn may have. The server
 * would drop the rest with `limit_exceeded`; not sending it saves the uplink.
 * @param {ArrayBuffer[]} packets
 * @param {number|null} seconds
 * @param {ServerTerms} terms
 */
export function packetsWithinLimits(packets, seconds, terms) {
  const fit = seconds && seconds > terms.maxTurnAudioSeconds
    ? Math.floor(packets.length * terms.maxTurnAudioSeconds / seconds) : packets.length;
  const kept = [];
  let bytes = 0;
  for (const packet of packets.slice(0, fit)) {
    if (UPLINK_HEADER.bytes + packet.byteLength > terms.maxFrameBytes) break;
    if (bytes + packet.byteLength > terms.maxOpusTurnBytes) break;
    bytes += packet.byteLength;
    kept.push(packet);
  }
  return kept;
}

/**
 * A `token` source that POSTs to `url` (the Voxline server's `/token?key=…`, or the host site's own endpoint) and
 * reads `{token}` from its JSON answer. A same-origin request carries the page's cookies, so a host site's backend
 * can decide who gets one.
 * @param {string|URL} url
 * @returns {() => Promise<string>}
 */
export function tokenFromUrl(url) {
  const href = new URL(url, globalThis.location?.href).href;
  return async () => {
    const response = await fetch(href, { method: 'POST', cache: 'no-store' });
    if (!response.ok) throw new Error(`${href} answered HTTP ${response.status}`);
    const body = await response.json();
    if (typeof body.token !== 'string') throw new Error(`${href} answered without a token`);
    return body.token;
  };
}

/**
 * How long to wait before reconnect attempt `attempt` (0 for the first after a drop): the wait doubles with each
 * attempt up to `maxMs`, and its `jitter` fraction is random, so the delay lies in [(1 − jitter)·d, d].
 * @param {number} attempt
 * @param {{firstMs: number, maxMs: number, jitter: number}} backoff
 * @param {() => number} random uniform in [0, 1)
 */
export function reconnectDelayMs(attempt, { firstMs, maxMs, jitter } = RECONNECT_DEFAULTS, random = Math.random) {
  const ceiling = Math.min(maxMs, firstMs * 2 ** Math.min(attempt, 30));
  return ceiling * (1 - Math.min(Math.max(jitter, 0), 1) * random());
}

function base64(bytes) {
  let binary = '';
  for (const b of new Uint8Array(bytes)) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** @param {ArrayBuffer} packet @param {number} turnId */
function opusFrame(packet, turnId) {
  const frame = new Uint8Array(UPLINK_HEADER.bytes + packet.byteLength);
  const view = new DataView(frame.buffer);
  view.setUint8(UPLINK_HEADER.kind, FRAME_KIND.opus);
  view.setUint32(UPLINK_HEADER.turn_id, turnId, true);
  frame.set(new Uint8Array(packet), UPLINK_HEADER.bytes);
  return frame.buffer;
}

/**
 * @typedef {{
 *   onTranscript: (turnId: number, text: string, confidence?: number) => void,
 *   onIntent: (turnId: number, intent: object) => void,
 *   onReplyDelta: (turnId: number, text: string) => void,
 *   onReplyDone: (turnId: number, text: string, interrupted: boolean) => void,
 *   onReplyAudio: (turnId: number, samples: Float32Array, clauseEnd: boolean) => void,
 *   onTimings: (turnId: number, timings: object) => void,
 *   onTurnSent?: (turnId: number, transcript: string) => void,
 *   onError: (code: string, message: string, turnId?: number) => void,
 *   onStatus: (connected: boolean) => void,
 *   onWelcome?: (terms: ServerTerms, welcome: object) => void,
 *   onState?: (state: LinkState, detail: {reason?: string, retry_ms?: number}) => void,
 * }} LinkHandlers
 * @typedef {'connecting'|'open'|'offline'|'closed'} LinkState
 */

export class BackendLink {
  /**
   * @param {string|URL} url the server's WebSocket URL (ws: or wss:)
   * @param {LinkHandlers} handlers
   * @param {{lang?: string, token?: string|null|(() => string|Promise<string>), opus?: boolean,
   *          reconnect?: {firstMs: number, maxMs: number, jitter: number}}} options
   *   token: sent in `hello`; a function is called for a fresh one before every connection (`tokenFromUrl`)
   */
  constructor(url, handlers, { lang = 'en', token = null, opus = true, reconnect = RECONNECT_DEFAULTS } = {}) {
    this.url = String(url);
    this.handlers = handlers;
    this.token = token;
    this.hello = { type: SEND.hello, v: PROTOCOL_VERSION, lang, token: null,
      capabilities: { opus, pcm16: true, sample_rate: PCM16_UPLINK_RATE_HZ } };
    this.socket = null;
    this.connected = false;
    /** The current session's `welcome`. */
    this.session = null;
    /** What the page obeys of it (the protocol's values until a server has welcomed this page). */
    this.terms = serverTerms(null);
    this.reconnect = reconnect;
    /** Reconnect attempts since the last `welcome`. */
    this.attempts = 0;
    this.closed = false;
    this.nextTurnId = 1;
    /** The first turn id of the current connection: older turns belong to a session that is gone. */
    this.sessionFirstTurnId = 1;
    /** Closed by the server for idling (4408): reopened by `wake`, when there is a turn to send. */
    this.dormant = false;
    /** The code of the last `error` the server sent, so that a closing error is not reported twice. */
    this.lastErrorCode = null;
    /** @type {(() => void)[]} waiting in `wake` for the next `welcome` */
    this.welcomeWaiters = [];
    /** @type {LinkState|null} the last state reported */
    this.state = null;
  }

  /** Report a state change (a repeat of the current state and reason is not one). */
  #setState(state, detail = {}) {
    const key = `${state}:${detail.reason ?? ''}`;
    if (key === this.stateKey) return;
    this.state = state;
    this.stateKey = key;
    this.handlers.onState?.(state, detail);
  }

  async connect() {
    if (this.closed || this.socket) return;
    this.dormant = false;
    const host = new URL(this.url).host;
    try {
      this.hello.token = typeof this.token === 'function' ? await this.token() : this.token;
    } catch (error) {
      const delay = reconnectDelayMs(this.attempts++, this.reconnect);
      this.#setState('offline', { reason: ERRORS.tokenUnavailable, retry_ms: delay });
      this.handlers.onError(ERRORS.tokenUnavailable, `No token for the Voxline server at ${host} (${error.message}); retrying in ${(delay / 1000).toFixed(1)} s. Local commands still work.`);
      if (!this.closed) setTimeout(() => this.connect(), delay);
      return;
    }
    if (this.closed || this.socket) return;
    this.#setState('connecting');
    const socket = new WebSocket(this.url);
    socket.binaryType = 'arraybuffer';
    this.socket = socket;
    this.lastErrorCode = null;
    socket.onopen = () => socket.send(JSON.stringify(this.hello));
    socket.onmessage = (event) => this.#receive(event.data);
    socket.onclose = (event) => {
      const was = this.connected;
      this.connected = false;
      this.socket = null;
      if (was) this.handlers.onStatus(false);
      const fatal = FATAL_CLOSES.get(event.code);
      if (fatal) {
        this.closed = true;
        this.#setState('closed', { reason: 'refused' });
        if (this.lastErrorCode !== fatal[0]) this.handlers.onError(fatal[0], fatal[1](host));
        return;
      }
      if (this.closed) return this.#setState('closed', { reason: 'stopped' });
      if (event.code === CLOSE.IDLE_TIMEOUT) {
        this.dormant = true; // no error: it reconnects when the page has a turn to send (wake)
        return this.#setState('closed', { reason: 'idle' });
      }
      const delay = reconnectDelayMs(this.attempts++, this.reconnect);
      this.#setState('offline', { retry_ms: delay });
      if (!was || event.code !== CLOSE.NORMAL) {
        this.handlers.onError(ERRORS.backendUnreachable,
          `The Voxline server at ${host} is unreachable (${event.code}); reconnecting in ${(delay / 1000).toFixed(1)} s. Local commands still work.`);
      }
      setTimeout(() => this.connect(), delay);
    };
  }

  /**
   * Reopen a link the server closed for idling; resolves with whether it is connected, at the next `welcome` or
   * after `WAKE_TIMEOUT_MS`.
   * @returns {Promise<boolean>}
   */
  wake() {
    if (this.connected) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.connected), WAKE_TIMEOUT_MS);
      this.welcomeWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
      if (this.dormant) this.connect();
    });
  }

  close() {
    this.closed = true;
    if (!this.socket) this.#setState('closed', { reason: 'stopped' }); // else when the socket has closed
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify({ type: SEND.bye }));
    this.socket?.close(CLOSE.NORMAL);
  }

  /**
   * Whether the server re-recognises a turn of this confidence, so its audio should go with it: below the page's
   * own `floor` (`localIntentMinConfidence`) or below the gate the server announced in `welcome`, whichever is higher.
   * @param {number} confidence
   * @param {number} floor
   */
  wantsAudio(confidence, floor) {
    return confidence < Math.max(floor, this.terms.asrConfidenceGate);
  }

  /**
   * Send one turn; returns its id, or null when the server is not connected. Its audio is cut to what the server
   * takes (`packetsWithinLimits`).
   * @param {{transcript: string, confidence: number, audio?: {packets: ArrayBuffer[], decoderConfig: any,
   *          seconds?: number}|null, wantServerAsr?: boolean}} turn
   *   audio.seconds: how long the turn's audio is, when known
   */
  sendTurn({ transcript, confidence, audio = null, wantServerAsr = false }) {
    if (!this.connected) return null;
    const turnId = this.nextTurnId++;
    const packets = audio ? packetsWithinLimits(audio.packets, audio.seconds ?? null, this.terms) : [];
    const withAudio = packets.length > 0;
    const start = { type: SEND.turnStart, turn_id: turnId, transcript: transcript.slice(0, this.terms.maxTextChars),
      confidence, audio: withAudio ? 'opus' : null, want_server_asr: wantServerAsr };
    if (withAudio) {
      const config = audio.decoderConfig ?? {};
      start.opus = { sample_rate: config.sampleRate ?? PCM16_UPLINK_RATE_HZ, channels: config.numberOfChannels ?? 1,
        description: config.description ? base64(config.description) : null };
    }
    this.socket.send(JSON.stringify(start));
    if (withAudio) {
      for (const packet of packets) this.socket.send(opusFrame(packet, turnId));
      this.socket.send(JSON.stringify({ type: SEND.turnAudioEnd, turn_id: turnId }));
    }
    this.handlers.onTurnSent?.(turnId, transcript);
    return turnId;
  }

  /**
   * Send a speculative turn (a confident transcript heard at a pause): the server starts on it and holds its
   * answer until `confirmTurn`, or drops it on `cancelTurn`. Returns its id, or null when not connected.
   */
  sendSpeculativeTurn({ transcript, confidence }) {
    if (!this.connected) return null;
    const turnId = this.nextTurnId++;
    this.socket.send(JSON.stringify({ type: SEND.turnStart, turn_id: turnId, transcript, confidence,
      speculative: true }));
    return turnId;
  }

  /**
   * The speculative turn `turnId` is the user's turn: its answer comes now. False when it cannot be confirmed (the
   * connection it was sent on has dropped: send the turn anew).
   */
  confirmTurn(turnId, transcript) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return false;
    this.socket.send(JSON.stringify({ type: SEND.turnConfirm, turn_id: turnId }));
    this.handlers.onTurnSent?.(turnId, transcript);
    return true;
  }

  /** The speculative turn `turnId` is not the user's turn: nothing of it is ever sent back. */
  cancelTurn(turnId) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return; // dropped with its connection
    this.socket.send(JSON.stringify({ type: SEND.turnCancel, turn_id: turnId }));
  }

  /** The user spoke over the reply of `turnId` after hearing `playedMs` of it. */
  bargeIn(turnId, playedMs) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return; // a turn of a dropped connection is over
    this.socket.send(JSON.stringify({ type: SEND.bargeIn, turn_id: turnId, played_ms: playedMs }));
  }

  #receive(data) {
    if (data instanceof ArrayBuffer) return this.#audio(data);
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return this.handlers.onError(ERRORS.badMessage, 'The server sent a frame that is not JSON.');
    }
    const h = this.handlers;
    switch (msg.type) {
      case RECEIVE.welcome:
        this.session = msg;
        this.terms = serverTerms(msg);
        this.connected = true;
        this.attempts = 0;
        this.sessionFirstTurnId = this.nextTurnId;
        this.#setState('open');
        h.onWelcome?.(this.terms, msg);
        h.onStatus(true);
        for (const waiter of this.welcomeWaiters.splice(0)) waiter();
        return undefined;
      case RECEIVE.transcript: return h.onTranscript(msg.turn_id, msg.text, msg.confidence);
      case RECEIVE.intent: return h.onIntent(msg.turn_id, msg);
      case RECEIVE.replyDelta: return h.onReplyDelta(msg.turn_id, msg.text);
      case RECEIVE.replyDone: return h.onReplyDone(msg.turn_id, msg.text, msg.interrupted);
      case RECEIVE.timings: return h.onTimings(msg.turn_id, msg);
      case RECEIVE.error:
        this.lastErrorCode = msg.code;
        if (msg.code === ERRORS.idleTimeout) return undefined; // the warning before 4408: the link goes dormant quietly
        return h.onError(msg.code, msg.message, msg.turn_id);
      default: return undefined; // a newer server's message: ignore
    }
  }

  #audio(buffer) {
    if (buffer.byteLength < REPLY_HEADER.bytes) return;
    const view = new DataView(buffer);
    if (view.getUint8(REPLY_HEADER.kind) !== FRAME_KIND.replyAudio) return;
    const clauseEnd = (view.getUint8(REPLY_HEADER.flags) & FLAG_CLAUSE_END) === FLAG_CLAUSE_END;
    const turnId = view.getUint32(REPLY_HEADER.turn_id, true);
    const pcm = new Int16Array(buffer, REPLY_HEADER.bytes, (buffer.byteLength - REPLY_HEADER.bytes) >> 1);
    const samples = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
    this.handlers.onReplyAudio(turnId, samples, clauseEnd);
  }
}
