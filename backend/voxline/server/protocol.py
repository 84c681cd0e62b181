"""The `/ws` wire protocol, version 1: typed messages, binary audio frames, close codes (see docs/protocol.md).

This module is the protocol's one source: the browser's copy, `web/voxline/protocol.js`, is generated from it
(`python -m voxline.server.protocol_js`): message types, frame layouts, close codes, error codes, the browser's
event names and the limits a server announces in `welcome`. tests/test_protocol_source.py fails when either copy
changes alone.

Text frames are JSON objects tagged by `type`; every inbound one is parsed into a frozen `msgspec.Struct` before
any handler sees it, so handlers never touch raw dictionaries. Unknown fields are ignored (a newer client may add
some); an unknown `type`, a missing or mistyped field, or a value out of range is a `BadMessage`.

Binary frames carry audio. All integers are little-endian, so a browser can read them with a `DataView` and the
PCM payload with an `Int16Array` (the server's header is 12 bytes, keeping the samples 2-byte aligned).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

from voxline.errors import (
    ASRError,
    BadMessage,
    DigestMismatch,
    FetchError,
    IdleTimeout,
    IllegalState,
    LimitExceeded,
    LLMError,
    ModelError,
    ModelMissing,
    OriginNotAllowed,
    Overloaded,
    RateLimited,
    ServerRestarting,
    ServerUnreachable,
    SlowConsumer,
    TooManySessions,
    TTSError,
    TurnError,
    Unauthenticated,
    Unauthorized,
    UnsupportedLanguage,
    UnsupportedVersion,
    VoxlineError,
)

PROTOCOL_VERSION = 1
"""Bumped on any change an old peer would misread; `hello.v` must equal it."""

# Close codes: 1000-1015 are RFC 6455's and IANA's; 4000-4999 are for applications (ours mirror HTTP: 4401, 4403...).
CLOSE_NORMAL = 1000
"""The client said `bye`, or the server is shutting down a finished session."""
CLOSE_INVALID_PAYLOAD = 1007
"""A text frame that is not UTF-8: uvicorn closes the connection itself; the session never sees the frame."""
CLOSE_POLICY_VIOLATION = 1008
"""Too many bad frames in a row (`MAX_CONSECUTIVE_BAD_FRAMES`): the peer is not speaking this protocol; or it
kept sending after `rate_limited` (`MAX_RATE_LIMITED_FRAMES` frames dropped in a row)."""
CLOSE_MESSAGE_TOO_BIG = 1009
"""A frame over `MAX_FRAME_BYTES`: uvicorn closes the connection before reading it (`ws_max_size`). The client
may see only a reset, without this code: the server stops reading, so the rest of the frame is still unread when it
closes the socket, and the kernel answers with a TCP reset that discards the close frame from the client's buffer."""
CLOSE_INTERNAL_ERROR = 1011
"""The server hit an unexpected error outside any turn."""
CLOSE_SERVICE_RESTART = 1012
"""The server is shutting down (SIGTERM): turns in flight were finished first; reconnect after a moment."""
CLOSE_UNSUPPORTED_VERSION = 4000
"""`hello.v` is not `PROTOCOL_VERSION`."""
CLOSE_UNAUTHORIZED = 4001
"""The server requires a token and `hello.token` is missing or wrong."""
CLOSE_UNSUPPORTED_LANGUAGE = 4002
"""`hello.lang` is not a language of the server's grammar."""
CLOSE_UNAUTHENTICATED = 4401
"""The server has site keys and `hello.token` is not a valid token of one (missing, expired, tampered)."""
CLOSE_ORIGIN_NOT_ALLOWED = 4403
"""The page's `Origin` is not allowed: not on the server's allowlist, or not one of the token's site key."""
CLOSE_IDLE_TIMEOUT = 4408
"""No `hello` in time after connecting, or no message for too long while listening (after an `idle_timeout`
warning)."""
CLOSE_TOO_MANY_SESSIONS = 4429
"""Too many concurrent sessions from the client's address or on its site key."""
CLOSING_ERRORS = {
    UnsupportedVersion.code: CLOSE_UNSUPPORTED_VERSION,
    Unauthorized.code: CLOSE_UNAUTHORIZED,
    UnsupportedLanguage.code: CLOSE_UNSUPPORTED_LANGUAGE,
    Unauthenticated.code: CLOSE_UNAUTHENTICATED,
    OriginNotAllowed.code: CLOSE_ORIGIN_NOT_ALLOWED,
    IdleTimeout.code: CLOSE_IDLE_TIMEOUT,
    TooManySessions.code: CLOSE_TOO_MANY_SESSIONS,
    ServerRestarting.code: CLOSE_SERVICE_RESTART,
}
"""Error codes after which the server closes the connection, and the close code it uses (an `idle_timeout` is
first sent as a warning, and closes only if the client stays silent; a `server_restarting` about one turn closes
only once the drain is over)."""

MAX_CONSECUTIVE_BAD_FRAMES = 16
"""Bad frames are answered one by one; this many in a row closes the connection with `CLOSE_POLICY_VIOLATION`."""
MAX_RATE_LIMITED_FRAMES = 64
"""Frames dropped in a row for `rate_limited` (the client ignores the error) before closing with
`CLOSE_POLICY_VIOLATION`."""
MAX_TEXT_FRAME_BYTES = 64 * 1024
"""A JSON control message is small; anything larger is not one of ours."""
MAX_TEXT_CHARS = 1000
"""Longest transcript or typed turn accepted."""
MAX_TURN_AUDIO_SECONDS = 30.0
"""Longest turn audio accepted for server re-recognition (Whisper's window)."""
PCM16_UPLINK_RATE_HZ = 16_000
"""Sample rate of `pcm16` uplink audio (mono, 16-bit little-endian)."""
OPUS_MAX_BITRATE_BPS = 510_000
"""The highest bitrate Opus has (RFC 6716): no honest encoder fills more bytes per second than this."""
MAX_OPUS_TURN_BYTES = int(MAX_TURN_AUDIO_SECONDS * OPUS_MAX_BITRATE_BPS / 8)
"""Opus bytes one turn may upload (1.9 MB: `MAX_TURN_AUDIO_SECONDS` at Opus' top bitrate; a page's 32 kbit/s
turn of 30 s is 120 kB). Frames past it are dropped with one `limit_exceeded`."""
MAX_PCM16_TURN_BYTES = int(MAX_TURN_AUDIO_SECONDS * PCM16_UPLINK_RATE_HZ * 2)
"""PCM16 bytes one turn may upload: `MAX_TURN_AUDIO_SECONDS` of samples (960 kB)."""
MAX_FRAME_BYTES = 1024 * 1024
"""Largest WebSocket frame a client may send, for the server to give uvicorn as `ws_max_size`: above any text frame
(`MAX_TEXT_FRAME_BYTES`) and above `MAX_TURN_AUDIO_SECONDS` of PCM16 in one binary frame (960 kB plus its header).
uvicorn refuses a larger frame from its header (close 1009) before buffering it; its own default is 16 MiB."""
WIRE_LIMITS = {"max_text_chars": MAX_TEXT_CHARS, "max_turn_audio_s": MAX_TURN_AUDIO_SECONDS,
               "max_opus_turn_bytes": MAX_OPUS_TURN_BYTES, "max_pcm16_turn_bytes": MAX_PCM16_TURN_BYTES,
               "max_text_frame_bytes": MAX_TEXT_FRAME_BYTES, "max_frame_bytes": MAX_FRAME_BYTES}
"""The limits above as `welcome` announces them (with those that come from the server's settings)."""
UVICORN_WEBSOCKET_OPTIONS = {"ws_max_size": MAX_FRAME_BYTES, "ws_per_message_deflate": False}
"""How every Voxline server runs uvicorn's WebSockets: the frame limit above, and no permessage-deflate. Browsers
ask for compression by default; it bought nothing here (reply audio is PCM, control messages are a few hundred
bytes), and in a py-spy profile of the server under LLM load it was the event loop thread's largest cost."""
REPLY_AUDIO_RATE_HZ = 24_000
"""Sample rate of the reply audio frames (mono, 16-bit little-endian)."""

TurnId = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]
"""Chosen by the client, unique within the session; a u32 so binary frames can carry it."""
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Utterance = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]
AudioKind = Literal["opus", "pcm16"]


# ---------------------------------------------------------------------------------------------- client → server


class Capabilities(msgspec.Struct, frozen=True):
    """What the client can send."""

    opus: bool = False
    """It can send Opus packets (WebCodecs `AudioEncoder`)."""
    pcm16: bool = True
    """It can send raw PCM16 at `PCM16_UPLINK_RATE_HZ`."""
    sample_rate: Annotated[int, msgspec.Meta(gt=0)] = PCM16_UPLINK_RATE_HZ
    """Rate of its `pcm16` uplink; version 1 accepts only `PCM16_UPLINK_RATE_HZ`."""
    reply_audio: bool = True
    """It plays reply audio. A text-only client (a chat box, a page that speaks with its own voice) says false:
    the server then runs no TTS for it and sends no audio frames, only text."""
    tier: Annotated[int, msgspec.Meta(ge=1, le=5)] | None = None
    """The user's service tier (1-5) as the client believes it; the server uses it only when its key allows
    (see `Settings.trust_client_tier`), else the server's own default tier."""


class OpusConfig(msgspec.Struct, frozen=True):
    """The `decoderConfig` WebCodecs' `AudioEncoder` emitted, as JSON (description base64-encoded)."""

    sample_rate: Annotated[int, msgspec.Meta(gt=0)] = 48_000
    channels: Annotated[int, msgspec.Meta(ge=1, le=2)] = 1
    description: str | None = None
    """Base64 of the codec description (an `OpusHead`), when the encoder gave one."""

    def description_bytes(self) -> bytes | None:
        """The decoded description; a bad base64 string is a `BadMessage`."""
        if self.description is None:
            return None
        try:
            return base64.b64decode(self.description, validate=True)
        except ValueError:
            raise BadMessage("turn.start: opus.description is not base64: send the encoder's description (an "
                             "OpusHead) as standard base64, or null") from None


class Hello(msgspec.Struct, frozen=True, tag="hello", tag_field="type"):
    """First message of a session."""

    v: int
    lang: Annotated[str, msgspec.Meta(min_length=2, max_length=35)] = "en"
    """BCP 47 tag; only its primary subtag is used ("en-US" → "en")."""
    token: str | None = None
    capabilities: Capabilities = Capabilities()


class TurnStart(msgspec.Struct, frozen=True, tag="turn.start", tag_field="type"):
    """The user finished speaking: the browser's transcript, and whether audio frames follow."""

    turn_id: TurnId
    transcript: Utterance
    confidence: Confidence
    audio: AudioKind | None = None
    """When set, audio frames of this kind follow, then `turn.audio_end`."""
    want_server_asr: bool = False
    """Re-recognise on the server even above the confidence gate."""
    opus: OpusConfig | None = None
    """Decoder configuration for `audio: "opus"` (defaults: 48 kHz mono, no description)."""
    speculative: bool = False
    """The user may not have finished (the page heard a pause): answer it, but send nothing of it until
    `turn.confirm`; `turn.cancel` drops it without a trace. Only with a transcript, never with audio."""


class AudioEnd(msgspec.Struct, frozen=True, tag="turn.audio_end", tag_field="type"):
    """No more audio frames for the current turn."""

    turn_id: TurnId


class TurnConfirm(msgspec.Struct, frozen=True, tag="turn.confirm", tag_field="type"):
    """The speculative turn is the user's turn after all (the final transcript is the one it was sent with):
    what the server held back goes out now, and the turn goes on as any other."""

    turn_id: TurnId


class TurnCancel(msgspec.Struct, frozen=True, tag="turn.cancel", tag_field="type"):
    """The speculative turn is not the user's turn (they went on, or said something else): stop it; nothing of it
    is sent and the dialog history never sees it."""

    turn_id: TurnId


class BargeIn(msgspec.Struct, frozen=True, tag="barge_in", tag_field="type"):
    """The user spoke over the reply: stop it. `played_ms` is how much of its audio the user actually heard."""

    turn_id: TurnId
    played_ms: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0


class TextTurn(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    """A typed turn: no audio, no confidence gate."""

    turn_id: TurnId
    text: Utterance


class Bye(msgspec.Struct, frozen=True, tag="bye", tag_field="type"):
    """The client is leaving; the server closes with `CLOSE_NORMAL`."""


ClientMessage = Hello | TurnStart | TurnConfirm | TurnCancel | AudioEnd | BargeIn | TextTurn | Bye

_client_decoder = msgspec.json.Decoder(ClientMessage)


# ---------------------------------------------------------------------------------------------- server → client


class Welcome(msgspec.Struct, frozen=True, tag="welcome", tag_field="type"):
    """Answer to `hello`: the session's id, the protocol version, and the terms of the session, which a client obeys
    (web/voxline/link.js `serverTerms`). Fields are only ever added: a client ignores what it does not know, and
    takes this version's values (`MAX_TURN_AUDIO_SECONDS`, ...) for what an older server leaves out."""

    session_id: str
    v: int
    limits: dict[str, float | int]
    """`asr_confidence_gate`: below this browser confidence the server re-recognises a turn's audio, so a client
    sends the audio of every such turn; `max_turn_audio_s`, `max_opus_turn_bytes`, `max_pcm16_turn_bytes`: the most
    audio one turn may carry; `max_frame_bytes`, `max_text_frame_bytes`, `max_text_chars`; the rates, the reply's
    bounds and the idle timeout (docs/protocol.md, `welcome`)."""
    reply_audio: dict[str, str | int]
    """How reply audio frames come: `encoding` (pcm16le), `sample_rate`, `channels`, `header_bytes`."""
    models: dict[str, str]


class Transcript(msgspec.Struct, frozen=True, tag="transcript", tag_field="type"):
    """The server's own transcript of the turn audio; it replaces the browser's."""

    turn_id: int
    text: str
    source: str = "server"
    confidence: float | None = None
    """0..1 from Whisper's token probabilities (voxline/server_asr.py); absent from older servers."""


class IntentMessage(msgspec.Struct, frozen=True, tag="intent", tag_field="type"):
    """The turn is a command of the grammar; the page acts on it and caches it for next time."""

    turn_id: int
    intent: str
    slots: dict[str, object]
    text: str
    confirmation: str | None
    grammar_version: str


class ReplyDelta(msgspec.Struct, frozen=True, tag="reply.delta", tag_field="type"):
    """More reply text, as the model produced it."""

    turn_id: int
    text: str


class ReplyDone(msgspec.Struct, frozen=True, tag="reply.done", tag_field="type"):
    """The turn is over. `text` is the reply as kept in the dialog: only the heard part when interrupted."""

    turn_id: int
    text: str
    interrupted: bool = False


class Timings(msgspec.Struct, frozen=True, tag="timings", tag_field="type", omit_defaults=True):
    """Where the turn's time went, in milliseconds from the turn's first message; absent fields did not apply."""

    turn_id: int
    interrupted: bool
    asr_ms: float | None = None
    intent_ms: float | None = None
    classify_ms: float | None = None
    """The grammar missed and the LLM was asked whether the words are still one of the intents: when it answered."""
    llm_first_token_ms: float | None = None
    first_clause_ms: float | None = None
    tts_first_audio_ms: float | None = None
    first_audio_sent_ms: float | None = None
    llm_ms: float | None = None
    llm_tokens: int | None = None
    llm_queued_ms: float | None = None
    """When the turn's LLM request entered the scheduler's queue."""
    llm_batch_ms: float | None = None
    """When the batch holding the request started on the model."""
    batch_size: int | None = None
    """How many requests that batch ran together."""
    lane: str | None = None
    """The scheduler lane ("high", "normal", "bulk", "low_confidence", "fifo") that served the request."""
    total_ms: float | None = None
    confirmed_ms: float | None = None
    """A speculative turn: when `turn.confirm` came (its other marks count from its speculative start)."""
    stages: dict[str, float] | None = None
    """Durations (ms) of the path to the first reply audio: asr, intent, queue, prefill, decode, tts, transport.
    Their sum is `first_audio_sent_ms`; the largest is the stage that dominated (the slow-turn report)."""


class ErrorMessage(msgspec.Struct, frozen=True, tag="error", tag_field="type", omit_defaults=True):
    """Something went wrong; `code` is one of docs/protocol.md's, the same string the page shows in `voxline:error`."""

    code: str
    message: str
    turn_id: int | None = None
    retry_after_ms: int | None = None
    """With `overloaded`: try again after about this long (the server's queue was full)."""


ServerMessage = Welcome | Transcript | IntentMessage | ReplyDelta | ReplyDone | Timings | ErrorMessage

_encoder = msgspec.json.Encoder()
_server_decoder = msgspec.json.Decoder(ServerMessage)


CLIENT_MESSAGE_TYPES = tuple(kind.__struct_config__.tag for kind in ClientMessage.__args__)
"""The `type` of every message a client may send."""
_ERROR_DETAIL_CHARS = 200
"""msgspec quotes the offending value; an error message need not echo a whole hostile frame back."""


def parse_client_message(data: str | bytes) -> ClientMessage:
    """Parse one JSON text frame; anything malformed or unknown raises `BadMessage` saying what and what to do."""
    if len(data) > MAX_TEXT_FRAME_BYTES:
        unit = "bytes" if isinstance(data, bytes | bytearray) else "characters"
        raise BadMessage(f"text frame of {len(data)} {unit} is over the {MAX_TEXT_FRAME_BYTES}-byte limit: send "
                         "control messages as small JSON objects, and audio in binary frames")
    try:
        return _client_decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass: both are the client's fault
        raise BadMessage(_explain(str(exc))) from None
    except UnicodeEncodeError:  # a str with lone surrogates (a WebSocket text frame never has them)
        raise BadMessage("text frame is not valid Unicode (a lone surrogate): send UTF-8 JSON") from None


def _explain(reason: str) -> str:
    """msgspec's reason, clipped, with what the client should do about it."""
    if len(reason) > _ERROR_DETAIL_CHARS:
        reason = reason[:_ERROR_DETAIL_CHARS] + "…"
    if reason.startswith(("JSON is malformed", "Input data was truncated", "Invalid UTF-8")):
        return f"text frame is not JSON ({reason}): send one JSON object per text frame"
    if reason.endswith(("at `$.type`", "field `type`")):
        return f"{reason}: a client message's `type` is one of {', '.join(CLIENT_MESSAGE_TYPES)}"
    if reason.startswith("Expected `object`") and " - at " not in reason:
        return f"{reason}: send one JSON object per text frame"
    return f"{reason}: fix that field (docs/protocol.md lists each message's fields and their ranges)"


def encode_message(message: ServerMessage | ClientMessage) -> str:
    """One JSON text frame."""
    return _encoder.encode(message).decode()


def parse_server_message(data: str | bytes) -> ServerMessage:
    """For clients and tests: parse a server text frame."""
    try:
        return _server_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise BadMessage(str(exc)) from None


# ---------------------------------------------------------------------------------------------- binary frames

FRAME_OPUS = 0x01
"""Client → server: one Opus packet exactly as WebCodecs' `EncodedAudioChunk` holds it."""
FRAME_PCM16 = 0x02
"""Client → server: PCM16 LE mono samples at `PCM16_UPLINK_RATE_HZ` (any whole number of samples)."""
FRAME_REPLY_AUDIO = 0x81
"""Server → client: PCM16 LE mono samples of the reply at `REPLY_AUDIO_RATE_HZ`."""

FLAG_CLAUSE_END = 0x01
"""Reply frame flag: the last frame of a clause (a natural place for the player to stop on barge-in)."""

UPLINK_HEADER_FIELDS = (("kind", "B"), ("flags", "B"), ("reserved", "H"), ("turn_id", "I"))
"""An uplink frame's header, in order, as `struct` codes (little-endian): flags and reserved are 0."""
REPLY_HEADER_FIELDS = (("kind", "B"), ("flags", "B"), ("clause", "H"), ("turn_id", "I"), ("seq", "I"))
"""A reply audio frame's header, in order, as `struct` codes (little-endian)."""
_UPLINK_HEADER = struct.Struct("<" + "".join(code for _, code in UPLINK_HEADER_FIELDS))
_REPLY_HEADER = struct.Struct("<" + "".join(code for _, code in REPLY_HEADER_FIELDS))
UPLINK_HEADER_BYTES = _UPLINK_HEADER.size
REPLY_HEADER_BYTES = _REPLY_HEADER.size
_UPLINK_KINDS = {FRAME_OPUS: "opus", FRAME_PCM16: "pcm16"}


@dataclass(frozen=True)
class AudioFrame:
    """An uplink audio frame of the current turn."""

    kind: AudioKind
    turn_id: int
    payload: bytes


@dataclass(frozen=True)
class ReplyAudioFrame:
    """A downlink frame of reply audio."""

    turn_id: int
    seq: int
    """Frame number within the turn, from 0; gaps never happen on one connection."""
    clause: int
    """Which clause of the reply (0, 1, ...) these samples belong to."""
    clause_end: bool
    pcm: bytes


def encode_audio_frame(kind: AudioKind, turn_id: int, payload: bytes) -> bytes:
    """For clients and tests: one uplink frame."""
    code = FRAME_OPUS if kind == "opus" else FRAME_PCM16
    return _UPLINK_HEADER.pack(code, 0, 0, turn_id) + payload


def parse_audio_frame(data: bytes) -> AudioFrame:
    """Parse an uplink binary frame; a short frame, an unknown kind or odd-length PCM raises `BadMessage`."""
    if len(data) <= UPLINK_HEADER_BYTES:
        raise BadMessage(f"binary frame of {len(data)} bytes has no audio: send the {UPLINK_HEADER_BYTES}-byte header "
                         "(kind, flags, reserved, turn_id) followed by the audio")
    code, _flags, _reserved, turn_id = _UPLINK_HEADER.unpack_from(data)
    kind = _UPLINK_KINDS.get(code)
    if kind is None:
        raise BadMessage(f"binary frame kind 0x{code:02x} is not an uplink audio kind: use 0x{FRAME_OPUS:02x} (one "
                         f"Opus packet) or 0x{FRAME_PCM16:02x} (PCM16)")
    payload = bytes(data[UPLINK_HEADER_BYTES:])
    if kind == "pcm16" and len(payload) % 2:
        raise BadMessage(f"pcm16 frame of {len(payload)} bytes, an odd number: send whole 16-bit samples")
    return AudioFrame(kind, turn_id, payload)


def encode_reply_audio(turn_id: int, seq: int, clause: int, pcm: bytes, *, clause_end: bool) -> bytes:
    """One downlink frame of reply audio."""
    flags = FLAG_CLAUSE_END if clause_end else 0
    return _REPLY_HEADER.pack(FRAME_REPLY_AUDIO, flags, clause, turn_id, seq) + pcm


def parse_reply_audio(data: bytes) -> ReplyAudioFrame:
    """For clients and tests: parse a downlink audio frame."""
    if len(data) < REPLY_HEADER_BYTES:
        raise BadMessage("reply audio frame shorter than its header")
    code, flags, clause, turn_id, seq = _REPLY_HEADER.unpack_from(data)
    if code != FRAME_REPLY_AUDIO:
        raise BadMessage(f"binary frame kind 0x{code:02x} is not reply audio")
    return ReplyAudioFrame(turn_id, seq, clause, bool(flags & FLAG_CLAUSE_END), bytes(data[REPLY_HEADER_BYTES:]))


def header_offsets(fields: tuple[tuple[str, str], ...]) -> dict[str, int]:
    """Byte offset of each field of a binary header (`UPLINK_HEADER_FIELDS`, `REPLY_HEADER_FIELDS`)."""
    offsets, at = {}, 0
    for name, code in fields:
        offsets[name] = at
        at += struct.calcsize("<" + code)
    return offsets


# ---------------------------------------------------------------------------------------------- error codes

WIRE_ERRORS: tuple[type[VoxlineError], ...] = (
    BadMessage, IllegalState, LimitExceeded, UnsupportedVersion, UnsupportedLanguage, Unauthorized, Unauthenticated,
    OriginNotAllowed, TooManySessions, RateLimited, IdleTimeout, SlowConsumer, ServerRestarting, ASRError, LLMError,
    TTSError, ModelError, DigestMismatch, ModelMissing, FetchError, TurnError, Overloaded,
)
"""Every error whose `code` the server sends in an `error` frame; the page shows it as `voxline:error` (the strings
live on the classes, voxline/errors.py)."""
TOKEN_UNAVAILABLE = "token_unavailable"
"""The page's `token` function (its `token-url`) failed, so it could not say `hello`; it tries again with backoff."""
LINK_ERROR_CODES = (ServerUnreachable.code, TOKEN_UNAVAILABLE, BadMessage.code)
"""The codes the page's link reports in `voxline:error` by itself: the server cannot be reached (a close that
reconnecting may fix, or no connection), no token, or a frame from the server that is not JSON."""
ERROR_CODES = tuple(dict.fromkeys([*(error.code for error in WIRE_ERRORS), *LINK_ERROR_CODES]))
"""Every error code of the protocol, as the server sends it or the page's link reports it."""


# ---------------------------------------------------------------------------------------------- browser events

BROWSER_EVENTS = {
    "voxline:ready": "The models are loaded (`load_ms`, `models`); never waits for the microphone.",
    "voxline:speech-start": "The user started speaking.",
    "voxline:speech-end": "The user stopped speaking.",
    "voxline:transcript": "`text`, `final`, `confidence` (0..1), `source` (the page's own, or `server`).",
    "voxline:intent": "`intent`, `slots`, `source` (`cache`, `local` or `server`), `text`, `confidence`.",
    "voxline:reply": "`text` (so far), `final`.",
    "voxline:reply-audio": "`first`: the reply's first sample plays; `last`: its last has played (or was stopped).",
    "voxline:timings": "`turn_id`, `stages` on the capture clock, and the server's `timings` when it took part.",
    "voxline:link": "`state` of the backend connection: `connecting`, `open`, `closed` or `offline`.",
    "voxline:turn": "Where the exchange stands (turn.js): `state` hearing, deciding, server-pending, replying or idle "
                    "(with `outcome`: local, reply, interrupted, nothing, unreachable); `interrupted` names a reply "
                    "spoken over.",
    "voxline:error": "`code` (one of `ERROR_CODES`, or one of the page's own), `message`.",
}
"""The page's events, dispatched on `document` (names are a public interface: DESIGN.md), and what each carries
besides `t` and `audio_t`. `voxline talk --json` prints the same names."""
