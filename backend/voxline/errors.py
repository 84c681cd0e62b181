"""The one Voxline exception tree, shared by the server, the CLI and the Python client.

Each class carries the `code` string the browser sees in `voxline:error` and a message that says what happened
and what to do.
"""

from __future__ import annotations


class VoxlineError(Exception):
    """Base of every error Voxline raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelError(VoxlineError):
    """A model is missing, altered, or could not be built."""

    code = "model_unavailable"


class DigestMismatch(ModelError):
    """A downloaded package or a built artifact does not have the pinned sha256."""

    code = "digest_mismatch"


class ModelMissing(ModelError):
    """A model the configuration needs has not been built yet."""

    code = "model_missing"


class FetchError(ModelError):
    """A registry client failed to download a pinned package."""

    code = "fetch_failed"


class ProtocolError(VoxlineError):
    """A WebSocket client broke the protocol in `docs/protocol.md`; the session answers `error` and lives on."""

    code = "bad_message"


class BadMessage(ProtocolError):
    """A frame could not be parsed: not JSON, an unknown `type`, a missing or mistyped field, a bad binary header."""

    code = "bad_message"


class IllegalState(ProtocolError):
    """A well-formed message arrived in a state that does not accept it (e.g. `turn.start` while speaking)."""

    code = "illegal_state"


class LimitExceeded(ProtocolError):
    """A turn's text or audio is larger than the limits announced in `welcome`."""

    code = "limit_exceeded"


class UnsupportedVersion(ProtocolError):
    """`hello` asked for a protocol version this server does not speak; the connection is closed."""

    code = "unsupported_version"


class UnsupportedLanguage(ProtocolError):
    """`hello` named a language the server's grammar and recogniser do not have; the connection is closed."""

    code = "unsupported_language"


class Unauthorized(ProtocolError):
    """`hello` carried no token, or the wrong one, while the server requires one; the connection is closed."""

    code = "unauthorized"


class Unauthenticated(Unauthorized):
    """The server has site keys and the session has no valid token for one: missing, malformed, expired, signed
    for another origin or with another secret, or naming an unknown key; the connection is closed."""

    code = "unauthenticated"


class OriginNotAllowed(Unauthorized):
    """The page's `Origin` is not on the server's allowlist, or not among its site key's origins; the connection
    (or the `/token` request) is refused."""

    code = "origin_not_allowed"


class TooManySessions(ProtocolError):
    """A cap on concurrent sessions (per client address, per site key) is reached; the connection is closed."""

    code = "too_many_sessions"


class RateLimited(ProtocolError):
    """The client sends frames faster than its budget: the extra frames are dropped unread."""

    code = "rate_limited"


class IdleTimeout(ProtocolError):
    """The session sent nothing for too long while listening (or no `hello` after connecting); it is closed."""

    code = "idle_timeout"


class SlowConsumer(ProtocolError):
    """The client does not read fast enough: the reply audio waiting for it passed its bound and was dropped."""

    code = "slow_consumer"


class TurnError(VoxlineError):
    """A model failed while answering a turn; the client gets an apology and the session goes on."""

    code = "turn_failed"


class Overloaded(TurnError):
    """The server's LLM queue is full: the turn was not admitted. `retry_after_ms` is a hint for the client."""

    code = "overloaded"

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class ServerRestarting(TurnError):
    """The server is shutting down: a new turn (or connection) is refused; reconnect in a moment."""

    code = "server_restarting"


class ASRError(TurnError):
    """Server re-recognition failed (the audio could not be decoded, or Whisper raised)."""

    code = "asr_failed"


class LLMError(TurnError):
    """The language model failed while generating a reply."""

    code = "llm_failed"


class TTSError(TurnError):
    """Speech synthesis failed for a clause of the reply."""

    code = "tts_failed"


class ClientError(VoxlineError):
    """The Python client (`voxline talk`) could not do what it was asked; the message says what to do."""

    code = "client_failed"


class ServerUnreachable(ClientError):
    """The Voxline server could not be reached, or dropped the connection (the browser's code for the same)."""

    code = "backend_unreachable"


class AudioDeviceError(ClientError):
    """No usable microphone or speaker: none exists, PortAudio is missing, or the device refused the format."""

    code = "audio_device_unavailable"


class AudioFileError(ClientError):
    """An audio file given to the client could not be read or written."""

    code = "audio_file_unreadable"
