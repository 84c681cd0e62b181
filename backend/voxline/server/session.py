"""One `/ws` conversation as an explicit state machine.

States and the messages each accepts (anything else is answered with `error {code: "illegal_state"}`):

    HANDSHAKE        hello ─────────────────────────────► LISTENING
    LISTENING        turn.start (audio) ────────────────► RECEIVING_AUDIO
                     turn.start (no audio), text ───────► THINKING
                     barge_in (the turn just finished)    (history trimmed to what was heard)
    RECEIVING_AUDIO  audio frames, turn.audio_end ──────► THINKING
    THINKING         first reply audio frame queued ────► SPEAKING
    THINKING, SPEAKING  reply.done ─────────────────────► LISTENING
    RECEIVING_AUDIO, THINKING, SPEAKING  barge_in ──────► LISTENING (reply.done interrupted)
    any              bye ───────────────────────────────► CLOSED

Each message type has one handler here. A turn from its last message to `reply.done` is the turn pipeline's
(pipeline.py): it runs as its own task, so the session keeps reading the socket (and hears a barge-in) meanwhile.
"""

from __future__ import annotations

import enum
import uuid

from voxline.dialog import DialogHistory
from voxline.errors import (
    BadMessage,
    IllegalState,
    ProtocolError,
    TooManySessions,
    TurnError,
    Unauthorized,
    UnsupportedLanguage,
    UnsupportedVersion,
    VoxlineError,
)
from voxline.intents import GrammarError
from voxline.server import protocol as p
from voxline.server.admission import Gate, Peer
from voxline.server.auth import SiteKey
from voxline.server.engines import Engines
from voxline.server.outbox import Outbound, Outbox
from voxline.server.pipeline import TurnPipeline
from voxline.server.turn import Turn


class SessionState(enum.Enum):
    HANDSHAKE = "handshake"
    LISTENING = "listening"
    RECEIVING_AUDIO = "receiving_audio"
    THINKING = "thinking"
    SPEAKING = "speaking"
    CLOSED = "closed"


_S = SessionState
_IN_TURN = frozenset({_S.RECEIVING_AUDIO, _S.THINKING, _S.SPEAKING})
ACCEPTS: dict[type, frozenset[SessionState]] = {
    p.Hello: frozenset({_S.HANDSHAKE}),
    p.TurnStart: frozenset({_S.LISTENING}),
    p.TextTurn: frozenset({_S.LISTENING}),
    p.AudioFrame: frozenset({_S.RECEIVING_AUDIO}),
    p.AudioEnd: frozenset({_S.RECEIVING_AUDIO}),
    p.BargeIn: _IN_TURN | {_S.LISTENING},
    p.TurnConfirm: frozenset({_S.THINKING, _S.SPEAKING}),
    p.TurnCancel: frozenset({_S.THINKING, _S.SPEAKING}),
    p.Bye: frozenset(set(_S) - {_S.CLOSED}),
}
"""The states in which each inbound message is legal."""
NEXT_STEP = {
    _S.HANDSHAKE: "send hello first",
    _S.LISTENING: "start a turn with turn.start or text first",
    _S.RECEIVING_AUDIO: "finish turn {turn} with turn.audio_end, or drop it with barge_in",
    _S.THINKING: "wait for turn {turn}'s reply.done, or send barge_in for it first",
    _S.SPEAKING: "wait for turn {turn}'s reply.done, or send barge_in for it first",
    _S.CLOSED: "the session is over: open a new connection",
}
"""What a client whose message was illegal in a state should do instead (`{turn}`: the turn in progress)."""


class Session:
    """The protocol state machine of one connection. Feed it frames; it puts replies in its `Outbox`."""

    def __init__(self, engines: Engines, outbox: Outbox, session_id: str | None = None, *,
                 gate: Gate | None = None, peer: Peer | None = None) -> None:
        self.engines = engines
        self.settings = engines.settings
        self.outbox = outbox
        self.id = session_id or uuid.uuid4().hex[:16]
        self.state = SessionState.HANDSHAKE
        self.lang = "en"
        self.capabilities = p.Capabilities()
        self.history = DialogHistory(self.settings.history_exchanges)
        self.tier = self.settings.default_user_tier
        """The user's service tier (1-5), one input of the scheduler's priority."""
        self.gate = gate or Gate(self.settings)
        """Checks `hello.token` (see admission.py); `ws.py` gives every session the app's one."""
        self.peer = peer or Peer()
        self.site_key: SiteKey | None = None
        """The site key of the session's token (None on an open server, or with the shared `auth_token`)."""
        self.refusal: TurnError | None = None
        """Set while the server drains (drain.py): a turn that would begin now gets this error and an apology."""
        self.span = None
        """The conversation's trace span (None when tracing is off)."""
        self.turn: Turn | None = None
        """The turn in progress (RECEIVING_AUDIO, THINKING, SPEAKING)."""
        self.last_turn: Turn | None = None
        """The turn that ended last: a barge-in may still arrive for it while the page plays its tail."""
        self._last_turn_id = -1
        self._bad_frames = 0
        self.pipeline = TurnPipeline(self)
        """Runs each turn from its last message to its `reply.done`."""
        self._handlers = {
            p.Hello: self._on_hello, p.TurnStart: self._on_turn_start, p.AudioFrame: self._on_audio_frame,
            p.AudioEnd: self._on_audio_end, p.BargeIn: self._on_barge_in, p.TurnConfirm: self._on_confirm,
            p.TurnCancel: self._on_cancel, p.TextTurn: self._on_text, p.Bye: self._on_bye,
        }

    # ------------------------------------------------------------------------------------------------ intake

    async def receive_text(self, data: str) -> None:
        """A JSON text frame from the client."""
        try:
            message = p.parse_client_message(data)
        except BadMessage as exc:
            self._reject(exc)
            return
        await self.dispatch(message)

    async def receive_bytes(self, data: bytes) -> None:
        """A binary frame from the client."""
        try:
            frame = p.parse_audio_frame(data)
        except BadMessage as exc:
            self._reject(exc, self.turn.turn_id if self.turn else None)
            return
        await self.dispatch(frame)

    async def dispatch(self, message: object) -> None:
        """Check that the state accepts `message`, then run its one handler."""
        turn_id = getattr(message, "turn_id", None)
        try:
            if self.state not in ACCEPTS[type(message)]:
                raise IllegalState(f"{_describe(message)} is not accepted while {self.state.value}: "
                                   f"{self._next_step(message)}")
            await self._handlers[type(message)](message)
        except ProtocolError as exc:
            self._reject(exc, turn_id)
        else:
            self._bad_frames = 0

    def _next_step(self, message: object) -> str:
        """What a client whose `message` was illegal in the current state should do instead."""
        if isinstance(message, p.Hello):
            return "hello is only the first message"
        turn = self.turn.turn_id if self.turn else None
        if self.turn is not None and self.turn.speculative:
            return f"send turn.confirm or turn.cancel for the speculative turn {turn} first"
        return NEXT_STEP[self.state].format(turn=turn)

    async def close(self) -> None:
        """The connection is gone or closing: stop the turn in progress, without answering it."""
        turn, self.turn = self.turn, None
        self.state = SessionState.CLOSED
        await self.pipeline.close(turn)
        self.engines.telemetry.end_conversation(self.span)
        self.span = None

    # ------------------------------------------------------------------------------------------------ handlers

    async def _on_hello(self, hello: p.Hello) -> None:
        if hello.v != p.PROTOCOL_VERSION:
            self._fatal(UnsupportedVersion(f"this server speaks protocol v{p.PROTOCOL_VERSION}, not v{hello.v}: use a "
                                           f"client of protocol v{p.PROTOCOL_VERSION}"), p.CLOSE_UNSUPPORTED_VERSION)
            return
        try:
            self.site_key = self.gate.authenticate(self.id, hello.token)
        except (Unauthorized, TooManySessions) as exc:
            self.engines.metrics.reject(exc.code)
            self._fatal(exc, p.CLOSING_ERRORS[exc.code])
            return
        if self.site_key is not None and self.site_key.tier is not None:
            self.tier = self.site_key.tier
        try:
            self.engines.grammar.language(hello.lang)
        except GrammarError:
            have = ", ".join(self.engines.grammar.languages)
            self._fatal(UnsupportedLanguage(f"no grammar for language {hello.lang!r}: say hello with one of {have}"),
                        p.CLOSE_UNSUPPORTED_LANGUAGE)
            return
        caps = hello.capabilities
        if caps.pcm16 and caps.sample_rate != p.PCM16_UPLINK_RATE_HZ:
            raise BadMessage(f"pcm16 uplink must be {p.PCM16_UPLINK_RATE_HZ} Hz, not {caps.sample_rate}: resample "
                             f"to {p.PCM16_UPLINK_RATE_HZ} Hz (or announce pcm16 false) and send hello again")
        self.lang, self.capabilities = hello.lang, caps
        if caps.tier is not None and self.settings.trust_client_tier:
            self.tier = caps.tier
        self.state = SessionState.LISTENING
        self.span = self.engines.telemetry.start_conversation(self.id)
        self._send(p.Welcome(
            session_id=self.id,
            v=p.PROTOCOL_VERSION,
            limits={
                **p.WIRE_LIMITS,
                "asr_confidence_gate": self.settings.asr_confidence_gate,
                "reply_max_tokens": self.settings.reply_max_tokens,
                "reply_max_seconds": self.settings.reply_max_seconds,
                "max_messages_per_s": self.settings.max_messages_per_s,
                "max_message_burst": self.settings.max_message_burst,
                "max_audio_frames_per_s": self.settings.max_audio_frames_per_s,
                "max_audio_frame_burst": self.settings.max_audio_frame_burst,
                "idle_timeout_s": self.settings.idle_timeout_s,
            },
            reply_audio={"encoding": "pcm16le", "sample_rate": p.REPLY_AUDIO_RATE_HZ, "channels": 1,
                         "header_bytes": p.REPLY_HEADER_BYTES},
            models={"llm": self.engines.llm.name, "tts": self.engines.tts.name,
                    "asr": self.engines.asr.folder.name},
        ))

    async def _on_turn_start(self, start: p.TurnStart) -> None:
        self._claim_turn_id(start.turn_id)
        if start.audio is not None and not getattr(self.capabilities, start.audio):
            raise BadMessage(f"turn.start: audio {start.audio!r} was not announced in hello.capabilities: send "
                             "the kind that was, or none")
        turn = Turn.from_start(start)
        if start.audio is None:
            self._begin(turn)
        else:
            self.turn = turn
            self.state = SessionState.RECEIVING_AUDIO

    async def _on_audio_frame(self, frame: p.AudioFrame) -> None:
        turn = self._receiving("audio", frame.turn_id)
        if frame.kind != turn.audio:
            raise BadMessage(f"{frame.kind} frame in a turn that announced {turn.audio} audio: send {turn.audio} "
                             "frames, as turn.start said")
        turn.take_audio(frame.payload)

    async def _on_audio_end(self, end: p.AudioEnd) -> None:
        turn = self._receiving("turn.audio_end", end.turn_id)
        turn.mark("audio_end_ms")
        self._begin(turn)

    def _receiving(self, what: str, turn_id: int) -> Turn:
        if turn_id != self.turn.turn_id:
            raise IllegalState(f"{what} for turn {turn_id} while receiving turn {self.turn.turn_id}: send it with "
                               f"turn_id {self.turn.turn_id}")
        return self.turn

    async def _on_text(self, message: p.TextTurn) -> None:
        self._claim_turn_id(message.turn_id)
        self._begin(Turn(message.turn_id, message.text))

    async def _on_confirm(self, confirm: p.TurnConfirm) -> None:
        self.pipeline.confirm(self._speculative_turn(confirm))

    async def _on_cancel(self, cancel: p.TurnCancel) -> None:
        turn = self._speculative_turn(cancel)
        await self.pipeline.cancel(turn)  # without a trace: nothing sent, no history, no turn metrics
        if self.turn is turn:
            self.turn = None
            self.state = SessionState.LISTENING

    def _speculative_turn(self, message: p.TurnConfirm | p.TurnCancel) -> Turn:
        turn = self.turn
        if message.turn_id != turn.turn_id or not turn.speculative:
            raise IllegalState(f"{_describe(message)} for turn {message.turn_id}, which is not an unconfirmed "
                               f"speculative turn (turn {turn.turn_id} is in progress)")
        return turn

    async def _on_barge_in(self, barge: p.BargeIn) -> None:
        if self.state in _IN_TURN:
            if self.turn.speculative:
                raise IllegalState(f"barge_in while turn {self.turn.turn_id} is speculative: send turn.cancel "
                                   "for it instead")
            if barge.turn_id != self.turn.turn_id:
                raise IllegalState(f"barge_in for turn {barge.turn_id} while in turn {self.turn.turn_id}: "
                                   f"send it with turn_id {self.turn.turn_id}")
            await self.pipeline.barge_in(self.turn, barge.played_ms)
            return
        last = self.last_turn
        if last is None or barge.turn_id != last.turn_id:
            raise IllegalState(f"barge_in for turn {barge.turn_id}, which is not the current or last turn: "
                               "send it with the turn_id of the reply that was playing")
        self.pipeline.barge_in_late(last, barge.played_ms)

    async def _on_bye(self, bye: p.Bye) -> None:
        await self.close()
        self.outbox.put_close(p.CLOSE_NORMAL)

    # ------------------------------------------------------------------------------------------------ the turn

    def _claim_turn_id(self, turn_id: int) -> None:
        if turn_id <= self._last_turn_id:
            raise BadMessage(f"turn_id {turn_id} is not greater than the previous one ({self._last_turn_id}): "
                             "turn ids increase within a session")
        self._last_turn_id = turn_id

    def _begin(self, turn: Turn) -> None:
        self.turn = turn
        self.state = SessionState.THINKING
        self.pipeline.start(turn)

    def turn_speaking(self) -> None:
        """The pipeline queued reply audio."""
        self.state = SessionState.SPEAKING

    def turn_ended(self, turn: Turn, reply: str) -> None:
        """The pipeline ended `turn` with `reply` (its `reply.done` is queued)."""
        if turn.kind == "llm":
            self.history.add(turn.text, reply)
        self.turn, self.last_turn = None, turn
        self.state = SessionState.LISTENING

    def _send(self, message: p.ServerMessage) -> None:
        self.outbox.put(Outbound(p.encode_message(message)))

    def _reject(self, error: ProtocolError, turn_id: int | None = None) -> None:
        """Answer a bad or illegal frame; too many in a row means the peer does not speak this protocol."""
        self._send(p.ErrorMessage(code=error.code, message=error.message, turn_id=turn_id))
        self._bad_frames += 1
        if self._bad_frames >= p.MAX_CONSECUTIVE_BAD_FRAMES and self.state is not SessionState.CLOSED:
            self.state = SessionState.CLOSED
            self.outbox.put_close(p.CLOSE_POLICY_VIOLATION)

    def _fatal(self, error: VoxlineError, close_code: int) -> None:
        self._send(p.ErrorMessage(code=error.code, message=error.message))
        self.state = SessionState.CLOSED
        self.outbox.put_close(close_code)

    async def abort_turn(self, error: TurnError) -> None:
        """Stop the turn in progress now and end it with `error` and the apology as its `reply.done` (the server
        is going away: the client must hear that the turn was cut, not lose it silently)."""
        if self.turn is not None:
            await self.pipeline.abort(self.turn, error)

    def end(self, error: VoxlineError, close_code: int) -> None:
        """Close from outside the protocol (idle timeout, server drain): `error`, then close with `close_code`;
        a turn in progress is dropped unanswered, so callers end turns first."""
        if self.state is not SessionState.CLOSED:
            self._fatal(error, close_code)


def _describe(message: object) -> str:
    tag = getattr(type(message), "__struct_config__", None)
    return f"`{tag.tag}`" if tag is not None and tag.tag else "an audio frame"
