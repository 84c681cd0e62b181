"""One `/ws` conversation as an explicit state machine, and the turn pipeline it drives.

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

A turn runs as its own task, so the session keeps reading the socket while it thinks and speaks: that is how a
barge-in can stop it. The pipeline inside a turn overlaps its stages: the LLM thread streams text deltas, the
clause splitter hands each finished clause to TTS (in a worker thread) while the model keeps writing, and each
synthesized clause goes to the socket as soon as it exists. Everything bound for the socket passes through one
`Outbox`, so frames keep their order and a barge-in can drop the reply audio that has not left yet.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

import numpy as np

from voxline.clauses import ClauseSplitter, speakable
from voxline.config import Settings
from voxline.dialog import DialogHistory, SpokenClause, heard_text
from voxline.errors import (
    ASRError,
    BadMessage,
    IllegalState,
    LimitExceeded,
    Overloaded,
    ProtocolError,
    SlowConsumer,
    TooManySessions,
    TTSError,
    TurnError,
    Unauthorized,
    UnsupportedLanguage,
    UnsupportedVersion,
    VoxlineError,
)
from voxline.intents import Grammar, GrammarError, Match, builtin_grammar
from voxline.llm import LLM, GenerationRequest
from voxline.scheduler import SchedulerConfig, Ticket, TurnScheduler
from voxline.server import protocol as p
from voxline.server.admission import Gate, Peer
from voxline.server.auth import SiteKey
from voxline.server.limits import TurnAudioBudget
from voxline.server.metrics import ServerMetrics
from voxline.server.resolver import IntentResolver
from voxline.server.intent_classifier import classifier_for
from voxline.server_asr import ServerASR, Transcription, decode_opus, decode_pcm16
from voxline.telemetry import StageSpan, Telemetry
from voxline.tts import Synthesizer, load_synthesizer, to_pcm16

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I could not answer that. Please try again."
"""The reply text when a model fails mid-turn; the `error` message beside it says what failed."""
BUSY_APOLOGY = "Sorry, I am busy right now. Please try again in a moment."
"""The reply text when the LLM queue is full (`overloaded`)."""
PHRASE_CACHE_ENTRIES = 256
"""Synthesized audio kept for fixed phrases (command confirmations, apologies): they repeat all day, and a refusal
under overload must not cost a synthesis."""
FIRST_CLAUSE_MAX_WORDS = 5
"""The first clause is cut after this many words (see `ClauseSplitter`): speech starts about one short phrase after
the first token, instead of one whole sentence (on a 2-core CPU, Qwen 0.5B writes ~20 tokens a second)."""
REPLY_FRAME_MS = 200
"""Reply audio is sent in frames of this length: small enough that a barge-in drops most of an unsent clause."""
MAX_PCM16_BYTES = p.MAX_PCM16_TURN_BYTES
"""Turn audio is bounded by duration and bytes together: see `TurnAudioBudget` (limits.py)."""


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


@dataclass
class Engines:
    """The models a server loads once and all its sessions share."""

    settings: Settings
    grammar: Grammar
    resolver: IntentResolver
    llm: LLM
    tts: Synthesizer
    asr: ServerASR
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    telemetry: Telemetry = field(default_factory=Telemetry)
    scheduler: TurnScheduler | None = None
    """Every LLM request goes through it; built from `settings` when not given."""
    phrases: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)
    """Synthesized fixed phrases, least recently used first (see `PHRASE_CACHE_ENTRIES`)."""

    def speak_phrase(self, text: str) -> np.ndarray:
        """`tts.synthesize(text)`, remembered: for phrases that repeat (confirmations, apologies). Thread-safe
        enough: two threads may synthesize the same phrase once each; the dict operations are atomic."""
        samples = self.phrases.get(text)
        if samples is None:
            samples = self.tts.synthesize(text)
            self.phrases[text] = samples
            while len(self.phrases) > PHRASE_CACHE_ENTRIES:
                self.phrases.popitem(last=False)
        return samples

    def __post_init__(self) -> None:
        if self.scheduler is None:
            self.scheduler = TurnScheduler(
                self.llm.generate, SchedulerConfig.from_settings(self.settings),
                on_batch=lambda b: self.metrics.observe_batch(b.lane, b.size, b.seconds),
                prompt_tokens=self.llm.prompt_tokens)

    @classmethod
    def load(cls, settings: Settings, model_dir: Callable[[str], object],
             on_loaded: Callable[[str], None] = lambda name: None, *,
             metrics: ServerMetrics | None = None, telemetry: Telemetry | None = None) -> Engines:
        """Load the LLM and TTS now (warmed up), the server ASR lazily; `on_loaded(name)` after each model."""
        grammar = builtin_grammar()
        llm = LLM(model_dir(settings.llm_model), threads=settings.llm_thread_count(),
                  parallel=settings.llm_parallel_count())
        llm.warm_up()
        on_loaded(settings.llm_model)
        tts = load_synthesizer(settings.tts_engine, model_dir(settings.tts_model))
        if settings.tts_engine == "hibari":
            on_loaded(settings.tts_model)
        asr = ServerASR(model_dir(settings.server_asr_model), on_loaded=lambda: on_loaded(settings.server_asr_model))
        engines = cls(settings, grammar, IntentResolver(grammar), llm, tts, asr,
                      metrics or ServerMetrics(), telemetry or Telemetry())
        # The intent classifier's static prompt and neighbour index warm up in the background from now, rather
        # than in the first turn the grammar misses.
        classifier_for(engines)
        return engines


@dataclass
class Outbound:
    """One frame waiting for the socket writer."""

    data: str | bytes | Callable[[], str]
    """A callable is encoded when it is sent (timings, which end with the send time of the first audio)."""
    audio_turn: int | None = None
    """The turn this reply audio belongs to (dropped if that turn is interrupted before it is sent)."""
    on_sent: Callable[[], None] | None = None
    close_code: int | None = None
    """Set on the last item: close the connection with this code after everything before it is sent."""


class Outbox:
    """The ordered queue between a session and its socket writer, bounded for a reader that falls behind.

    The slow-reader policy (docs/protocol.md): reply audio waiting beyond `max_audio_bytes` means the client does
    not keep up with the speech. That turn's unsent audio is dropped, the client gets `error {code:
    "slow_consumer"}`, and no more of the turn's audio is queued; its text still is, so `reply.done` comes as
    always. Anything waiting beyond `max_bytes` means the client does not read at all: the queue is emptied, nothing
    more is queued, and `on_overflow` is called (the connection is dropped). None: no bound.
    """

    def __init__(self, max_audio_bytes: int | None = None, max_bytes: int | None = None,
                 on_overflow: Callable[[], None] | None = None) -> None:
        self._items: deque[Outbound] = deque()
        self._ready = asyncio.Event()
        self.closing = False
        """A close was queued: the writer should be left to send what is before it."""
        self.max_audio_bytes = max_audio_bytes
        self.max_bytes = max_bytes
        self.on_overflow = on_overflow
        self.queued_bytes = 0
        self.queued_audio_bytes = 0
        self.starved_turn: int | None = None
        """The turn whose audio was dropped for a slow reader: its later audio is not queued either."""
        self.overflowed = False

    def put(self, item: Outbound) -> None:
        if self.overflowed:
            return
        size = _outbound_bytes(item)
        if item.audio_turn is not None:
            if item.audio_turn == self.starved_turn:
                return
            if self.max_audio_bytes is not None and self.queued_audio_bytes and (
                    self.queued_audio_bytes + size > self.max_audio_bytes):
                self._starve(item.audio_turn)
                return
        if self.max_bytes is not None and self.queued_bytes + size > self.max_bytes:
            self._overflow()
            return
        self.queued_bytes += size
        if item.audio_turn is not None:
            self.queued_audio_bytes += size
        self._items.append(item)
        self._ready.set()

    def _starve(self, turn_id: int) -> None:
        dropped = self.drop_audio(turn_id)
        self.starved_turn = turn_id
        log.warning("slow reader: dropped the reply audio of turn %s (%d frames unsent, over %d bytes waiting)",
                    turn_id, dropped, self.max_audio_bytes)
        self.put(Outbound(p.encode_message(p.ErrorMessage(
            code=SlowConsumer.code, turn_id=turn_id,
            message=f"the reply audio was not read fast enough ({self.max_audio_bytes} bytes waiting): the rest "
                    "of this turn's audio is dropped; its text still follows"))))

    def _overflow(self) -> None:
        log.warning("reader does not read: %d bytes waiting; dropping the connection", self.queued_bytes)
        self.overflowed = True
        self._items.clear()
        self.queued_bytes = self.queued_audio_bytes = 0
        if self.on_overflow is not None:
            self.on_overflow()

    def put_close(self, code: int) -> None:
        """Close the connection with `code` once everything queued so far is sent; later items are never sent."""
        if not self.closing:
            self.closing = True
            self.put(Outbound("", close_code=code))

    async def get(self) -> Outbound:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        size = _outbound_bytes(item)
        self.queued_bytes -= size
        if item.audio_turn is not None:
            self.queued_audio_bytes -= size
        return item

    def drop_audio(self, turn_id: int) -> int:
        """Remove the queued reply audio of a turn; returns how many frames never left."""
        kept = deque(i for i in self._items if i.audio_turn != turn_id)
        dropped = len(self._items) - len(kept)
        freed = sum(_outbound_bytes(i) for i in self._items if i.audio_turn == turn_id)
        self._items = kept
        self.queued_bytes -= freed
        self.queued_audio_bytes -= freed
        return dropped


OUTBOUND_ENCODED_LATER_BYTES = 512
"""What a frame encoded only when it is sent (`timings`) is counted as while it waits."""


def _outbound_bytes(item: Outbound) -> int:
    return OUTBOUND_ENCODED_LATER_BYTES if callable(item.data) else len(item.data)


@dataclass
class Turn:
    """One user turn and the reply to it, from its first message until `reply.done`."""

    turn_id: int
    text: str
    started: float = field(default_factory=time.perf_counter)
    started_ns: int = field(default_factory=time.time_ns)
    """Wall clock of `started`, for trace spans."""
    confidence: float | None = None
    audio: p.AudioKind | None = None
    want_server_asr: bool = False
    opus: p.OpusConfig | None = None
    chunks: list[bytes] = field(default_factory=list)
    audio_bytes: int = 0
    audio_budget: TurnAudioBudget | None = None
    """How much of `MAX_TURN_AUDIO_SECONDS` (and of its byte bound) the uploaded audio has used."""
    audio_overflow: bool = False
    kind: str | None = None
    """"llm" once the LLM is asked, "intent" when the grammar answered; None before either."""
    reply_text: str = ""
    clauses: list[SpokenClause] = field(default_factory=list)
    """Each clause whose audio was queued, in order, with its duration: what `played_ms` is measured against."""
    audio_frames: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task | None = None
    marks: dict[str, float] = field(default_factory=dict)
    llm_tokens: int | None = None
    ticket: Ticket | None = None
    """The turn's LLM request in the scheduler: its queueing and batch."""
    error: str | None = None
    """The error code the turn failed with."""
    held: list[Outbound] | None = None
    """A speculative turn not yet confirmed: what it would have sent, held back (None: frames go out at once)."""
    held_end: tuple[str, bool] | None = None
    """A speculative turn that finished before its confirmation: its reply text and whether it was interrupted."""
    deltas: int = 0
    """Reply deltas generated (about one token each): the work a cancelled speculative turn wasted."""

    @property
    def speculative(self) -> bool:
        """Started speculatively and not confirmed yet."""
        return self.held is not None

    def mark_at(self, name: str, at: float) -> None:
        """Record `name` at perf_counter time `at` (a time taken on another thread)."""
        self.marks.setdefault(name, (at - self.started) * 1000.0)

    def mark(self, name: str) -> None:
        """Record `name` as milliseconds since the turn began (the first mark of a name wins)."""
        self.marks.setdefault(name, (time.perf_counter() - self.started) * 1000.0)


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
        self.turns = 0
        self.span = None
        """The conversation's trace span (None when tracing is off)."""
        self.turn: Turn | None = None
        """The turn in progress (RECEIVING_AUDIO, THINKING, SPEAKING)."""
        self.last_turn: Turn | None = None
        """The turn that ended last: a barge-in may still arrive for it while the page plays its tail."""
        self._last_turn_id = -1
        self._bad_frames = 0
        self._handlers = {
            p.Hello: self._on_hello,
            p.TurnStart: self._on_turn_start,
            p.AudioFrame: self._on_audio_frame,
            p.AudioEnd: self._on_audio_end,
            p.BargeIn: self._on_barge_in,
            p.TurnConfirm: self._on_confirm,
            p.TurnCancel: self._on_cancel,
            p.TextTurn: self._on_text,
            p.Bye: self._on_bye,
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
        return {
            _S.HANDSHAKE: "send hello first",
            _S.LISTENING: "start a turn with turn.start or text first",
            _S.RECEIVING_AUDIO: f"finish turn {turn} with turn.audio_end, or drop it with barge_in",
            _S.THINKING: f"wait for turn {turn}'s reply.done, or send barge_in for it first",
            _S.SPEAKING: f"wait for turn {turn}'s reply.done, or send barge_in for it first",
            _S.CLOSED: "the session is over: open a new connection",
        }[self.state]

    async def close(self) -> None:
        """The connection is gone or closing: stop the turn in progress, without answering it."""
        turn, self.turn = self.turn, None
        self.state = SessionState.CLOSED
        if turn is not None:
            await _stop(turn, self.engines.scheduler)
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
                "max_text_chars": p.MAX_TEXT_CHARS,
                "max_turn_audio_s": p.MAX_TURN_AUDIO_SECONDS,
                "max_opus_turn_bytes": p.MAX_OPUS_TURN_BYTES,
                "max_pcm16_turn_bytes": p.MAX_PCM16_TURN_BYTES,
                "max_text_frame_bytes": p.MAX_TEXT_FRAME_BYTES,
                "asr_confidence_gate": self.settings.asr_confidence_gate,
                "reply_max_tokens": self.settings.reply_max_tokens,
                "reply_max_seconds": self.settings.reply_max_seconds,
                "max_frame_bytes": p.MAX_FRAME_BYTES,
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
        if start.opus is not None:
            start.opus.description_bytes()  # a bad description is the client's error now, not an ASR failure later
        if start.speculative and (start.audio is not None or start.want_server_asr):
            raise BadMessage("turn.start: a speculative turn carries a confident transcript, no audio and no "
                             "want_server_asr: send it as an ordinary turn")
        turn = Turn(start.turn_id, start.transcript, confidence=start.confidence, audio=start.audio,
                    want_server_asr=start.want_server_asr, opus=start.opus or p.OpusConfig(),
                    held=[] if start.speculative else None)
        if start.audio is None:
            self._begin(turn)
        else:
            self.turn = turn
            self.state = SessionState.RECEIVING_AUDIO

    async def _on_audio_frame(self, frame: p.AudioFrame) -> None:
        turn = self.turn
        if frame.turn_id != turn.turn_id:
            raise IllegalState(f"audio for turn {frame.turn_id} while receiving turn {turn.turn_id}: send it with "
                               f"turn_id {turn.turn_id}")
        if frame.kind != turn.audio:
            raise BadMessage(f"{frame.kind} frame in a turn that announced {turn.audio} audio: send {turn.audio} "
                             "frames, as turn.start said")
        if turn.audio_overflow:
            return
        budget = turn.audio_budget = turn.audio_budget or TurnAudioBudget(turn.audio)
        if not budget.take(frame.payload):
            # Keep what fits and go on: the first 30 s are still worth recognising; say so once.
            turn.audio_overflow = True
            raise LimitExceeded(f"turn audio is over {p.MAX_TURN_AUDIO_SECONDS:g} s or {budget.max_bytes} bytes; "
                                "the rest is ignored (send turn.audio_end sooner)")
        turn.chunks.append(frame.payload)
        turn.audio_bytes += len(frame.payload)

    async def _on_audio_end(self, end: p.AudioEnd) -> None:
        if end.turn_id != self.turn.turn_id:
            raise IllegalState(f"turn.audio_end for turn {end.turn_id} while receiving turn {self.turn.turn_id}: "
                               f"send it with turn_id {self.turn.turn_id}")
        self.turn.mark("audio_end_ms")
        self._begin(self.turn)

    async def _on_text(self, message: p.TextTurn) -> None:
        self._claim_turn_id(message.turn_id)
        self._begin(Turn(message.turn_id, message.text))

    async def _on_confirm(self, confirm: p.TurnConfirm) -> None:
        turn = self._speculative_turn(confirm)
        turn.mark("confirmed_ms")
        if turn.ticket is not None:
            self.engines.scheduler.confirm(turn.ticket)
        held, turn.held = turn.held, None
        for item in held:
            self.outbox.put(item)
        self.engines.metrics.speculation("confirmed")
        if turn.held_end is not None:
            reply, interrupted = turn.held_end
            self._finish(turn, reply, interrupted=interrupted)

    async def _on_cancel(self, cancel: p.TurnCancel) -> None:
        turn = self._speculative_turn(cancel)
        await _stop(turn, self.engines.scheduler)
        self._drop_speculative(turn)

    def _speculative_turn(self, message: p.TurnConfirm | p.TurnCancel) -> Turn:
        turn = self.turn
        if message.turn_id != turn.turn_id or not turn.speculative:
            raise IllegalState(f"{_describe(message)} for turn {message.turn_id}, which is not an unconfirmed "
                               f"speculative turn (turn {turn.turn_id} is in progress)")
        return turn

    def _drop_speculative(self, turn: Turn) -> None:
        """End an unconfirmed speculative turn without a trace: nothing sent, no history, no turn metrics."""
        self.engines.metrics.speculation("cancelled", turn.deltas)
        turn.held = None
        if self.turn is turn:
            self.turn = None
            self.state = SessionState.LISTENING

    async def _on_barge_in(self, barge: p.BargeIn) -> None:
        if self.state in _IN_TURN:
            if self.turn.speculative:
                raise IllegalState(f"barge_in while turn {self.turn.turn_id} is speculative: send turn.cancel "
                                   "for it instead")
            if barge.turn_id != self.turn.turn_id:
                raise IllegalState(f"barge_in for turn {barge.turn_id} while in turn {self.turn.turn_id}: "
                                   f"send it with turn_id {self.turn.turn_id}")
            await self._interrupt(self.turn, barge.played_ms)
            return
        last = self.last_turn
        if last is None or barge.turn_id != last.turn_id:
            raise IllegalState(f"barge_in for turn {barge.turn_id}, which is not the current or last turn: "
                               "send it with the turn_id of the reply that was playing")
        # The reply was fully sent but the page was still playing it: the turn is over (its reply.done went out),
        # yet the history must forget what the user never heard.
        if last.kind == "llm" and self.history.exchanges:
            heard = heard_text(last.clauses, barge.played_ms)
            if heard != self.history.exchanges[-1].assistant:
                self.history.amend_last(heard)

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
        turn.task = asyncio.create_task(self._run(turn), name=f"voxline-turn-{self.id}-{turn.turn_id}")

    async def _run(self, turn: Turn) -> None:
        try:
            if self.refusal is not None:
                raise self.refusal
            text = turn.text
            if turn.audio is not None and turn.chunks and self._needs_server_asr(turn):
                heard = await self._recognise(turn)
                if heard.text and not heard.reliable:
                    # Neither a command nor a question to the LLM: what it would act on is likely not what was said.
                    raise ASRError(f"did not catch that: the server heard {heard.text!r} but is unsure of it "
                                   f"(confidence {heard.confidence:.2f}{', a decoding loop' if heard.garbled else ''})"
                                   "; please say it again")
                text = heard.text or text
            turn.text = text.strip()
            if not turn.text:
                self._finish(turn, "")
                return
            match = self.engines.resolver.resolve(turn.text, self.lang).match
            turn.mark("intent_ms")
            classifier = classifier_for(self.engines) if match is None else None
            if classifier is not None:  # the grammar missed: is it still one of the intents?
                verdict = await asyncio.to_thread(classifier.classify, turn.text, self.lang)
                turn.mark("classify_ms")
                match = verdict.match
            if match is not None:
                await self._answer_command(turn, match)
            else:
                await self._answer_with_llm(turn)
        except asyncio.CancelledError:
            raise
        except VoxlineError as exc:
            await self._fail(turn, exc)
        except Exception as exc:  # a bug must not kill the session: the client still gets its turn closed
            log.exception("turn %s of session %s failed", turn.turn_id, self.id)
            await self._fail(turn, TurnError(f"internal error ({exc}); please try again"))

    def _needs_server_asr(self, turn: Turn) -> bool:
        return turn.want_server_asr or (turn.confidence or 0.0) < self.settings.asr_confidence_gate

    async def _recognise(self, turn: Turn) -> Transcription:
        def work() -> Transcription:
            if turn.audio == "opus":
                samples = decode_opus(turn.chunks, channels=turn.opus.channels,
                                      description=turn.opus.description_bytes())
            else:
                samples = decode_pcm16(turn.chunks)
            return self.engines.asr.transcribe(samples, self.lang)

        heard = await asyncio.to_thread(work)
        turn.mark("asr_ms")
        if heard.text:
            self._send(p.Transcript(turn_id=turn.turn_id, text=heard.text, confidence=round(heard.confidence, 3)),
                       turn)
        return heard

    async def _answer_command(self, turn: Turn, match: Match) -> None:
        turn.kind = "intent"
        self._send(p.IntentMessage(
            turn_id=turn.turn_id, intent=match.intent, slots=dict(match.slots), text=match.text,
            confirmation=match.confirmation, grammar_version=self.engines.grammar.version,
        ), turn)
        if match.confirmation:
            turn.reply_text = match.confirmation
            await self._speak_clause(turn, match.confirmation, phrase=True)
        self._finish(turn, match.confirmation or "")

    async def _answer_with_llm(self, turn: Turn) -> None:
        turn.kind = "llm"
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str | None] = asyncio.Queue()
        request = GenerationRequest(
            self.history.messages(turn.text),
            on_text=lambda d: loop.call_soon_threadsafe(deltas.put_nowait, d),
            max_tokens=self.settings.reply_max_tokens,
            max_seconds=self.settings.reply_max_seconds,
            cancel=turn.cancel,
        )
        scheduler = self.engines.scheduler
        try:
            turn.ticket = scheduler.submit(request, confidence=turn.confidence, tier=self.tier, session_id=self.id,
                                           speculative=turn.speculative)
        except Overloaded:
            self.engines.metrics.reject("overloaded")
            raise
        turn.mark_at("llm_queued_ms", turn.ticket.queued_at)
        generation = asyncio.wrap_future(turn.ticket.future)
        # Runs after every delta the thread scheduled (same loop queue, scheduled later): None marks the end.
        generation.add_done_callback(lambda _: deltas.put_nowait(None))
        clauses: asyncio.Queue[str | None] = asyncio.Queue()
        speaker = asyncio.create_task(self._speak_clauses(turn, clauses))
        splitter = ClauseSplitter(first_clause_max_words=FIRST_CLAUSE_MAX_WORDS)
        try:
            while (delta := await deltas.get()) is not None:
                turn.mark("llm_first_token_ms")
                turn.reply_text += delta
                turn.deltas += 1
                self._send(p.ReplyDelta(turn_id=turn.turn_id, text=delta), turn)
                for clause in splitter.feed(delta):
                    turn.mark("first_clause_ms")
                    clauses.put_nowait(clause)
                if speaker.done():
                    speaker.result()  # TTS failed: raise its error now rather than after the whole reply
            result = await generation
            turn.marks["llm_ms"] = result.elapsed_s * 1000.0
            turn.llm_tokens = result.tokens
            for clause in splitter.flush():
                turn.mark("first_clause_ms")
                clauses.put_nowait(clause)
            clauses.put_nowait(None)
            await speaker
        finally:
            turn.cancel.set()  # stops its request at the next token if it is still running
            scheduler.withdraw(turn.ticket)  # or takes it out of the queue if it never started
            speaker.cancel()
            generation.add_done_callback(_consume_exception)
        self._finish(turn, turn.reply_text.strip())

    async def _speak_clauses(self, turn: Turn, clauses: asyncio.Queue[str | None]) -> None:
        while (clause := await clauses.get()) is not None:
            await self._speak_clause(turn, clause)

    async def _speak_clause(self, turn: Turn, clause: str, *, phrase: bool = False) -> None:
        """Synthesize one clause and queue its audio; `phrase`: a fixed phrase, synthesized once per server."""
        text = speakable(clause)
        if not text or not self.capabilities.reply_audio:
            return
        engines = self.engines
        if phrase and text in engines.phrases:
            samples = engines.speak_phrase(text)  # no thread hop for a cached phrase
        else:
            samples = await asyncio.to_thread(engines.speak_phrase if phrase else engines.tts.synthesize, text)
        if samples.size == 0:
            return  # nothing pronounceable (an emoji): no frames, and no clause for played_ms to count
        turn.mark("tts_first_audio_ms")
        turn.marks["tts_done_ms"] = (time.perf_counter() - turn.started) * 1000.0
        self._queue_audio(turn, text, samples)

    def _queue_audio(self, turn: Turn, text: str, samples: np.ndarray) -> None:
        self.state = SessionState.SPEAKING
        index = len(turn.clauses)
        turn.clauses.append(SpokenClause(text, samples.size * 1000.0 / self.engines.tts.sample_rate))
        pcm = to_pcm16(samples)
        step = p.REPLY_AUDIO_RATE_HZ * REPLY_FRAME_MS // 1000 * 2
        for offset in range(0, len(pcm), step):
            seq = turn.audio_frames
            turn.audio_frames += 1
            frame = p.encode_reply_audio(turn.turn_id, seq, index, pcm[offset:offset + step],
                                         clause_end=offset + step >= len(pcm))
            on_sent = (lambda: turn.mark("first_audio_sent_ms")) if seq == 0 else None
            self._put(Outbound(frame, audio_turn=turn.turn_id, on_sent=on_sent), turn)

    # ------------------------------------------------------------------------------------------------ endings

    def _finish(self, turn: Turn, reply: str, *, interrupted: bool = False) -> None:
        """Close the turn: history, reply.done, timings, back to LISTENING (all in one step: no await).
        A speculative turn not yet confirmed stays open, its ending kept for `turn.confirm`."""
        if turn.speculative:
            turn.held_end = (reply, interrupted)
            return
        if turn.kind == "llm":
            self.history.add(turn.text, reply)
        self._send(p.ReplyDone(turn_id=turn.turn_id, text=reply, interrupted=interrupted), turn)
        self._put(Outbound(lambda: self._timings(turn, interrupted)), turn)
        turn.chunks = []  # its audio is spent: `last_turn` outlives the turn, the uploaded audio must not
        self.turn, self.last_turn = None, turn
        self.state = SessionState.LISTENING

    async def _fail(self, turn: Turn, error: VoxlineError) -> None:
        """End a failed turn: the `error`, then the apology as its reply, spoken too unless speech itself failed."""
        log.warning("turn %s of session %s: %s: %s", turn.turn_id, self.id, error.code, error.message)
        turn.error = error.code
        turn.kind = None  # a failed exchange stays out of the history: the model would imitate its broken reply
        self._send(p.ErrorMessage(code=error.code, message=error.message, turn_id=turn.turn_id,
                                  retry_after_ms=getattr(error, "retry_after_ms", None)), turn)
        apology = BUSY_APOLOGY if isinstance(error, Overloaded) else APOLOGY
        if not isinstance(error, TTSError):
            try:
                await self._speak_clause(turn, apology, phrase=True)
            except Exception:  # the apology stays text-only; the turn must still end
                log.warning("turn %s of session %s: the apology could not be spoken", turn.turn_id, self.id)
        self._finish(turn, apology)

    async def _interrupt(self, turn: Turn, played_ms: float) -> None:
        await _stop(turn, self.engines.scheduler)
        dropped = self.outbox.drop_audio(turn.turn_id)
        heard = heard_text(turn.clauses, played_ms)
        log.info("turn %s of session %s interrupted at %.0f ms (%d frames unsent)",
                 turn.turn_id, self.id, played_ms, dropped)
        self._finish(turn, heard, interrupted=True)

    def _timings(self, turn: Turn, interrupted: bool) -> str:
        """The `timings` message, encoded as it is sent (after the first audio went out); also records the turn
        in the metrics and the trace."""
        marks = turn.marks
        total_ms = (time.perf_counter() - turn.started) * 1000.0
        ticket = turn.ticket
        if ticket is not None and ticket.dispatched_at is not None:
            turn.mark_at("llm_batch_ms", ticket.dispatched_at)
        stages = first_audio_stages(marks)
        timings = p.Timings(
            turn_id=turn.turn_id, interrupted=interrupted, llm_tokens=turn.llm_tokens,
            total_ms=round(total_ms, 1),
            batch_size=ticket.batch_size if ticket else None, lane=ticket.lane.name if ticket else None,
            stages={k: round(v, 1) for k, v in stages.items()} or None,
            **{k: round(marks[k], 1) for k in _TIMING_MARKS if k in marks},
        )
        encoded = p.encode_message(timings)
        log.debug("session %s turn timings %s", self.id, encoded)
        self._observe(turn, interrupted, total_ms, stages)
        return encoded

    def _observe(self, turn: Turn, interrupted: bool, total_ms: float, stages: dict[str, float]) -> None:
        kind = turn.kind or ("failed" if turn.error else "empty")
        outcome = "failed" if turn.error else "interrupted" if interrupted else "ok"
        first_audio = turn.marks.get("first_audio_sent_ms")
        if first_audio is not None and "confirmed_ms" in turn.marks:  # the user waited from the confirmation on
            first_audio = max(first_audio - turn.marks["confirmed_ms"], 0.0)
        self.engines.metrics.observe_turn(
            kind=kind, outcome=outcome, total_ms=total_ms, first_audio_ms=first_audio, stages=stages,
            describe=lambda: f"{turn.turn_id} of session {self.id}")
        telemetry = self.engines.telemetry
        if telemetry.enabled:
            self.turns += 1
            telemetry.record_turn(
                self.span, number=self.turns, started_ns=turn.started_ns, duration_ms=total_ms, turn_type=kind,
                interrupted=interrupted, error=turn.error, stages=self._stage_spans(turn),
                attributes={"voxline.turn_id": turn.turn_id, "voxline.session_id": self.id})

    def _stage_spans(self, turn: Turn) -> list[StageSpan]:
        """The asr / intent / llm / tts spans of a finished turn, from its marks."""
        m, spans = turn.marks, []
        begin = m.get("audio_end_ms", 0.0)
        if "asr_ms" in m:
            spans.append(StageSpan("asr", begin, m["asr_ms"], m["asr_ms"] - begin,
                                   {"gen_ai.request.model": self.engines.asr.folder.name}))
            begin = m["asr_ms"]
        if "intent_ms" in m:
            spans.append(StageSpan("intent", begin, m["intent_ms"], attributes={"voxline.intent": turn.kind == "intent"}))
        ticket = turn.ticket
        if "llm_queued_ms" in m:
            end = m.get("llm_batch_ms", m["llm_queued_ms"]) + m.get("llm_ms", 0.0)
            attributes = {"gen_ai.system": "ctranslate2", "gen_ai.operation.name": "chat",
                          "gen_ai.request.model": self.engines.llm.name,
                          "gen_ai.usage.output_tokens": turn.llm_tokens or 0,
                          "voxline.lane": ticket.lane.name, "voxline.batch_size": ticket.batch_size or 0,
                          "voxline.queue_ms": ticket.queue_ms or 0.0}
            ttfb = m["llm_first_token_ms"] - m["llm_queued_ms"] if "llm_first_token_ms" in m else None
            spans.append(StageSpan("llm", m["llm_queued_ms"], end, ttfb, attributes))
        if "tts_first_audio_ms" in m:
            start = m.get("first_clause_ms", m.get("intent_ms", 0.0))
            spans.append(StageSpan("tts", start, m.get("tts_done_ms", m["tts_first_audio_ms"]),
                                   m["tts_first_audio_ms"] - start, {"gen_ai.request.model": self.engines.tts.name}))
        return spans

    # ------------------------------------------------------------------------------------------------ sending

    def _send(self, message: p.ServerMessage, turn: Turn | None = None) -> None:
        self._put(Outbound(p.encode_message(message)), turn)

    def _put(self, item: Outbound, turn: Turn | None = None) -> None:
        """Queue a frame of `turn` (None: of the session) for the client, or hold it while the turn is speculative."""
        if turn is not None and turn.held is not None:
            turn.held.append(item)
        else:
            self.outbox.put(item)

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
        turn = self.turn
        if turn is None:
            return
        await _stop(turn, self.engines.scheduler)
        if self.turn is turn:
            await self._fail(turn, error)  # a speculative turn's is held: the client hears it if it confirms

    def end(self, error: VoxlineError, close_code: int) -> None:
        """Close from outside the protocol (idle timeout, server drain): `error`, then close with `close_code`;
        a turn in progress is dropped unanswered, so callers end turns first."""
        if self.state is not SessionState.CLOSED:
            self._fatal(error, close_code)


_TIMING_MARKS = ("asr_ms", "intent_ms", "classify_ms", "llm_first_token_ms", "first_clause_ms", "tts_first_audio_ms",
                 "first_audio_sent_ms", "llm_ms", "llm_queued_ms", "llm_batch_ms", "confirmed_ms")
_STAGE_ENDS = (("uplink", "audio_end_ms"), ("asr", "asr_ms"), ("intent", "intent_ms"), ("classify", "classify_ms"),
               ("queue", "llm_batch_ms"),
               ("prefill", "llm_first_token_ms"), ("decode", "first_clause_ms"), ("tts", "tts_first_audio_ms"),
               ("transport", "first_audio_sent_ms"))
"""Each stage of the path to the first reply audio and the mark that ends it; it starts where the previous
present mark ends (a stage whose mark is absent did not happen, and its neighbour takes the gap)."""


def first_audio_stages(marks: dict[str, float]) -> dict[str, float]:
    """Stage durations (ms) from a turn's marks; they add up to the last mark reached (the first audio sent)."""
    stages, previous = {}, 0.0
    for stage, mark in _STAGE_ENDS:
        if mark in marks:
            stages[stage] = max(marks[mark] - previous, 0.0)
            previous = max(marks[mark], previous)
    return stages


async def _stop(turn: Turn, scheduler: TurnScheduler | None = None) -> None:
    """Cancel a turn's generation and synthesis and wait until its task has unwound."""
    turn.cancel.set()
    if scheduler is not None and turn.ticket is not None:
        scheduler.withdraw(turn.ticket)
    task = turn.task
    if task is not None and not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def _consume_exception(future: asyncio.Future) -> None:
    """Retrieve the result of a generation nobody waits for any more (after a cancel), so asyncio does not warn."""
    if not future.cancelled():
        future.exception()


def _describe(message: object) -> str:
    tag = getattr(type(message), "__struct_config__", None)
    return f"`{tag.tag}`" if tag is not None and tag.tag else "an audio frame"
