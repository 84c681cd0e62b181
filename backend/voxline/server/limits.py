"""How fast a session may send, and how long it may stay silent.

Text (JSON) frames and binary (audio) frames have separate token buckets: a page sends a handful of control
messages per turn, but a whole turn of 20 ms Opus packets at once when the server should re-recognise it. A frame
over budget is dropped unread; the first of a run of drops is answered with `error {code: "rate_limited"}`, and a
client that keeps sending regardless (`MAX_RATE_LIMITED_FRAMES` drops in a row) is closed with 1008.

Silence: a connection must say `hello` within `hello_timeout_s`; a listening session that sends nothing for
`idle_timeout_s` gets an `idle_timeout` warning and is closed (4408) after `idle_grace_s` more without a message.
A session is never idle while a turn is in progress, however long the reply takes.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

from voxline.config import Settings
from voxline.server import protocol as p


class TokenBucket:
    """`rate_per_s` tokens a second, at most `burst` saved up; each admitted event takes one."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        """Admit one event if a token is left."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        """How long until the next token (0 when one is there)."""
        return max(0.0, (1.0 - self._tokens) / self.rate_per_s)


class Verdict(enum.Enum):
    PASS = "pass"
    """Hand the frame to the session."""
    DROP_AND_WARN = "drop_and_warn"
    """Drop it and send `rate_limited` (the first drop of a run)."""
    DROP = "drop"
    """Drop it quietly (the client was already told)."""
    CLOSE = "close"
    """The client ignores `rate_limited`: close with `CLOSE_POLICY_VIOLATION`."""


class FrameBudget:
    """The inbound rate limit of one connection, and when it last sent anything."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.text = _bucket(settings.max_messages_per_s, settings.max_message_burst, clock)
        self.audio = _bucket(settings.max_audio_frames_per_s, settings.max_audio_frame_burst, clock)
        self._clock = clock
        self.opened_at = clock()
        self.last_frame_at = self.opened_at
        """Any frame counts, admitted or not: the client is there."""
        self.dropped_in_a_row = 0

    def admit(self, binary: bool) -> Verdict:
        self.last_frame_at = self._clock()
        bucket = self.audio if binary else self.text
        if bucket is None or bucket.take():
            self.dropped_in_a_row = 0
            return Verdict.PASS
        self.dropped_in_a_row += 1
        if self.dropped_in_a_row >= p.MAX_RATE_LIMITED_FRAMES:
            return Verdict.CLOSE
        return Verdict.DROP_AND_WARN if self.dropped_in_a_row == 1 else Verdict.DROP

    def retry_after_ms(self, binary: bool) -> int:
        bucket = self.audio if binary else self.text
        return max(1, round(bucket.wait_s() * 1000)) if bucket is not None else 1


def _bucket(rate_per_s: float, burst: int, clock: Callable[[], float]) -> TokenBucket | None:
    """A setting of 0 (rate or burst) means no limit."""
    return TokenBucket(rate_per_s, burst, clock) if rate_per_s > 0 and burst > 0 else None


class Silence(enum.Enum):
    FINE = "fine"
    WARN = "warn"
    """Listening and silent for `idle_timeout_s`: send the `idle_timeout` warning."""
    CLOSE = "close"
    """No `hello` in time, or still silent `idle_grace_s` after the warning: close with 4408."""


@dataclass
class IdleClock:
    """Decides, each time it is asked, whether a session has been silent too long."""

    hello_timeout_s: float
    idle_timeout_s: float
    idle_grace_s: float
    busy_until: float = 0.0
    """The last time it saw a turn in progress: silence counts from there too."""
    warned_at: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> IdleClock:
        return cls(settings.hello_timeout_s, settings.idle_timeout_s, settings.idle_grace_s)

    @property
    def poll_s(self) -> float:
        """How often to ask: a quarter of the shortest period (0 turns a period off), at most a second."""
        periods = (self.hello_timeout_s, self.idle_timeout_s, self.idle_grace_s)
        return min([1.0, *(period / 4 for period in periods if period > 0)])

    def check(self, state: str, budget: FrameBudget, now: float) -> Silence:
        """`state` is the session state's value ("handshake", "listening", ...)."""
        if state == "handshake":
            late = self.hello_timeout_s > 0 and now - budget.opened_at >= self.hello_timeout_s
            return Silence.CLOSE if late else Silence.FINE
        if state != "listening" or self.idle_timeout_s <= 0:
            self.busy_until, self.warned_at = now, None
            return Silence.FINE
        quiet_since = max(budget.last_frame_at, self.busy_until)
        if self.warned_at is not None and quiet_since > self.warned_at:
            self.warned_at = None  # the client spoke after the warning
        if self.warned_at is None:
            if now - quiet_since >= self.idle_timeout_s:
                self.warned_at = now
                return Silence.WARN
            return Silence.FINE
        return Silence.CLOSE if now - self.warned_at >= self.idle_grace_s else Silence.FINE
