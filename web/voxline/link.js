// The page's connection to the Voxline backend: protocol v1 over one WebSocket (docs/protocol.md).
//
// It sends a turn (the browser's transcript and confidence, plus the turn's Opus packets when the server should
// re-recognise), and turns what comes back into calls on the page: server transcript, intent, reply text deltas,
// reply audio (PCM16 at 24 kHz), timings and errors. The connection is re-opened with exponential backoff when it
// drops (jittered and capped: `reconnectDelayMs`); while it is down, `connected` is false and local intents keep
// working. A turn of a connection that dropped is over: nothing is ever sent for it on the next connection.
//
// A server with site keys wants a token in `hello`: `token` is a string, or a function that fetches a fresh one
// before every connection (`tokenFromUrl`). Close codes that reconnecting cannot fix (a refused token or origin, a
// protocol or language the server lacks) end the link for good with one `voxline:error`. A session the server closed
// for being idle (4408) is not reopened until the page has a turn to send (`wake`).
//
// Link states (`onState`, the page's `voxline:link`), each reported once when it changes:
//
//   connecting ── welcome ──► open ── drop / server restart / no token ──► offline ── backoff ──► connecting
//        │                     ├── idle close (4408) ──► closed {reason: 'idle'} ── wake (a turn to send) ──► connecting
//        └── refused (4401, 4403, 4000, 4415) ──► closed {reason: 'refused'}  (for good)
//   close() from any state ──► closed {reason: 'stopped'}

export const PROTOCOL_VERSION = 1;
const FRAME_OPUS = 0x01;
const FRAME_REPLY_AUDIO = 0x81;
const UPLINK_HEADER_BYTES = 8; // kind u8, flags u8, reserved u16, turn_id u32 (little-endian)
const REPLY_HEADER_BYTES = 12; // kind u8, flags u8, clause u16, turn_id u32, seq u32
/** The defaults of settings.js (reconnectFirstMs, reconnectMaxMs, reconnectJitter). */
export const RECONNECT_DEFAULTS = Object.freeze({ firstMs: 500, maxMs: 10000, jitter: 0.5 });
/** How long `wake` waits for a dormant link to be welcomed again. */
const WAKE_TIMEOUT_MS = 3000;
const CLOSE_NORMAL = 1000;
const CLOSE_IDLE_TIMEOUT = 4408;

/**
 * Close codes after which reconnecting cannot help (docs/protocol.md): the `voxline:error` code and message.
 * @type {Map<number, [string, (host: string) => string]>}
 */
export const FATAL_CLOSES = new Map([
  [4000, ['unsupported_version', (host) => `The Voxline server at ${host} speaks another protocol version: update this page. Local commands still work.`]],
  [4001, ['unauthorized', (host) => `The Voxline server at ${host} refused this page's token. Local commands still work.`]],
  [4002, ['unsupported_language', (host) => `The Voxline server at ${host} has no grammar for this language. Local commands still work.`]],
  [4401, ['unauthenticated', (host) => `The Voxline server at ${host} needs a valid token for this site (check the token URL and the site key); not reconnecting. Local commands still work.`]],
  [4403, ['origin_not_allowed', (host) => `The Voxline server at ${host} does not serve pages from ${globalThis.location?.origin ?? 'this origin'}; not reconnecting. Local commands still work.`]],
]);

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
  const frame = new Uint8Array(UPLINK_HEADER_BYTES + packet.byteLength);
  const view = new DataView(frame.buffer);
  view.setUint8(0, FRAME_OPUS);
  view.setUint32(4, turnId, true);
  frame.set(new Uint8Array(packet), UPLINK_HEADER_BYTES);
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
    this.hello = { type: 'hello', v: PROTOCOL_VERSION, lang, token: null, capabilities: { opus, pcm16: true, sample_rate: 16000 } };
    this.socket = null;
    this.connected = false;
    this.session = null;
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
      this.#setState('offline', { reason: 'token_unavailable', retry_ms: delay });
      this.handlers.onError('token_unavailable', `No token for the Voxline server at ${host} (${error.message}); retrying in ${(delay / 1000).toFixed(1)} s. Local commands still work.`);
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
      if (event.code === CLOSE_IDLE_TIMEOUT) {
        this.dormant = true; // no error: it reconnects when the page has a turn to send (wake)
        return this.#setState('closed', { reason: 'idle' });
      }
      const delay = reconnectDelayMs(this.attempts++, this.reconnect);
      this.#setState('offline', { retry_ms: delay });
      if (!was || event.code !== CLOSE_NORMAL) {
        this.handlers.onError('backend_unreachable',
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
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify({ type: 'bye' }));
    this.socket?.close(1000);
  }

  /**
   * Send one turn; returns its id, or null when the server is not connected.
   * @param {{transcript: string, confidence: number, audio?: {packets: ArrayBuffer[], decoderConfig: any}|null, wantServerAsr?: boolean}} turn
   */
  sendTurn({ transcript, confidence, audio = null, wantServerAsr = false }) {
    if (!this.connected) return null;
    const turnId = this.nextTurnId++;
    const withAudio = audio && audio.packets.length > 0;
    const start = { type: 'turn.start', turn_id: turnId, transcript, confidence, audio: withAudio ? 'opus' : null,
      want_server_asr: wantServerAsr };
    if (withAudio) {
      const config = audio.decoderConfig ?? {};
      start.opus = { sample_rate: config.sampleRate ?? 16000, channels: config.numberOfChannels ?? 1,
        description: config.description ? base64(config.description) : null };
    }
    this.socket.send(JSON.stringify(start));
    if (withAudio) {
      for (const packet of audio.packets) this.socket.send(opusFrame(packet, turnId));
      this.socket.send(JSON.stringify({ type: 'turn.audio_end', turn_id: turnId }));
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
    this.socket.send(JSON.stringify({ type: 'turn.start', turn_id: turnId, transcript, confidence,
      speculative: true }));
    return turnId;
  }

  /**
   * The speculative turn `turnId` is the user's turn: its answer comes now. False when it cannot be confirmed (the
   * connection it was sent on has dropped: send the turn anew).
   */
  confirmTurn(turnId, transcript) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return false;
    this.socket.send(JSON.stringify({ type: 'turn.confirm', turn_id: turnId }));
    this.handlers.onTurnSent?.(turnId, transcript);
    return true;
  }

  /** The speculative turn `turnId` is not the user's turn: nothing of it is ever sent back. */
  cancelTurn(turnId) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return; // dropped with its connection
    this.socket.send(JSON.stringify({ type: 'turn.cancel', turn_id: turnId }));
  }

  /** The user spoke over the reply of `turnId` after hearing `playedMs` of it. */
  bargeIn(turnId, playedMs) {
    if (!this.connected || turnId < this.sessionFirstTurnId) return; // a turn of a dropped connection is over
    this.socket.send(JSON.stringify({ type: 'barge_in', turn_id: turnId, played_ms: playedMs }));
  }

  #receive(data) {
    if (data instanceof ArrayBuffer) return this.#audio(data);
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return this.handlers.onError('bad_message', 'The server sent a frame that is not JSON.');
    }
    const h = this.handlers;
    switch (msg.type) {
      case 'welcome':
        this.session = msg;
        this.connected = true;
        this.attempts = 0;
        this.sessionFirstTurnId = this.nextTurnId;
        this.#setState('open');
        h.onStatus(true);
        for (const waiter of this.welcomeWaiters.splice(0)) waiter();
        return undefined;
      case 'transcript': return h.onTranscript(msg.turn_id, msg.text, msg.confidence);
      case 'intent': return h.onIntent(msg.turn_id, msg);
      case 'reply.delta': return h.onReplyDelta(msg.turn_id, msg.text);
      case 'reply.done': return h.onReplyDone(msg.turn_id, msg.text, msg.interrupted);
      case 'timings': return h.onTimings(msg.turn_id, msg);
      case 'error':
        this.lastErrorCode = msg.code;
        if (msg.code === 'idle_timeout') return undefined; // the warning before 4408: the link goes dormant quietly
        return h.onError(msg.code, msg.message, msg.turn_id);
      default: return undefined; // a newer server's message: ignore
    }
  }

  #audio(buffer) {
    if (buffer.byteLength < REPLY_HEADER_BYTES) return;
    const view = new DataView(buffer);
    if (view.getUint8(0) !== FRAME_REPLY_AUDIO) return;
    const clauseEnd = (view.getUint8(1) & 1) === 1;
    const turnId = view.getUint32(4, true);
    const pcm = new Int16Array(buffer, REPLY_HEADER_BYTES, (buffer.byteLength - REPLY_HEADER_BYTES) >> 1);
    const samples = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
    this.handlers.onReplyAudio(turnId, samples, clauseEnd);
  }
}
