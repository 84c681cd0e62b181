"""`voxline bench load`: many concurrent sessions over real WebSockets against a running server, load ramped.

Each simulated user is one `/ws` connection in a closed loop: one turn, wait for its `timings` (the last message of
every turn), think for `--think-ms`, next turn. Load is the number of such users. Every level of `--sessions` starts
with a warm-up whose turns are not counted, then a measurement window; a turn counts in the window it finished in.

The report: throughput, P50/P95/P99 of the client-measured latencies and of every server stage, errors by code,
the knee of the P95-against-load curve, and for the turns above the P99, which stage made them slow. With
`--duration` one level runs for that long (a soak) and the first and last windows are compared, with the server's
RSS along the way.

Without `--url` the bench starts its own `voxline serve` (two with `--compare-batching`: batching on and off, run
level by level alternately, so both see the machine in the same state), knows its PID and stops it at the end.
That server has the per-address and per-session abuse limits lifted (`OWN_SERVER_ENV`); a server given by `--url`
keeps its own, so past its sessions-per-address cap the report shows `too_many_sessions`, and each session paces
its frames to the rates its `welcome` announces (`paced_s` says when that, not the server, bounded throughput).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from voxline.bench.stats import ratio, summary
from voxline.errors import VoxlineError
from voxline.server import protocol as p
from voxline.server.timings import STAGE_ENDS, STAGES
from voxline.stats import percentile

QUESTIONS = [  # typed turns; `voxline bench turn` asks them too
    "What is the capital of France?", "How far away is the moon?", "Why is the sky blue?",
    "Who wrote Romeo and Juliet?", "What should I cook tonight?", "How many legs does a spider have?",
    "Tell me a fun fact about octopuses.", "What is the tallest mountain in the world?", "How do I boil an egg?",
    "What year did people first land on the moon?", "Why do cats purr?", "What is the speed of light?",
    "How do airplanes fly?", "What is a good name for a dog?", "Why do leaves change colour in autumn?",
    "How long does it take to walk a mile?", "What is the largest ocean?", "Can you recommend a short book?",
    "How does a rainbow form?", "What is the boiling point of water?", "Why is the ocean salty?",
    "How many planets are in the solar system?",
]
DEFAULT_LLM = "smollm2-135m-instruct-ct2"
DEFAULT_SESSIONS = "1,2,4,8,16"
DEFAULT_MIX = "llm=1,intent=0,audio=0"
DEFAULT_CONFIDENCE = "0.95"
DEFAULT_LEVEL_SECONDS = 20.0
DEFAULT_WARMUP_SECONDS = 3.0
DEFAULT_TURN_TIMEOUT_S = 60.0
DEFAULT_UPLINK_FRAME_MS = 20
AUDIO_TURN_CONFIDENCE = 0.3
"""Below the server's default re-recognition gate (0.6), so every audio turn is re-recognised by the server."""
AUDIO_QUESTIONS = 6
"""How many of QUESTIONS are synthesized (once, at start) for audio turns."""
SERVER_START_TIMEOUT_S = 180.0
"""Loading the LLM and TTS of a fresh `voxline serve`; SmolLM2 with espeak takes about 2 s."""
CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0
"""A level ends on time: closing a connection at its end may not hold the next level up for long."""
LEAN_MIN_RATE_PER_S = 10_000
"""A server announcing a per-session message rate at least this high (or none) gets `LeanIntentUser`s."""
RECONNECT_PAUSE_S = 0.5
"""After a dropped or refused connection, so a dead server is not hammered in a tight loop."""
SOAK_WINDOW_S = 60.0
SOAK_WINDOW_SHARE = 0.1
"""A soak compares its first and last SOAK_WINDOW_S, or this share of the duration when that is shorter."""
RSS_SAMPLE_EVERY_S = 10.0
SLOW_EXAMPLES = 5
"""How many of the slowest turns the slow-turn report shows with their stages."""
PACING_MARGIN = 0.9
"""A session sends at this share of the rates its `welcome.limits` announce: the server counts arrivals, and the
network can bunch frames that left on time."""
OWN_SERVER_ENV = {
    "VOXLINE_MAX_SESSIONS_PER_ADDRESS": "0",
    "VOXLINE_MAX_MESSAGES_PER_S": "1000000", "VOXLINE_MAX_MESSAGE_BURST": "1000000",
    "VOXLINE_MAX_AUDIO_FRAMES_PER_S": "1000000", "VOXLINE_MAX_AUDIO_FRAME_BURST": "1000000",
}
"""The bench's own server lifts the per-address and per-session abuse limits (0 = no cap): every simulated user
comes from 127.0.0.1 and sends turns back to back, so with a browser's limits the bench would measure the limits.
A variable already set in the environment wins."""

TURN_KINDS = ("llm", "intent", "audio")
COMMANDS = [
    "pause the music", "turn the volume down", "set the volume to 30", "next song", "what time is it",
    "resume the music", "turn on the kitchen lights", "set a timer for 5 minutes", "mute", "turn the lights off",
]
"""Commands of the built-in English grammar (each matched by `IntentResolver`; the tests check it)."""


class LoadBenchError(VoxlineError):
    """The load benchmark cannot run as asked: a bad option, a server that does not start or cannot be reached."""

    code = "bench_load"


# ---------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class TurnPlan:
    """What every simulated user does: which turns, with what claimed confidence, how fast, with which limits."""

    mix: dict[str, float]
    """Weight of each turn kind (`llm`, `intent`, `audio`)."""
    confidence: tuple[float, float]
    """`llm` turns claim a confidence drawn uniformly from this range (one value when both ends are equal)."""
    reply_audio: bool
    """The `reply_audio` capability of every session: false means no TTS and no audio frames."""
    think_ms: float = 0.0
    turns_per_session: int = 0
    """A user hangs up and opens a new session after this many turns (0: never). Each session keeps its dialog
    history as LLM context, so long sessions mean long prompts: 1 measures one-shot questions, the common case of a
    voice assistant; 0 measures the worst case, a conversation that never ends."""
    turn_timeout_s: float = DEFAULT_TURN_TIMEOUT_S
    uplink_frame_ms: int = DEFAULT_UPLINK_FRAME_MS
    token: str | None = None
    audio_clips: tuple[bytes, ...] = field(default=(), repr=False)
    """Spoken questions as 16 kHz mono PCM16, for `audio` turns."""

    @property
    def intents_only(self) -> bool:
        """Text commands without reply audio: the throughput test, run by `LeanIntentUser`s when limits allow."""
        return not self.reply_audio and all(weight == 0 for kind, weight in self.mix.items() if kind != "intent")


@dataclass(frozen=True)
class TurnRecord:
    """One finished turn, as the client saw it."""

    kind: str
    sessions: int
    """The load level it ran at."""
    done_s: float
    """`perf_counter` when its `timings` arrived: decides the window it counts in."""
    first_audio_ms: float | None
    """Last message of the turn sent → first reply audio frame received; None when no audio came."""
    reply_done_ms: float | None
    """Last message of the turn sent → `reply.done` received."""
    timings: dict
    """The server's `timings` message, every field optional."""
    error: str | None = None
    """The first error code the server sent about this turn; such a turn counts as failed, not in latencies."""


@dataclass(frozen=True)
class ErrorEvent:
    """An error message, a dropped connection or a turn timeout."""

    at_s: float
    code: str


@dataclass
class LevelLog:
    """Everything one load level produced on one server; the window bounds are `perf_counter` seconds."""

    sessions: int
    started_s: float
    window_start_s: float
    window_end_s: float
    turns: list[TurnRecord] = field(default_factory=list)
    errors: list[ErrorEvent] = field(default_factory=list)
    rss_kib: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the level started, server RSS), when the server's PID is known."""
    paced_s: float = 0.0
    """Time the users held frames back within the window, to stay within the server's announced rates (`Pacer`):
    above zero, the server's per-session limits bounded the throughput, not its capacity."""

    def window(self, start_s: float, end_s: float) -> tuple[list[TurnRecord], list[ErrorEvent]]:
        return ([t for t in self.turns if start_s <= t.done_s < end_s],
                [e for e in self.errors if start_s <= e.at_s < end_s])


@dataclass
class Target:
    """A server under load."""

    name: str
    url: str
    pid: int | None = None
    """Known when the bench started the server, or from `--server-pid`: enables the RSS figures."""
    lean: bool = False
    """Intent-only load may use `LeanIntentUser`s (set once the server's `welcome` shows its limits)."""


# ---------------------------------------------------------------------------------------------- options


def parse_sessions(text: str) -> list[int]:
    """"1,2,4,8" → [1, 2, 4, 8]; strictly increasing positive counts (the knee needs an ordered curve)."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise LoadBenchError(f"--sessions {text!r}: expected whole numbers separated by commas, e.g. 1,2,4,8") from None
    if not levels or levels[0] < 1 or any(b <= a for a, b in zip(levels, levels[1:])):
        raise LoadBenchError(f"--sessions {text!r}: expected increasing counts of at least 1, e.g. 1,2,4,8")
    return levels


def parse_mix(text: str) -> dict[str, float]:
    """"llm=1,intent=2" → {"llm": 1.0, "intent": 2.0, "audio": 0.0}; kinds left out weigh 0."""
    mix = dict.fromkeys(TURN_KINDS, 0.0)
    for part in filter(None, (s.strip() for s in text.split(","))):
        kind, _, weight = part.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if kind not in mix or value < 0:
            raise LoadBenchError(f"--mix {text!r}: expected KIND=WEIGHT pairs, KIND one of {', '.join(TURN_KINDS)}")
        mix[kind] = value
    if not any(mix.values()):
        raise LoadBenchError(f"--mix {text!r}: at least one turn kind needs a positive weight")
    return mix


def parse_confidence(text: str) -> tuple[float, float]:
    """"0.95" → (0.95, 0.95); "0.3-1.0" → (0.3, 1.0)."""
    low, _, high = text.partition("-")
    try:
        bounds = (float(low), float(high or low))
    except ValueError:
        bounds = (1.0, 0.0)
    if not 0.0 <= bounds[0] <= bounds[1] <= 1.0:
        raise LoadBenchError(f"--confidence {text!r}: expected a value or a range within 0-1, e.g. 0.95 or 0.3-1.0")
    return bounds


def speak_questions(count: int = AUDIO_QUESTIONS) -> tuple[bytes, ...]:
    """The first `count` QUESTIONS spoken by espeak-ng, as 16 kHz mono PCM16 (the `pcm16` uplink format)."""
    import numpy as np

    from voxline.bench.audio import RATE, espeak

    step = RATE // p.PCM16_UPLINK_RATE_HZ
    clips = []
    for question in QUESTIONS[:count]:
        samples = espeak(question)
        # Averaging each group of `step` samples is a crude low-pass filter: enough against aliasing for ASR.
        down = samples[: len(samples) // step * step].reshape(-1, step).mean(axis=1)
        clips.append((np.clip(down, -1, 1) * 32767).astype("<i2").tobytes())
    return tuple(clips)


# ---------------------------------------------------------------------------------------------- one user


class SessionRefused(Exception):
    """The server answered `hello` with an error (already counted) instead of `welcome`."""


class FrameDropped(Exception):
    """The server dropped a frame unread (`rate_limited`, already counted): the turn may never be answered."""

    def __init__(self, retry_after_ms: float) -> None:
        super().__init__(f"retry after {retry_after_ms:.0f} ms")
        self.retry_after_ms = retry_after_ms


class Pacer:
    """Keeps one kind of frame within the rate the server announced, as a polite client does: a frame over it
    would be dropped unread and its turn never answered."""

    def __init__(self, rate_per_s: float | None, burst: float) -> None:
        self.rate_per_s = rate_per_s * PACING_MARGIN if rate_per_s else None
        self.burst = max(1.0, burst * PACING_MARGIN - 1)  # `hello` already took one of the server's tokens
        self.tokens, self.at = self.burst, time.perf_counter()

    @classmethod
    def from_limits(cls, limits: dict, rate_key: str, burst_key: str) -> Pacer:
        return cls(limits.get(rate_key), limits.get(burst_key) or 1)

    async def take(self) -> float:
        """Wait for a token if none is left; returns the seconds waited."""
        if self.rate_per_s is None:
            return 0.0
        now = time.perf_counter()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate_per_s)
        self.at = now
        wait_s = 0.0
        if self.tokens < 1.0:
            wait_s = (1.0 - self.tokens) / self.rate_per_s
            await asyncio.sleep(wait_s)
            self.tokens, self.at = 1.0, time.perf_counter()
        self.tokens -= 1.0
        return wait_s


class SimulatedUser:
    """One `/ws` connection in a closed loop until `deadline_s`; after a drop it reconnects (counted as an error)."""

    def __init__(self, url: str, plan: TurnPlan, log: LevelLog, rng: random.Random, deadline_s: float) -> None:
        self.url, self.plan, self.log, self.rng, self.deadline_s = url, plan, log, rng, deadline_s
        self.turn_id = 0
        self.text_pacer = self.audio_pacer = Pacer(None, 1)

    async def run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake

        while time.perf_counter() < self.deadline_s:
            try:
                async with connect(self.url, max_size=None, open_timeout=CONNECT_TIMEOUT_S,
                                   close_timeout=CLOSE_TIMEOUT_S) as ws:
                    await self._open(ws)
                    turns = 0
                    while time.perf_counter() < self.deadline_s:
                        retry_after_ms = await self._turn(ws)
                        turns += 1
                        pause_ms = max(self.plan.think_ms, retry_after_ms)
                        if pause_ms:
                            await asyncio.sleep(pause_ms / 1000)
                        if self.plan.turns_per_session and turns >= self.plan.turns_per_session:
                            break  # hang up; the next session starts without history
            except FrameDropped as dropped:  # a new connection is the one way to know the server's state again
                await asyncio.sleep(dropped.retry_after_ms / 1000)
            except TimeoutError:
                self._error("timeout")
            except (ConnectionClosed, InvalidHandshake, OSError):
                self._error("connection_closed")
                await asyncio.sleep(RECONNECT_PAUSE_S)
            except SessionRefused as refused:
                self._error(str(refused))
                await asyncio.sleep(RECONNECT_PAUSE_S)

    def _error(self, code: str) -> None:
        self.log.errors.append(ErrorEvent(time.perf_counter(), code))

    async def _open(self, ws) -> None:
        limits = (await hello(ws, self.plan)).get("limits") or {}
        self.text_pacer = Pacer.from_limits(limits, "max_messages_per_s", "max_message_burst")
        self.audio_pacer = Pacer.from_limits(limits, "max_audio_frames_per_s", "max_audio_frame_burst")

    async def _send(self, ws, frame: str | bytes) -> None:
        waited_s = await (self.audio_pacer if isinstance(frame, bytes) else self.text_pacer).take()
        if waited_s and self.log.window_start_s <= time.perf_counter() < self.log.window_end_s:
            self.log.paced_s += waited_s
        await ws.send(frame)

    async def _turn(self, ws) -> float:
        """One turn, start to `timings`; returns how long the server asked us to wait (`overloaded`), in ms."""
        self.turn_id += 1
        kind = self.rng.choices(TURN_KINDS, weights=[self.plan.mix[k] for k in TURN_KINDS])[0]
        async with asyncio.timeout(self.plan.turn_timeout_s):
            await self._send_turn(ws, kind)
            return await self._await_turn(ws, kind, time.perf_counter())

    async def _send_turn(self, ws, kind: str) -> None:
        turn_id = self.turn_id
        if kind == "intent":
            await self._send(ws, _encode({"type": "text", "turn_id": turn_id, "text": self.rng.choice(COMMANDS)}))
        elif kind == "llm":
            await self._send(ws, json.dumps({"type": "turn.start", "turn_id": turn_id,
                                             "transcript": self.rng.choice(QUESTIONS),
                                             "confidence": round(self.rng.uniform(*self.plan.confidence), 3)}))
        else:
            await self._send(ws, json.dumps({"type": "turn.start", "turn_id": turn_id, "transcript": "",
                                             "confidence": AUDIO_TURN_CONFIDENCE, "audio": "pcm16"}))
            clip = self.rng.choice(self.plan.audio_clips)
            step = p.PCM16_UPLINK_RATE_HZ * self.plan.uplink_frame_ms // 1000 * 2
            for offset in range(0, len(clip), step):
                await self._send(ws, p.encode_audio_frame("pcm16", turn_id, clip[offset:offset + step]))
            await self._send(ws, json.dumps({"type": "turn.audio_end", "turn_id": turn_id}))

    async def _await_turn(self, ws, kind: str, sent: float) -> float:
        """Read until this turn's `timings`; frames of other turns (late ones of a cut-off turn) are skipped."""
        first_audio = reply_done = error = None
        retry_after_ms = 0.0
        while True:
            frame = await ws.recv()
            now = time.perf_counter()
            if isinstance(frame, bytes):
                if first_audio is None and p.parse_reply_audio(frame).turn_id == self.turn_id:
                    first_audio = now
                continue
            message = _decode(frame)
            if message.get("type") == "error":
                code = message.get("code", "unknown")
                self._error(code)
                if message.get("turn_id") in (None, self.turn_id):
                    error = error or code
                if code == "overloaded":
                    retry_after_ms = max(retry_after_ms, float(message.get("retry_after_ms") or 0))
                elif code == "rate_limited":
                    raise FrameDropped(float(message.get("retry_after_ms") or 0))
            elif message.get("turn_id") != self.turn_id:
                continue
            elif message.get("type") == "reply.done":
                reply_done = now
            elif message.get("type") == "timings":
                self.log.turns.append(TurnRecord(
                    kind=kind, sessions=self.log.sessions, done_s=now,
                    first_audio_ms=_ms(first_audio, sent), reply_done_ms=_ms(reply_done, sent),
                    timings={k: v for k, v in message.items() if k not in ("type", "turn_id")}, error=error,
                ))
                return retry_after_ms


_decode = msgspec.json.Decoder().decode
"""The bench shares the machine with the server it measures: msgspec parses and writes JSON several times faster
than the json module, which leaves more of the CPU to the server."""


def _encode(message: dict) -> str:
    return msgspec.json.encode(message).decode()


class LeanIntentUser(asyncio.Protocol):
    """A `SimulatedUser` for intent-only load, written as a protocol callback instead of a coroutine.

    At thousands of turns a second the bench itself is half the CPU of the machine it measures: the asyncio
    client's per-message futures and tasks cost more than the server's work per turn. This user does the same
    closed loop (hello, then `text` turn → wait for its `timings` → next) on websockets' sans-I/O protocol, all in
    `data_received`, and records the same `TurnRecord`s. It does not pace itself: the bench uses it only against
    servers whose announced limits do not bind (its own server, or `--url` servers with the limits lifted).
    """

    def __init__(self, url: str, plan: TurnPlan, log: LevelLog, rng: random.Random, deadline_s: float,
                 done: asyncio.Future) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        self.plan, self.log, self.rng, self.deadline_s, self.done = plan, log, rng, deadline_s, done
        self.ws = ClientProtocol(parse_uri(url), max_size=None)
        self.transport: asyncio.Transport | None = None
        self.turn_id = 0
        self.sent = 0.0
        self.reply_done: float | None = None
        self.error: str | None = None
        self.welcomed = False
        self.hello = _encode({"type": "hello", "v": p.PROTOCOL_VERSION, "lang": "en", "token": plan.token,
                              "capabilities": {"reply_audio": False}})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.ws.send_request(self.ws.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        from websockets.frames import Opcode
        from websockets.http11 import Response

        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if isinstance(event, Response):
                if event.status_code != 101:
                    return self._end("connection_closed")
                self.ws.send_text(self.hello.encode())
            elif event.opcode is Opcode.TEXT:
                self._message(_decode(event.data))
        self._flush()

    def _message(self, message: dict) -> None:
        kind = message.get("type")
        if not self.welcomed:
            if kind != "welcome":
                return self._end(message.get("code", "unknown"))
            self.welcomed = True
            return self._next()
        now = time.perf_counter()
        if kind == "error":
            self.log.errors.append(ErrorEvent(now, message.get("code", "unknown")))
            self.error = self.error or message.get("code", "unknown")
        elif kind == "reply.done" and message.get("turn_id") == self.turn_id:
            self.reply_done = now
        elif kind == "timings" and message.get("turn_id") == self.turn_id:
            self.log.turns.append(TurnRecord(
                kind="intent", sessions=self.log.sessions, done_s=now, first_audio_ms=None,
                reply_done_ms=_ms(self.reply_done, self.sent),
                timings={k: v for k, v in message.items() if k not in ("type", "turn_id")}, error=self.error))
            self._next()

    def _next(self) -> None:
        if time.perf_counter() >= self.deadline_s:
            return self._end(None)
        self.turn_id += 1
        self.reply_done, self.error = None, None
        text = self.rng.choice(COMMANDS)
        self.ws.send_text(_encode({"type": "text", "turn_id": self.turn_id, "text": text}).encode())
        self.sent = time.perf_counter()

    def _flush(self) -> None:
        for chunk in self.ws.data_to_send():
            if chunk and self.transport is not None:
                self.transport.write(chunk)

    def _end(self, error: str | None) -> None:
        if error is not None:
            self.log.errors.append(ErrorEvent(time.perf_counter(), error))
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(error)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.log.errors.append(ErrorEvent(time.perf_counter(), "connection_closed"))
            self.done.set_result("connection_closed")


async def run_lean_user(url: str, plan: TurnPlan, log: LevelLog, rng: random.Random, deadline_s: float) -> None:
    """A `LeanIntentUser` until the deadline, reconnecting after a drop (counted) like `SimulatedUser.run`."""
    from websockets.uri import parse_uri

    uri = parse_uri(url)
    loop = asyncio.get_running_loop()
    while time.perf_counter() < deadline_s:
        done = loop.create_future()
        try:
            await loop.create_connection(lambda: LeanIntentUser(url, plan, log, rng, deadline_s, done),
                                         uri.host, uri.port)
        except OSError:
            log.errors.append(ErrorEvent(time.perf_counter(), "connection_closed"))
            await asyncio.sleep(RECONNECT_PAUSE_S)
            continue
        if await done is not None:
            await asyncio.sleep(RECONNECT_PAUSE_S)


def _ms(at: float | None, since: float) -> float | None:
    return None if at is None else round((at - since) * 1000.0, 1)


async def hello(ws, plan: TurnPlan) -> dict:
    """Open the session; the `welcome`, or SessionRefused with the server's error code."""
    message = {"type": "hello", "v": p.PROTOCOL_VERSION, "lang": "en",
               "capabilities": {"pcm16": True, "reply_audio": plan.reply_audio}}
    if plan.token:
        message["token"] = plan.token
    await ws.send(json.dumps(message))
    answer = json.loads(await ws.recv())
    if answer.get("type") != "welcome":
        raise SessionRefused(answer.get("code", "unknown"))
    return answer


# ---------------------------------------------------------------------------------------------- running levels


async def probe(target: Target, plan: TurnPlan) -> dict:
    """One session before the load starts, so an unreachable server is one clear error, not N counted ones."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

    try:
        async with connect(target.url, max_size=None, open_timeout=CONNECT_TIMEOUT_S) as ws:
            return await hello(ws, plan)
    except (OSError, TimeoutError, InvalidURI, InvalidHandshake, ConnectionClosed) as exc:
        raise LoadBenchError(f"cannot reach a Voxline server at {target.url} ({exc}): start one with "
                             "`voxline serve`, or leave --url out and the bench starts its own") from None
    except SessionRefused as refused:
        raise LoadBenchError(f"{target.url} refused the session with `{refused}` (a token? see --token)") from None


async def run_level(target: Target, sessions: int, plan: TurnPlan, *, warmup_s: float, measure_s: float,
                    seed: int, rss_every_s: float | None = None) -> LevelLog:
    """`sessions` users for warm-up + measurement; turns still running at the end are cut off, not waited for."""
    started = time.perf_counter()
    log = LevelLog(sessions, started, started + warmup_s, started + warmup_s + measure_s)
    rngs = [random.Random(f"{seed}:{sessions}:{i}") for i in range(sessions)]
    if plan.intents_only and target.lean:
        tasks = [asyncio.create_task(run_lean_user(target.url, plan, log, rng, log.window_end_s)) for rng in rngs]
    else:
        tasks = [asyncio.create_task(SimulatedUser(target.url, plan, log, rng, log.window_end_s).run())
                 for rng in rngs]
    sampler = asyncio.create_task(_sample_rss(target.pid, log, rss_every_s)) if target.pid else None
    await asyncio.wait(tasks, timeout=max(0.0, log.window_end_s - time.perf_counter()))
    for task in [*tasks, sampler]:
        if task is not None:
            task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    if sampler is not None:
        await asyncio.gather(sampler, return_exceptions=True)
        _record_rss(target.pid, log)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome  # a bug in the bench itself: every expected failure is counted inside `run`
    return log


async def _sample_rss(pid: int, log: LevelLog, every_s: float | None) -> None:
    """The RSS now, then every `every_s` (None: only now; `run_level` adds the end)."""
    _record_rss(pid, log)
    while every_s is not None:
        await asyncio.sleep(every_s)
        _record_rss(pid, log)


def _record_rss(pid: int, log: LevelLog) -> None:
    kib = server_rss_kib(pid)
    if kib is not None:
        log.rss_kib.append((round(time.perf_counter() - log.started_s, 1), kib))


def server_rss_kib(pid: int) -> int | None:
    """VmRSS of the process and its descendants (uvicorn workers), from /proc; None once it has exited."""
    total, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            if current == pid:
                return None
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        for task in tasks:
            with contextlib.suppress(OSError, ValueError):
                pending += [int(child) for child in (task / "children").read_text().split()]
    return total


async def run_all(targets: list[Target], levels: list[int], plan: TurnPlan, *, warmup_s: float, measure_s: float,
                  seed: int, rss_every_s: float | None) -> tuple[dict[str, dict], dict[str, list[LevelLog]]]:
    """Every level on every target, alternating targets within a level; the welcome and the logs of each."""
    welcomes = {target.name: await probe(target, plan) for target in targets}
    for target in targets:  # the lean user does not pace itself: only where the server's rates cannot bind
        rate = (welcomes[target.name].get("limits") or {}).get("max_messages_per_s")
        target.lean = not rate or rate >= LEAN_MIN_RATE_PER_S
    logs: dict[str, list[LevelLog]] = {target.name: [] for target in targets}
    for sessions in levels:
        for target in targets:
            logs[target.name].append(await run_level(target, sessions, plan, warmup_s=warmup_s,
                                                     measure_s=measure_s, seed=seed, rss_every_s=rss_every_s))
    return welcomes, logs


# ---------------------------------------------------------------------------------------------- the server


class ServeProcess:
    """`voxline serve` as a child process on a free loopback port, ready once `/healthz` answers 200."""

    def __init__(self, name: str, llm: str, tts_engine: str, serve_args: Sequence[str] = ()) -> None:
        self.name, self.llm, self.tts_engine, self.serve_args = name, llm, tts_engine, list(serve_args)
        self.port = _free_port()
        self.process: subprocess.Popen | None = None
        self._output = tempfile.TemporaryFile()

    @property
    def target(self) -> Target:
        return Target(self.name, f"ws://127.0.0.1:{self.port}/ws", self.process.pid)

    def __enter__(self) -> ServeProcess:
        command = [sys.executable, "-m", "voxline.cli", "serve", "--port", str(self.port), "--llm", self.llm,
                   "--log-level", "warning", *self.serve_args]
        env = OWN_SERVER_ENV | os.environ | {"VOXLINE_TTS_ENGINE": self.tts_engine, "VOXLINE_LLM_MODEL": self.llm}
        self.process = subprocess.Popen(command, env=env, stdout=self._output, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy(shlex.join(command[2:]))
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_healthy(self, shown: str) -> None:
        url = f"http://127.0.0.1:{self.port}/healthz"
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LoadBenchError(f"`{shown}` exited with {self.process.returncode}:\n{self.output_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                raise LoadBenchError(f"`{shown}`: {url} answered {exc.code} (a model is not verified: run "
                                     "`voxline models verify`)") from None
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise LoadBenchError(f"`{shown}` did not answer {url} within {SERVER_START_TIMEOUT_S:.0f} s:\n"
                             f"{self.output_tail()}")

    def output_tail(self, lines: int = 20) -> str:
        self._output.seek(0)
        return "\n".join(self._output.read().decode(errors="replace").splitlines()[-lines:])

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._output.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- analysis


def main_latency(turns: Sequence[TurnRecord]) -> str:
    """The latency the report is about: first audio when any turn had reply audio, else `reply.done`."""
    return "first_audio_ms" if any(t.first_audio_ms is not None for t in turns if t.error is None) else "reply_done_ms"


def level_summary(turns: Sequence[TurnRecord], errors: Sequence[ErrorEvent], seconds: float, sessions: int) -> dict:
    """Throughput, errors and latency percentiles of one window; failed turns count as errors, not in latencies."""
    ok = [t for t in turns if t.error is None]
    out = {
        "sessions": sessions, "seconds": round(seconds, 1), "turns": len(ok),
        "turns_per_s": round(len(ok) / seconds, 3) if seconds > 0 else None,
        "failed_turns": len(turns) - len(ok),
        "errors": dict(sorted(Counter(e.code for e in errors).items())),
        "kinds": dict(sorted(Counter(t.kind for t in ok).items())),
        "first_audio_ms": summary([t.first_audio_ms for t in ok if t.first_audio_ms is not None]),
        "reply_done_ms": summary([t.reply_done_ms for t in ok if t.reply_done_ms is not None]),
    }
    timing_keys = sorted({k for t in ok for k, v in t.timings.items() if _is_number(v)})
    out["timings_ms"] = {k: summary(_values(ok, k)) for k in timing_keys if k.endswith("_ms")}
    out["counts"] = {k: summary(_values(ok, k)) | {"mean": _mean(_values(ok, k))}
                     for k in timing_keys if not k.endswith("_ms")}  # llm_tokens, batch_size
    stage_keys = {k for t in ok for k in (t.timings.get("stages") or {})}
    out["stages_ms"] = {k: summary([t.timings["stages"][k] for t in ok if k in (t.timings.get("stages") or {})])
                        for k in sorted(stage_keys, key=_stage_order)}
    lanes = Counter(t.timings["lane"] for t in ok if t.timings.get("lane"))
    if lanes:
        out["lanes"] = dict(sorted(lanes.items()))
    return out


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _values(turns: Sequence[TurnRecord], key: str) -> list[float]:
    return [t.timings[key] for t in turns if _is_number(t.timings.get(key))]


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _stage_order(stage: str) -> int:
    return STAGES.index(stage) if stage in STAGES else len(STAGES)


def second_differences(loads: Sequence[float], values: Sequence[float]) -> list[float]:
    """Second divided differences at each interior point: f[x0, x1, x2] × 2, the discrete second derivative.

    With evenly spaced loads (step h) this is (v[i+1] − 2 v[i] + v[i−1]) / h²; with uneven ones (1, 2, 4, 8 ...)
    the divided form keeps a straight line at exactly zero, so only a real bend counts.
    """
    out = []
    for i in range(1, len(loads) - 1):
        left = (values[i] - values[i - 1]) / (loads[i] - loads[i - 1])
        right = (values[i + 1] - values[i]) / (loads[i + 1] - loads[i])
        out.append(2 * (right - left) / (loads[i + 1] - loads[i - 1]))
    return out


def knee(loads: Sequence[float], values: Sequence[float | None]) -> float | None:
    """The load at which the curve bends upward the most: the interior point with the largest positive second
    difference. None with fewer than 3 points or no upward bend (a straight line, or a curve that only flattens).
    Points without a value (no turn finished at that load) are left out. Noise bends too: a noisy straight line
    can have a knee, so the report shows the second differences beside it.
    """
    points = [(x, v) for x, v in zip(loads, values) if v is not None]
    if len(points) < 3:
        return None
    xs, vs = zip(*points)
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError(f"loads must increase: {list(xs)}")
    d2 = second_differences(xs, vs)
    scale = (max(vs) - min(vs)) / (xs[-1] - xs[0]) ** 2  # rounding noise of a straight line is far below this
    best = max(range(len(d2)), key=d2.__getitem__)
    return xs[best + 1] if d2[best] > 1e-9 * scale else None


def knee_report(levels: Sequence[dict], latency: str) -> dict:
    """The knee of P95 `latency` against sessions, with the throughput there and the curve's second differences."""
    points = [(lvl["sessions"], lvl[latency]["p95"]) for lvl in levels if lvl[latency]["p95"] is not None]
    at = knee([x for x, _ in points], [v for _, v in points])
    level = next((lvl for lvl in levels if lvl["sessions"] == at), None)
    d2 = second_differences([x for x, _ in points], [v for _, v in points]) if len(points) >= 3 else []
    return {
        "latency": latency, "percentile": "p95", "sessions": at,
        "turns_per_s": level["turns_per_s"] if level else None,
        "p95_ms": level[latency]["p95"] if level else None,
        "second_differences": [{"sessions": x, "d2": round(d, 4)} for (x, _), d in zip(points[1:-1], d2)],
    }


def derived_stages(timings: dict) -> dict[str, float]:
    """Stages from the timing marks, for a server that sends no `stages`: each stage runs from the previous mark
    present to its own. Without `llm_batch_ms` the queueing lands in `prefill` (it cannot be told apart)."""
    stages, previous = {}, 0.0
    for stage, mark in STAGE_ENDS:
        at = timings.get(mark)
        if _is_number(at):
            stages[stage] = round(max(0.0, at - previous), 1)
            previous = max(previous, at)
    return stages


def turn_stages(turn: TurnRecord, latency: str) -> dict[str, float]:
    """Where `latency` went in this turn: the server's stages, plus what the client saw beyond them.

    The client's clock runs longer than the server's sum: network and the client's own reading for first audio
    (added to `transport`), and for `reply.done` the rest of the generation (added to `decode` for LLM turns).
    """
    stages = dict(turn.timings.get("stages") or derived_stages(turn.timings))
    rest = (getattr(turn, latency) or 0.0) - sum(stages.values())
    if rest > 0:
        bucket = "decode" if latency == "reply_done_ms" and turn.kind != "intent" else "transport"
        stages[bucket] = round(stages.get(bucket, 0.0) + rest, 1)
    return stages


def slow_turns(turns: Sequence[TurnRecord], latency: str, examples: int = SLOW_EXAMPLES) -> dict:
    """For the turns above the P99 of `latency`: how many each stage dominated, and the slowest few in full."""
    timed = [t for t in turns if t.error is None and getattr(t, latency) is not None]
    p99 = percentile([getattr(t, latency) for t in timed], 0.99)
    slow = sorted((t for t in timed if getattr(t, latency) > p99), key=lambda t: getattr(t, latency), reverse=True)
    dominant: Counter[str] = Counter()
    shown = []
    for turn in slow:
        stages = turn_stages(turn, latency)
        top = max(stages, key=stages.__getitem__) if stages else "unknown"
        dominant[top] += 1
        if len(shown) < examples:
            shown.append({"kind": turn.kind, "sessions": turn.sessions, latency: getattr(turn, latency),
                          "dominant": top, "stages": stages,
                          "stages_from": "server" if turn.timings.get("stages") else "timing marks"})
    return {"latency": latency, "p99_ms": round(p99, 1) if p99 is not None else None, "turns": len(slow),
            "dominant": dict(dominant.most_common()), "slowest": shown}


def soak_report(log: LevelLog, window_s: float, latency: str) -> dict:
    """First and last `window_s` of a soak side by side: has anything grown (latency, errors, memory)?"""
    first = log.window(log.window_start_s, log.window_start_s + window_s)
    last = log.window(log.window_end_s - window_s, log.window_end_s)

    def side(turns: list[TurnRecord], errors: list[ErrorEvent]) -> dict:
        ok = [getattr(t, latency) for t in turns if t.error is None and getattr(t, latency) is not None]
        return {"turns": len(ok), "turns_per_s": round(len(ok) / window_s, 3), "p95_ms": summary(ok)["p95"],
                "errors": dict(sorted(Counter(e.code for e in errors).items()))}

    rss = log.rss_kib
    return {
        "sessions": log.sessions, "seconds": round(log.window_end_s - log.window_start_s, 1),
        "window_s": round(window_s, 1), "latency": latency, "start": side(*first), "end": side(*last),
        "server_rss_kib": {"start": rss[0][1] if rss else None, "end": rss[-1][1] if rss else None,
                           "samples": [list(sample) for sample in rss]},
    }


def soak_window_s(duration_s: float) -> float:
    return min(SOAK_WINDOW_S, SOAK_WINDOW_SHARE * duration_s)


def build_report(config: dict, targets: list[Target], welcomes: dict[str, dict], logs: dict[str, list[LevelLog]],
                 *, soak_window: float | None = None) -> dict:
    """The JSON the command prints: per server its levels, knee and slow turns; side by side ratios when two."""
    counted = {name: [log.window(log.window_start_s, log.window_end_s) for log in runs] for name, runs in logs.items()}
    latency = main_latency([t for runs in counted.values() for turns, _ in runs for t in turns])
    servers = []
    for target in targets:
        levels = []
        for log, (turns, errors) in zip(logs[target.name], counted[target.name]):
            level = level_summary(turns, errors, log.window_end_s - log.window_start_s, log.sessions)
            level["paced_s"] = round(log.paced_s, 2)
            if log.rss_kib:
                level["server_rss_kib"] = {"start": log.rss_kib[0][1], "end": log.rss_kib[-1][1]}
            levels.append(level)
        welcome = welcomes.get(target.name, {})
        server = {"name": target.name, "url": target.url, "pid": target.pid, "models": welcome.get("models"),
                  "levels": levels, "knee": knee_report(levels, latency),
                  "slow_turns": slow_turns([t for turns, _ in counted[target.name] for t in turns], latency)}
        if soak_window is not None:
            server["soak"] = soak_report(logs[target.name][0], soak_window, latency)
        servers.append(server)
    report = {"benchmark": "load", "config": config, "latency": latency, "servers": servers}
    if len(servers) == 2:
        report["comparison"] = compare_levels(servers[0], servers[1])
    return report


def compare_levels(ours: dict, baseline: dict) -> list[dict]:
    """Level by level: turns/s and P95 first audio of `ours` over `baseline` (batching on over off)."""
    rows = []
    for a, b in zip(ours["levels"], baseline["levels"]):
        rows.append({
            "sessions": a["sessions"], f"{ours['name']}_turns_per_s": a["turns_per_s"],
            f"{baseline['name']}_turns_per_s": b["turns_per_s"],
            "turns_per_s_ratio": round(a["turns_per_s"] / b["turns_per_s"], 3) if b["turns_per_s"] else None,
            "p95_first_audio_ratio": ratio(a["first_audio_ms"], b["first_audio_ms"], "p95"),
            "p95_reply_done_ratio": ratio(a["reply_done_ms"], b["reply_done_ms"], "p95"),
        })
    return rows


# ---------------------------------------------------------------------------------------------- the plot


def plot(report: dict, path: Path) -> None:
    """P50/P95/P99 of the report's latency against sessions, turns/s below, each server's knee marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullLocator

    latency = report["latency"]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 7), height_ratios=[2, 1])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    loads: set[int] = set()
    for color, server in zip(colors, report["servers"]):
        levels = server["levels"]
        x = [lvl["sessions"] for lvl in levels]
        loads.update(x)
        for q, style in (("p50", ":"), ("p95", "-"), ("p99", "--")):
            y = np.array([lvl[latency][q] for lvl in levels], dtype=float)
            top.plot(x, y, style, marker="o", color=color, label=f"{server['name']} {q.upper()}")
        bottom.plot(x, np.array([lvl["turns_per_s"] for lvl in levels], dtype=float), marker="o", color=color,
                    label=server["name"])
        at = server["knee"]["sessions"]
        if at is not None:
            for axis in (top, bottom):
                axis.axvline(at, color=color, linestyle="-.", alpha=0.6)
            top.annotate(f"knee ({server['name']}): {at} sessions", xy=(at, server["knee"]["p95_ms"]),
                         xytext=(6, 6), textcoords="offset points", color=color)
    if loads and min(loads) > 0 and max(loads) >= 4 * min(loads):
        bottom.set_xscale("log", base=2)  # levels usually double: equal steps on the page
    bottom.set_xticks(sorted(loads), [str(v) for v in sorted(loads)])
    bottom.xaxis.set_minor_locator(NullLocator())
    top.set_ylabel(f"{latency.removesuffix('_ms').replace('_', ' ')} (ms)")
    top.set_title("voxline bench load: latency against load")
    bottom.set_ylabel("turns/s")
    bottom.set_xlabel("concurrent sessions")
    for axis in (top, bottom):
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- the command


def make_plan(args) -> TurnPlan:
    mix = parse_mix(args.mix)
    reply_audio = args.reply_audio
    if reply_audio is None:  # an intent-only mix is the text-throughput test: no TTS unless asked for
        reply_audio = any(mix[k] for k in ("llm", "audio"))
    return TurnPlan(
        mix=mix, confidence=parse_confidence(args.confidence), reply_audio=reply_audio, think_ms=args.think_ms,
        turns_per_session=args.turns_per_session,
        turn_timeout_s=args.turn_timeout, uplink_frame_ms=args.uplink_frame_ms,
        token=args.token if args.token is not None else os.environ.get("VOXLINE_AUTH_TOKEN") or None,
        audio_clips=speak_questions() if mix["audio"] else (),
    )


def _check_options(args) -> None:
    if args.compare_batching and args.url:
        raise LoadBenchError("--compare-batching starts its own two servers (batching on and off): leave --url out")
    if args.duration is not None and args.compare_batching:
        raise LoadBenchError("--duration (a soak) runs against one server: leave --compare-batching out")
    if args.duration is not None and args.plot:
        raise LoadBenchError("--plot draws latency against load: it needs a ramp of --sessions, not --duration")
    if args.server_pid is not None and not args.url:
        raise LoadBenchError("--server-pid is for a server given by --url (the bench knows its own server's PID)")
    for value, flag in ((args.level_seconds, "--level-seconds"), (args.duration, "--duration")):
        if value is not None and value <= 0:
            raise LoadBenchError(f"{flag} must be positive")


def _targets(args, stack: contextlib.ExitStack) -> list[Target]:
    if args.url:
        return [Target("server", args.url, args.server_pid)]
    extra = [word for arg in args.serve_arg or [] for word in shlex.split(arg)]
    variants = ([("batching_on", ["--batching", "on"]), ("batching_off", ["--batching", "off"])]
                if args.compare_batching else [("server", [])])
    return [stack.enter_context(ServeProcess(name, args.llm, args.tts_engine, extra + more)).target
            for name, more in variants]


def main(args) -> int:
    started = time.monotonic()
    _check_options(args)
    levels = parse_sessions(args.sessions)
    plan = make_plan(args)
    soak = args.duration is not None
    if soak:
        levels = levels[:1]
    measure_s = args.duration if soak else args.level_seconds
    config = {
        "mode": "soak" if soak else "compare_batching" if args.compare_batching else "ramp",
        "sessions": levels, "level_seconds": measure_s, "warmup_seconds": args.warmup_seconds,
        "mix": plan.mix, "confidence": list(plan.confidence), "reply_audio": plan.reply_audio,
        "think_ms": plan.think_ms, "turns_per_session": plan.turns_per_session, "turn_timeout_s": plan.turn_timeout_s, "uplink_frame_ms": plan.uplink_frame_ms,
        "seed": args.seed, "llm": None if args.url else args.llm, "tts_engine": None if args.url else args.tts_engine,
    }
    with contextlib.ExitStack() as stack:
        targets = _targets(args, stack)
        welcomes, logs = asyncio.run(run_all(
            targets, levels, plan, warmup_s=args.warmup_seconds, measure_s=measure_s, seed=args.seed,
            rss_every_s=RSS_SAMPLE_EVERY_S if soak else None))
    report = build_report(config, targets, welcomes, logs, soak_window=soak_window_s(measure_s) if soak else None)
    if args.plot:
        plot(report, args.plot)
        report["plot"] = str(args.plot)
    report["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))
    return 0

