"""How fast a session may send, and how long it may stay silent.

Text (JSON) frames and binary (audio) frames have separate token buckets: a page sends a handful of control
messages per turn, but a whole turn of 20 ms Opus packets at once when the server should re-recognise it. A frame
over budget is dropped unread; the first of a run of drops is answered with `error {code: "rate_limited"}`, and a
client that keeps sending regardless (`MAX_RATE_LIMITED_FRAMES` drops in a row) is closed with 1008.

Silence: a connection must say `hello` within `hello_timeout_s`; a listening session that sends nothing for
`idle_timeout_s` gets an `idle_timeout` warning and is closed (4408) after `idle_grace_s` more without a message.
A turn whose audio is still coming in is the client's to finish: with no frame for `audio_idle_timeout_s` it is
dropped and the connection closed (4408), so a `turn.start` followed by nothing holds no session slot. A session is
never idle while the server works on a turn (thinking, speaking), however long the reply takes.

Turn audio (`TurnAudioBudget`): at most `MAX_TURN_AUDIO_SECONDS` of audio, counted from each Opus packet's own
header (its TOC byte says how many milliseconds it holds) or from the PCM16 sample count, and at most
`MAX_OPUS_TURN_BYTES` / `MAX_PCM16_TURN_BYTES` bytes, whichever comes first.

Connections (`ConnectionGuard`, `uvicorn_options`): the HTTP layer below the app. A request must arrive whole within
`http_request_timeout_s`, an idle keep-alive connection goes after `http_keep_alive_timeout_s`, at most
`max_connections` are open at once, and forwarded client addresses are believed only from `forwarded_allow_ips`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from voxline.config import Settings
from voxline.server import protocol as p

log = logging.getLogger(__name__)


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
    audio_idle_timeout_s: float = 0.0
    """A turn receiving audio with no frame for this long is closed; 0 = never."""
    busy_until: float = 0.0
    """The last time it saw a turn in progress: silence counts from there too."""
    warned_at: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> IdleClock:
        return cls(settings.hello_timeout_s, settings.idle_timeout_s, settings.idle_grace_s,
                   settings.audio_idle_timeout_s)

    @property
    def poll_s(self) -> float:
        """How often to ask: a quarter of the shortest period (0 turns a period off), at most a second."""
        periods = (self.hello_timeout_s, self.idle_timeout_s, self.idle_grace_s, self.audio_idle_timeout_s)
        return min([1.0, *(period / 4 for period in periods if period > 0)])

    def check(self, state: str, budget: FrameBudget, now: float) -> Silence:
        """`state` is the session state's value ("handshake", "listening", ...)."""
        if state == "handshake":
            late = self.hello_timeout_s > 0 and now - budget.opened_at >= self.hello_timeout_s
            return Silence.CLOSE if late else Silence.FINE
        if state == "receiving_audio":
            # No warning: the turn cannot be resumed by a message other than its own frames. Silence counts from
            # the last frame (turn.start included), never from `busy_until`.
            self.busy_until, self.warned_at = now, None
            late = self.audio_idle_timeout_s > 0 and now - budget.last_frame_at >= self.audio_idle_timeout_s
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


# ---------------------------------------------------------------------------------------------- turn audio

OPUS_MAX_PACKET_MS = 120.0
"""RFC 6716 section 3.2.5: no Opus packet holds more than 120 ms. A packet whose header does not parse is counted
as this long, so a malformed header can only make the count too strict, never too lenient."""
_SILK_FRAME_MS = (10.0, 20.0, 40.0, 60.0)
_CELT_FRAME_MS = (2.5, 5.0, 10.0, 20.0)


def opus_packet_ms(packet: bytes) -> float:
    """The duration an Opus packet declares in its TOC byte (RFC 6716 section 3.1), without decoding it."""
    if not packet:
        return OPUS_MAX_PACKET_MS
    config, code = packet[0] >> 3, packet[0] & 0x03
    if config < 12:
        frame_ms = _SILK_FRAME_MS[config % 4]
    elif config < 16:
        frame_ms = 20.0 if config % 2 else 10.0
    else:
        frame_ms = _CELT_FRAME_MS[config % 4]
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    else:  # code 3: the frame count is the low 6 bits of the second byte
        frames = packet[1] & 0x3F if len(packet) > 1 else 0
    total = frames * frame_ms
    return total if 0 < total <= OPUS_MAX_PACKET_MS else OPUS_MAX_PACKET_MS


class TurnAudioBudget:
    """What one turn's uploaded audio may add up to: `MAX_TURN_AUDIO_SECONDS` and a byte bound per kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.max_bytes = p.MAX_OPUS_TURN_BYTES if kind == "opus" else p.MAX_PCM16_TURN_BYTES
        self.max_ms = p.MAX_TURN_AUDIO_SECONDS * 1000.0
        self.bytes = 0
        self.ms = 0.0

    def frame_ms(self, payload: bytes) -> float:
        if self.kind == "opus":
            return opus_packet_ms(payload)
        return len(payload) / 2 * 1000.0 / p.PCM16_UPLINK_RATE_HZ

    def take(self, payload: bytes) -> bool:
        """Count the frame in if it fits both bounds; False (and nothing counted) if it does not."""
        ms = self.frame_ms(payload)
        if self.bytes + len(payload) > self.max_bytes or self.ms + ms > self.max_ms + 1e-6:
            return False
        self.bytes += len(payload)
        self.ms += ms
        return True


# ---------------------------------------------------------------------------------------------- connections


class ConnectionGuard(HttpToolsProtocol):
    """uvicorn's HTTP protocol with what it lacks against slow and idle clients: a deadline for each request
    (head and body) and a cap on open connections. uvicorn's own keep-alive timeout only starts after a response,
    so a socket that never completes a request would otherwise stay open for ever.

    The deadline starts when the connection opens and again at the first byte of each later request; it ends when
    the request is complete (or upgraded to a WebSocket, which then has its own `hello` and idle limits).
    """

    request_timeout_s: float | None = None
    """Set per server by `uvicorn_options` on a subclass; None (this class, as `voxline serve --workers N` names it
    to its worker processes): read from the `VOXLINE_*` environment on first use."""
    max_connections: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        if self.request_timeout_s is None or self.max_connections is None:
            settings = Settings.from_env()
            type(self).request_timeout_s = settings.http_request_timeout_s
            type(self).max_connections = settings.max_connections
        super().connection_made(transport)
        if self.max_connections and len(self.connections) > self.max_connections:
            log.warning("refused a connection from %s: %d open, the cap is %d", self.client and self.client[0],
                        len(self.connections) - 1, self.max_connections)
            transport.abort()
            return
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None and self.request_timeout_s > 0:
            self._deadline = self.loop.call_later(self.request_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("closed a connection from %s: no whole request within %g s", self.client and self.client[0],
                     self.request_timeout_s)
            self.transport.abort()


def uvicorn_options(settings: Settings, *, worker_processes: bool = False) -> dict[str, object]:
    """The keyword arguments every Voxline server gives `uvicorn.run` / `uvicorn.Config` (besides host, port, app).

    `worker_processes`: for `uvicorn.run(..., workers=N)`, whose options must survive pickling; the guard then reads
    its limits from the `VOXLINE_*` environment the workers inherit.
    """
    guard: type[ConnectionGuard] | str = "voxline.server.limits:ConnectionGuard" if worker_processes else type(
        "ConfiguredConnectionGuard", (ConnectionGuard,),
        {"request_timeout_s": settings.http_request_timeout_s, "max_connections": settings.max_connections})
    proxies = settings.forwarded_allow_ips.strip()
    return {
        **p.UVICORN_WEBSOCKET_OPTIONS,
        "http": guard,
        "timeout_keep_alive": settings.http_keep_alive_timeout_s,
        "proxy_headers": bool(proxies),
        # uvicorn's own default trusts 127.0.0.1 (or $FORWARDED_ALLOW_IPS): a local client could claim any address.
        "forwarded_allow_ips": proxies or "",
    }
