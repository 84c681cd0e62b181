// GENERATED from backend/voxline/server/protocol.py: do not edit. After changing the protocol, run
//   python -m voxline.server.protocol_js > web/voxline/protocol.js
// (tests/test_protocol_source.py fails while this file and the Python disagree). Described in docs/protocol.md.

/** Bumped on any change an old peer would misread; `hello.v` must equal it. */
export const PROTOCOL_VERSION = 1;

/** The `type` of every message a client sends. */
export const CLIENT_MESSAGES = Object.freeze({
  hello: 'hello',
  turnStart: 'turn.start',
  turnConfirm: 'turn.confirm',
  turnCancel: 'turn.cancel',
  turnAudioEnd: 'turn.audio_end',
  bargeIn: 'barge_in',
  text: 'text',
  bye: 'bye',
});

/** The `type` of every message a server sends (ignore any other: a newer server's). */
export const SERVER_MESSAGES = Object.freeze({
  welcome: 'welcome',
  transcript: 'transcript',
  intent: 'intent',
  replyDelta: 'reply.delta',
  replyDone: 'reply.done',
  timings: 'timings',
  error: 'error',
});

/** Binary frame kinds (the header's first byte). */
export const FRAME_KIND = Object.freeze({
  /** Client → server: one Opus packet exactly as WebCodecs' `EncodedAudioChunk` holds it. */
  opus: 0x01,
  /** Client → server: PCM16 LE mono samples at `PCM16_UPLINK_RATE_HZ` (any whole number of samples). */
  pcm16: 0x02,
  /** Server → client: PCM16 LE mono samples of the reply at `REPLY_AUDIO_RATE_HZ`. */
  replyAudio: 0x81,
});

/** Reply frame flag: the last frame of a clause (a natural place for the player to stop on barge-in). */
export const FLAG_CLAUSE_END = 1;

/**
 * Uplink audio frame header: the byte offset of each field (kind u8, flags u8, reserved u16, turn_id u32;
 * little-endian), and its size.
 */
export const UPLINK_HEADER = Object.freeze({
  kind: 0,
  flags: 1,
  reserved: 2,
  turn_id: 4,
  bytes: 8,
});

/**
 * Reply audio frame header: the byte offset of each field (kind u8, flags u8, clause u16, turn_id u32, seq u32;
 * little-endian), and its size.
 */
export const REPLY_HEADER = Object.freeze({
  kind: 0,
  flags: 1,
  clause: 2,
  turn_id: 4,
  seq: 8,
  bytes: 12,
});

/** Close codes (docs/protocol.md, "Close codes"). */
export const CLOSE = Object.freeze({
  /** The client said `bye`, or the server is shutting down a finished session. */
  NORMAL: 1000,
  /** A text frame that is not UTF-8: uvicorn closes the connection itself; the session never sees the frame. */
  INVALID_PAYLOAD: 1007,
  /**
   * Too many bad frames in a row (`MAX_CONSECUTIVE_BAD_FRAMES`): the peer is not speaking this protocol; or it kept
   * sending after `rate_limited` (`MAX_RATE_LIMITED_FRAMES` frames dropped in a row).
   */
  POLICY_VIOLATION: 1008,
  /**
   * A frame over `MAX_FRAME_BYTES`: uvicorn closes the connection before reading it (`ws_max_size`). The client may see
   * only a reset, without this code: the server stops reading, so the rest of the frame is still unread when it closes
   * the socket, and the kernel answers with a TCP reset that discards the close frame from the client's buffer.
   */
  MESSAGE_TOO_BIG: 1009,
  /** The server hit an unexpected error outside any turn. */
  INTERNAL_ERROR: 1011,
  /** The server is shutting down (SIGTERM): turns in flight were finished first; reconnect after a moment. */
  SERVICE_RESTART: 1012,
  /** `hello.v` is not `PROTOCOL_VERSION`. */
  UNSUPPORTED_VERSION: 4000,
  /** The server requires a token and `hello.token` is missing or wrong. */
  UNAUTHORIZED: 4001,
  /** `hello.lang` is not a language of the server's grammar. */
  UNSUPPORTED_LANGUAGE: 4002,
  /** The server has site keys and `hello.token` is not a valid token of one (missing, expired, tampered). */
  UNAUTHENTICATED: 4401,
  /** The page's `Origin` is not allowed: not on the server's allowlist, or not one of the token's site key. */
  ORIGIN_NOT_ALLOWED: 4403,
  /**
   * No `hello` in time after connecting, or no message for too long while listening (after an `idle_timeout` warning).
   */
  IDLE_TIMEOUT: 4408,
  /** Too many concurrent sessions from the client's address or on its site key. */
  TOO_MANY_SESSIONS: 4429,
});

/**
 * Error codes after which the server closes the connection, and the close code it uses (an `idle_timeout` is first sent
 * as a warning, and closes only if the client stays silent; a `server_restarting` about one turn closes only once the
 * drain is over).
 */
export const CLOSING_ERRORS = Object.freeze({
  unsupported_version: 4000,
  unauthorized: 4001,
  unsupported_language: 4002,
  unauthenticated: 4401,
  origin_not_allowed: 4403,
  idle_timeout: 4408,
  too_many_sessions: 4429,
  server_restarting: 1012,
});

/** Every error code of the protocol, as the server sends it or the page's link reports it. */
export const ERRORS = Object.freeze({
  badMessage: 'bad_message',
  illegalState: 'illegal_state',
  limitExceeded: 'limit_exceeded',
  unsupportedVersion: 'unsupported_version',
  unsupportedLanguage: 'unsupported_language',
  unauthorized: 'unauthorized',
  unauthenticated: 'unauthenticated',
  originNotAllowed: 'origin_not_allowed',
  tooManySessions: 'too_many_sessions',
  rateLimited: 'rate_limited',
  idleTimeout: 'idle_timeout',
  slowConsumer: 'slow_consumer',
  serverRestarting: 'server_restarting',
  asrFailed: 'asr_failed',
  llmFailed: 'llm_failed',
  ttsFailed: 'tts_failed',
  modelUnavailable: 'model_unavailable',
  digestMismatch: 'digest_mismatch',
  modelMissing: 'model_missing',
  fetchFailed: 'fetch_failed',
  turnFailed: 'turn_failed',
  overloaded: 'overloaded',
  backendUnreachable: 'backend_unreachable',
  tokenUnavailable: 'token_unavailable',
});

/** The page's public events (DESIGN.md), dispatched on `document` (detail fields besides `t`, `audio_t`). */
export const EVENTS = Object.freeze({
  /** The models are loaded (`load_ms`, `models`); never waits for the microphone. */
  ready: 'voxline:ready',
  /** The user started speaking. */
  speechStart: 'voxline:speech-start',
  /** The user stopped speaking. */
  speechEnd: 'voxline:speech-end',
  /** `text`, `final`, `confidence` (0..1), `source` (the page's own, or `server`). */
  transcript: 'voxline:transcript',
  /** `intent`, `slots`, `source` (`cache`, `local` or `server`), `text`, `confidence`. */
  intent: 'voxline:intent',
  /** `text` (so far), `final`. */
  reply: 'voxline:reply',
  /** `first`: the reply's first sample plays; `last`: its last has played (or was stopped). */
  replyAudio: 'voxline:reply-audio',
  /** `turn_id`, `stages` on the capture clock, and the server's `timings` when it took part. */
  timings: 'voxline:timings',
  /** `state` of the backend connection: `connecting`, `open`, `closed` or `offline`. */
  link: 'voxline:link',
  /**
   * Where the exchange stands (turn.js): `state` hearing, deciding, server-pending, replying or idle (with `outcome`:
   * local, reply, interrupted, nothing, unreachable); `interrupted` names a reply spoken over.
   */
  turn: 'voxline:turn',
  /** `code` (one of `ERROR_CODES`, or one of the page's own), `message`. */
  error: 'voxline:error',
});

// The limits of protocol v1, for a server whose `welcome` leaves one out.
/** Sample rate of `pcm16` uplink audio (mono, 16-bit little-endian). */
export const PCM16_UPLINK_RATE_HZ = 16000;
/** Sample rate of the reply audio frames (mono, 16-bit little-endian). */
export const REPLY_AUDIO_RATE_HZ = 24000;
/** Longest transcript or typed turn accepted. */
export const MAX_TEXT_CHARS = 1000;
/** A JSON control message is small; anything larger is not one of ours. */
export const MAX_TEXT_FRAME_BYTES = 65536;
/** Longest turn audio accepted for server re-recognition (Whisper's window). */
export const MAX_TURN_AUDIO_SECONDS = 30;
/**
 * Opus bytes one turn may upload (1.9 MB: `MAX_TURN_AUDIO_SECONDS` at Opus' top bitrate; a page's 32 kbit/s turn of 30
 * s is 120 kB). Frames past it are dropped with one `limit_exceeded`.
 */
export const MAX_OPUS_TURN_BYTES = 1912500;
/** PCM16 bytes one turn may upload: `MAX_TURN_AUDIO_SECONDS` of samples (960 kB). */
export const MAX_PCM16_TURN_BYTES = 960000;
/**
 * Largest WebSocket frame a client may send, for the server to give uvicorn as `ws_max_size`: above any text frame
 * (`MAX_TEXT_FRAME_BYTES`) and above `MAX_TURN_AUDIO_SECONDS` of PCM16 in one binary frame (960 kB plus its header).
 * uvicorn refuses a larger frame from its header (close 1009) before buffering it; its own default is 16 MiB.
 */
export const MAX_FRAME_BYTES = 1048576;
