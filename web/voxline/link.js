// The page's connection to the Voxline backend: protocol v1 over one WebSocket (docs/protocol.md).
//
// It sends a turn (the browser's transcript and confidence, plus the turn's Opus packets when the server should
// re-recognise), and turns what comes back into calls on the page: server transcript, intent, reply text deltas,
// reply audio (PCM16 at 24 kHz), timings and errors. The connection is re-opened with exponential backoff when it
// drops; while it is down, `connected` is false and local intents keep working.

export const PROTOCOL_VERSION = 1;
const FRAME_OPUS = 0x01;
const FRAME_REPLY_AUDIO = 0x81;
const UPLINK_HEADER_BYTES = 8; // kind u8, flags u8, reserved u16, turn_id u32 (little-endian)
const REPLY_HEADER_BYTES = 12; // kind u8, flags u8, clause u16, turn_id u32, seq u32
const RECONNECT_FIRST_MS = 500;
const RECONNECT_MAX_MS = 10000;

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
 *   onTranscript: (turnId: number, text: string) => void,
 *   onIntent: (turnId: number, intent: object) => void,
 *   onReplyDelta: (turnId: number, text: string) => void,
 *   onReplyDone: (turnId: number, text: string, interrupted: boolean) => void,
 *   onReplyAudio: (turnId: number, samples: Float32Array, clauseEnd: boolean) => void,
 *   onTimings: (turnId: number, timings: object) => void,
 *   onError: (code: string, message: string, turnId?: number) => void,
 *   onStatus: (connected: boolean) => void,
 * }} LinkHandlers
 */

export class BackendLink {
  /**
   * @param {string|URL} url the server's WebSocket URL (ws: or wss:)
   * @param {LinkHandlers} handlers
   * @param {{lang?: string, token?: string|null, opus?: boolean}} options
   */
  constructor(url, handlers, { lang = 'en', token = null, opus = true } = {}) {
    this.url = String(url);
    this.handlers = handlers;
    this.hello = { type: 'hello', v: PROTOCOL_VERSION, lang, token, capabilities: { opus, pcm16: true, sample_rate: 16000 } };
    this.socket = null;
    this.connected = false;
    this.session = null;
    this.backoffMs = RECONNECT_FIRST_MS;
    this.closed = false;
    this.nextTurnId = 1;
  }

  connect() {
    if (this.closed) return;
    const socket = new WebSocket(this.url);
    socket.binaryType = 'arraybuffer';
    this.socket = socket;
    socket.onopen = () => socket.send(JSON.stringify(this.hello));
    socket.onmessage = (event) => this.#receive(event.data);
    socket.onclose = (event) => {
      const was = this.connected;
      this.connected = false;
      this.socket = null;
      if (was) this.handlers.onStatus(false);
      if (!was || event.code !== 1000) {
        this.handlers.onError('backend_unreachable',
          `The Voxline server at ${new URL(this.url).host} is unreachable (${event.code}); reconnecting. Local commands still work.`);
      }
      if (!this.closed) setTimeout(() => this.connect(), this.backoffMs);
      this.backoffMs = Math.min(RECONNECT_MAX_MS, this.backoffMs * 2);
    };
  }

  close() {
    this.closed = true;
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
    return turnId;
  }

  /** The user spoke over the reply of `turnId` after hearing `playedMs` of it. */
  bargeIn(turnId, playedMs) {
    if (this.connected) this.socket.send(JSON.stringify({ type: 'barge_in', turn_id: turnId, played_ms: playedMs }));
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
        this.backoffMs = RECONNECT_FIRST_MS;
        return h.onStatus(true);
      case 'transcript': return h.onTranscript(msg.turn_id, msg.text);
      case 'intent': return h.onIntent(msg.turn_id, msg);
      case 'reply.delta': return h.onReplyDelta(msg.turn_id, msg.text);
      case 'reply.done': return h.onReplyDone(msg.turn_id, msg.text, msg.interrupted);
      case 'timings': return h.onTimings(msg.turn_id, msg);
      case 'error': return h.onError(msg.code, msg.message, msg.turn_id);
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
