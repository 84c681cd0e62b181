"""One user turn and the reply to it: what arrived, what was said back, and when each stage was reached."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from voxline.dialog import SpokenClause
from voxline.errors import BadMessage, LimitExceeded
from voxline.scheduler import Ticket
from voxline.server import protocol as p
from voxline.server.limits import TurnAudioBudget
from voxline.server.outbox import Outbound

MAX_PCM16_BYTES = p.MAX_PCM16_TURN_BYTES
"""Turn audio is bounded by duration and bytes together: see `TurnAudioBudget` (limits.py)."""


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
    """Set to stop the turn's LLM request at its next token (read by the generating thread)."""
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
    verdict_held: list[Outbound] | None = None
    """The chat runs beside the intent classifier, whose verdict is still out: what the chat would have sent, held
    back (None: no verdict pending). Released into `put` (and so into `held` while speculative) on "no command"."""
    verdict_end: tuple[str, bool] | None = None
    """The chat finished before the classifier's verdict: its reply text and whether it was interrupted."""
    deltas: int = 0
    """Reply deltas generated (about one token each): the work a cancelled speculative turn wasted."""
    ended_ms: float | None = None
    """When `reply.done` was queued (ms since `started`); None while the turn runs."""
    interrupted: bool = False
    first_audio_waiting: bool = False
    """The first reply audio frame is queued but neither sent nor dropped yet: the metrics wait for it."""
    observed: bool = False
    """The turn is in the metrics (and the trace)."""

    @classmethod
    def from_start(cls, start: p.TurnStart) -> Turn:
        """The turn a `turn.start` begins; `BadMessage` for one that cannot be served as sent."""
        if start.opus is not None:
            start.opus.description_bytes()  # a bad description is the client's error now, not an ASR failure later
        if start.speculative and (start.audio is not None or start.want_server_asr):
            raise BadMessage("turn.start: a speculative turn carries a confident transcript, no audio and no "
                             "want_server_asr: send it as an ordinary turn")
        return cls(start.turn_id, start.transcript, confidence=start.confidence, audio=start.audio,
                   want_server_asr=start.want_server_asr, opus=start.opus or p.OpusConfig(),
                   held=[] if start.speculative else None)

    @property
    def speculative(self) -> bool:
        """Started speculatively and not confirmed yet."""
        return self.held is not None

    def take_audio(self, payload: bytes) -> None:
        """Keep an uploaded audio frame; past the turn's audio budget, keep what fit and refuse the rest, saying so
        once (`LimitExceeded`): the first 30 s are still worth recognising."""
        if self.audio_overflow:
            return
        budget = self.audio_budget = self.audio_budget or TurnAudioBudget(self.audio)
        if not budget.take(payload):
            self.audio_overflow = True
            raise LimitExceeded(f"turn audio is over {p.MAX_TURN_AUDIO_SECONDS:g} s or {budget.max_bytes} bytes; "
                                "the rest is ignored (send turn.audio_end sooner)")
        self.chunks.append(payload)
        self.audio_bytes += len(payload)

    def mark_at(self, name: str, at: float) -> None:
        """Record `name` at perf_counter time `at` (a time taken on another thread)."""
        self.marks.setdefault(name, (at - self.started) * 1000.0)

    def mark(self, name: str) -> None:
        """Record `name` as milliseconds since the turn began (the first mark of a name wins)."""
        self.marks.setdefault(name, (time.perf_counter() - self.started) * 1000.0)
