"""Limits of one session: frame rates, silence, and the bounded outbox with its slow-reader policy."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient

from voxline.config import Settings
from voxline.server import protocol as p
from voxline.server.limits import (
    FrameBudget,
    IdleClock,
    Silence,
    TokenBucket,
    TurnAudioBudget,
    Verdict,
    opus_packet_ms,
)
from voxline.server.engines import Engines
from voxline.server.outbox import OUTBOUND_ENCODED_LATER_BYTES, Outbound, Outbox
from voxline.server.session import Session
from voxline.server.ws import websocket_endpoint

SMOLLM = "smollm2-135m-instruct-ct2"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------------------------- rates


def test_a_token_bucket_admits_its_burst_then_its_rate():
    clock = Clock()
    bucket = TokenBucket(2.0, 3, clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert [bucket.take(), bucket.take()] == [True, False]
    clock.now += 60
    assert sum(bucket.take() for _ in range(10)) == 3  # never more than the burst saved up


def test_text_and_audio_frames_have_separate_budgets():
    clock = Clock()
    budget = FrameBudget(Settings(max_messages_per_s=1, max_message_burst=2, max_audio_frames_per_s=1,
                                  max_audio_frame_burst=3), clock)
    assert [budget.admit(binary=False) for _ in range(3)] == [Verdict.PASS, Verdict.PASS, Verdict.DROP_AND_WARN]
    assert [budget.admit(binary=True) for _ in range(3)] == [Verdict.PASS] * 3
    assert budget.admit(binary=True) is Verdict.DROP_AND_WARN  # a run of drops begins again after a pass
    assert budget.retry_after_ms(binary=True) == 1000


def test_a_client_that_ignores_rate_limited_is_closed():
    budget = FrameBudget(Settings(max_messages_per_s=1, max_message_burst=1), Clock())
    verdicts = [budget.admit(binary=False) for _ in range(1 + p.MAX_RATE_LIMITED_FRAMES)]
    assert verdicts[:2] == [Verdict.PASS, Verdict.DROP_AND_WARN]
    assert set(verdicts[2:-1]) == {Verdict.DROP} and verdicts[-1] is Verdict.CLOSE


def test_a_rate_or_burst_of_0_is_no_limit():
    budget = FrameBudget(Settings(max_messages_per_s=0, max_audio_frame_burst=0), Clock())
    assert all(budget.admit(binary) is Verdict.PASS for binary in (False, True) for _ in range(10_000))


# ---------------------------------------------------------------------------------------------- silence


def test_no_hello_in_time_closes():
    clock = Clock()
    budget, idle = FrameBudget(Settings(), clock), IdleClock(hello_timeout_s=10, idle_timeout_s=300, idle_grace_s=10)
    assert idle.check("handshake", budget, clock.now + 9.9) is Silence.FINE
    assert idle.check("handshake", budget, clock.now + 10) is Silence.CLOSE


def test_a_silent_listener_is_warned_then_closed_unless_it_speaks():
    clock = Clock()
    budget, idle = FrameBudget(Settings(), clock), IdleClock(hello_timeout_s=1, idle_timeout_s=300, idle_grace_s=10)
    start = clock.now
    assert idle.check("listening", budget, start + 299) is Silence.FINE
    assert idle.check("listening", budget, start + 300) is Silence.WARN
    assert idle.check("listening", budget, start + 305) is Silence.FINE
    clock.now = start + 306
    budget.admit(binary=False)  # it spoke: the clock starts over
    assert idle.check("listening", budget, start + 311) is Silence.FINE
    assert idle.check("listening", budget, start + 606) is Silence.WARN
    assert idle.check("listening", budget, start + 616) is Silence.CLOSE


def test_timeouts_of_0_are_off_and_do_not_spin():
    clock = Clock()
    budget, idle = FrameBudget(Settings(), clock), IdleClock(hello_timeout_s=0, idle_timeout_s=0, idle_grace_s=10)
    assert idle.poll_s == 1.0
    assert idle.check("handshake", budget, clock.now + 1e6) is Silence.FINE
    assert idle.check("listening", budget, clock.now + 1e6) is Silence.FINE


def test_a_turn_in_progress_is_never_idle_and_silence_counts_from_its_end():
    clock = Clock()
    budget, idle = FrameBudget(Settings(), clock), IdleClock(hello_timeout_s=1, idle_timeout_s=10, idle_grace_s=1)
    assert idle.check("speaking", budget, clock.now + 500) is Silence.FINE
    assert idle.check("listening", budget, clock.now + 509) is Silence.FINE
    assert idle.check("listening", budget, clock.now + 510) is Silence.WARN


def test_a_turn_receiving_audio_is_closed_after_a_gap_in_its_frames_without_a_warning():
    clock = Clock()
    budget = FrameBudget(Settings(), clock)
    idle = IdleClock(hello_timeout_s=1, idle_timeout_s=300, idle_grace_s=10, audio_idle_timeout_s=5)
    assert idle.poll_s == 0.25
    assert idle.check("receiving_audio", budget, clock.now + 4.9) is Silence.FINE
    clock.now += 4.9
    budget.admit(binary=True)  # a frame: the gap starts again
    assert idle.check("receiving_audio", budget, clock.now + 4.9) is Silence.FINE
    assert idle.check("receiving_audio", budget, clock.now + 5.0) is Silence.CLOSE
    off = IdleClock(hello_timeout_s=1, idle_timeout_s=300, idle_grace_s=10, audio_idle_timeout_s=0)
    assert off.check("receiving_audio", budget, clock.now + 1e6) is Silence.FINE


@pytest.mark.parametrize(("toc", "rest", "ms"), [
    (0x00, b"", 10.0), (0x08, b"", 20.0), (0x18, b"", 60.0), (0x19, b"", 120.0),  # SILK: 1 frame, 2 frames
    (0x60, b"", 10.0), (0x68, b"", 20.0),                                       # hybrid
    (0x80, b"", 2.5), (0xF8, b"", 20.0), (0xF9, b"", 40.0), (0xFA, b"", 40.0),  # CELT
    (0xFB, b"\x03", 60.0), (0xFB, b"\x06", 120.0),                              # code 3: frame count in byte 2
    (0xFB, b"\x07", 120.0), (0xFB, b"\x00", 120.0), (0xFB, b"", 120.0),          # malformed: the most
    (0x1B, b"\x03", 120.0),                                                      # 3 x 60 ms is over 120: malformed
])
def test_an_opus_packet_declares_its_duration_in_its_toc_byte(toc, rest, ms):
    assert opus_packet_ms(bytes([toc]) + rest + b"payload") == ms if rest else opus_packet_ms(bytes([toc])) == ms


def test_turn_audio_is_bounded_by_duration_and_by_bytes():
    opus = TurnAudioBudget("opus")
    assert sum(opus.take(bytes([0x19, 0])) for _ in range(300)) == 250  # 120 ms packets: 30 s
    big = TurnAudioBudget("opus")
    assert [big.take(bytes([0xF8]) + bytes(2**20 - 1)) for _ in range(3)] == [True, False, False]
    assert big.bytes == 2**20 <= p.MAX_OPUS_TURN_BYTES < 2 * 2**20
    pcm = TurnAudioBudget("pcm16")
    assert pcm.take(bytes(p.MAX_PCM16_TURN_BYTES)) and not pcm.take(b"\x00\x00")


# ---------------------------------------------------------------------------------------------- the outbox


def audio(turn_id: int, size: int) -> Outbound:
    return Outbound(b"\x81" + bytes(size - 1), audio_turn=turn_id)


def drain_now(outbox: Outbox) -> list[Outbound]:
    async def everything() -> list[Outbound]:
        return [await outbox.get() for _ in range(len(outbox._items))]

    return asyncio.run(everything())


def test_a_slow_reader_loses_the_turns_audio_and_is_told_but_keeps_its_text():
    outbox = Outbox(max_audio_bytes=1000)
    outbox.put(audio(7, 400))
    outbox.put(Outbound('{"type":"reply.delta"}'))
    outbox.put(audio(7, 400))
    outbox.put(audio(7, 400))  # over: the turn's waiting audio goes
    outbox.put(audio(7, 100))  # and none of it is queued any more
    outbox.put(Outbound('{"type":"reply.done"}'))
    outbox.put(audio(8, 400))  # the next turn starts afresh
    items = drain_now(outbox)
    kinds = ["audio" if isinstance(i.data, bytes) else json.loads(i.data)["type"] for i in items]
    assert kinds == ["reply.delta", "error", "reply.done", "audio"]
    error = json.loads(items[1].data)
    assert (error["code"], error["turn_id"]) == ("slow_consumer", 7)
    assert items[-1].audio_turn == 8
    assert outbox.queued_bytes == outbox.queued_audio_bytes == 0


def test_a_reader_that_reads_nothing_overflows_the_outbox_and_is_dropped():
    dropped: list[bool] = []
    outbox = Outbox(max_bytes=1000, on_overflow=lambda: dropped.append(True))
    for _ in range(9):
        outbox.put(Outbound("x" * 100))
    outbox.put(Outbound(lambda: "timings"))  # counted before it is encoded
    assert dropped == [True] and outbox.overflowed and not outbox._items
    outbox.put(Outbound("later"))
    assert not outbox._items and outbox.queued_bytes == 0
    assert OUTBOUND_ENCODED_LATER_BYTES > 100


def test_dropping_a_turns_audio_frees_its_bytes():
    outbox = Outbox(max_audio_bytes=1000)
    outbox.put(audio(1, 600))
    assert outbox.drop_audio(1) == 1 and outbox.queued_audio_bytes == 0
    outbox.put(audio(2, 900))
    assert outbox.queued_audio_bytes == 900 and len(outbox._items) == 1


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak"), model_dir)


def test_a_slow_reader_still_gets_every_reply_done(engines):
    items = asyncio.run(_run_and_drain(engines))
    messages = [json.loads(i.data() if callable(i.data) else i.data) for i in items if not isinstance(i.data, bytes)]
    errors = [m for m in messages if m["type"] == "error"]
    assert [(e["code"], e["turn_id"]) for e in errors] == [("slow_consumer", 1)]
    (done,) = [m for m in messages if m["type"] == "reply.done"]
    assert done["text"] and not done["interrupted"]


async def _run_and_drain(engines: Engines) -> list[Outbound]:
    """A text turn whose reply audio is never read: 0.4 s of it waiting counts as slow here."""
    outbox = Outbox(max_audio_bytes=20_000)
    session = Session(engines, outbox)
    await session.receive_text('{"type": "hello", "v": 1}')
    await session.receive_text('{"type": "text", "turn_id": 1, "text": "Tell me about the moon."}')
    await session.turn.task
    assert outbox.queued_audio_bytes <= 20_000
    return [await outbox.get() for _ in range(len(outbox._items))]


# ---------------------------------------------------------------------------------------------- over /ws


def ws_client(engines: Engines, **settings) -> TestClient:
    configured = dataclasses.replace(engines, settings=dataclasses.replace(engines.settings, **settings))
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = configured, {}
    return TestClient(app)


def receive(ws) -> dict:
    return json.loads(ws.receive_text())


def closed_with(ws) -> int:
    """The close code, after whatever is still queued before the close."""
    while (message := ws.receive())["type"] != "websocket.close":
        pass
    return message["code"]


def test_text_frames_over_the_rate_are_dropped_after_one_rate_limited(engines):
    with ws_client(engines, max_messages_per_s=2, max_message_burst=3) as client, \
            client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        for _ in range(5):
            ws.send_text('{"type": "teleport"}')
        assert [receive(ws)["code"] for _ in range(3)] == ["bad_message", "bad_message", "rate_limited"]
        time.sleep(0.6)  # one token back
        ws.send_text('{"type": "text", "turn_id": 1, "text": "pause"}')
        first = receive(ws)  # the dropped frames were never answered
        assert (first["type"], first["intent"]) == ("intent", "media.pause")


def test_the_rate_limited_error_says_when_to_retry(engines):
    with ws_client(engines, max_messages_per_s=0.5, max_message_burst=1) as client, \
            client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        error = receive(ws)
        assert error["code"] == "rate_limited" and 1000 <= error["retry_after_ms"] <= 2000


def test_a_flood_is_closed_with_policy_violation(engines):
    with ws_client(engines, max_messages_per_s=0.01, max_message_burst=1) as client, \
            client.websocket_connect("/ws") as ws:
        for _ in range(1 + p.MAX_RATE_LIMITED_FRAMES):
            ws.send_text('{"type": "teleport"}')
        assert receive(ws)["code"] == "bad_message"
        assert receive(ws)["code"] == "rate_limited"
        assert receive(ws)["code"] == "rate_limited"  # the closing error
        assert closed_with(ws) == p.CLOSE_POLICY_VIOLATION


def test_audio_frames_have_their_own_budget(engines):
    with ws_client(engines, max_audio_frames_per_s=1, max_audio_frame_burst=4, max_messages_per_s=1,
                   max_message_burst=3) as client, client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        ws.send_text('{"type": "turn.start", "turn_id": 1, "transcript": "mute", "confidence": 0.9, "audio": "pcm16"}')
        for _ in range(6):
            ws.send_bytes(p.encode_audio_frame("pcm16", 1, b"\x00\x00" * 320))
        ws.send_text('{"type": "turn.audio_end", "turn_id": 1}')  # text budget untouched by the audio
        assert receive(ws)["code"] == "rate_limited"
        assert receive(ws)["intent"] == "media.mute"


def test_no_hello_in_time_is_closed_4408(engines):
    with ws_client(engines, hello_timeout_s=0.2) as client, client.websocket_connect("/ws") as ws:
        error = receive(ws)
        assert error["code"] == "idle_timeout" and "hello" in error["message"]
        assert closed_with(ws) == p.CLOSE_IDLE_TIMEOUT


def test_a_silent_session_is_warned_then_closed_4408(engines):
    with ws_client(engines, idle_timeout_s=0.3, idle_grace_s=0.3) as client, client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        started = time.monotonic()
        warning = receive(ws)
        assert warning["code"] == "idle_timeout" and "closes in" in warning["message"]
        assert receive(ws)["code"] == "idle_timeout"
        assert closed_with(ws) == p.CLOSE_IDLE_TIMEOUT
        assert time.monotonic() - started >= 0.55


def test_a_message_after_the_warning_keeps_the_session(engines):
    with ws_client(engines, idle_timeout_s=0.3, idle_grace_s=0.4) as client, client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        assert receive(ws)["code"] == "idle_timeout"
        ws.send_text('{"type": "text", "turn_id": 1, "text": "pause"}')
        assert receive(ws)["intent"] == "media.pause"


def test_a_long_turn_is_not_idle(engines):
    with ws_client(engines, idle_timeout_s=0.2, idle_grace_s=0.2) as client, client.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "hello", "v": 1}')
        assert receive(ws)["type"] == "welcome"
        ws.send_text('{"type": "text", "turn_id": 1, "text": "Tell me a long story about a brave knight."}')
        seen = []
        while not seen or seen[-1] != "timings":
            frame = ws.receive()
            if frame.get("text") is not None:
                message = json.loads(frame["text"])
                seen.append(message["type"] if message["type"] != "error" else message["code"])
        assert "idle_timeout" not in seen and "reply.done" in seen


# ---------------------------------------------------------------------------------------------- a real socket


class Serving:
    """uvicorn in a thread on a free port, over already loaded engines; accepted sockets inherit `sndbuf`."""

    def __init__(self, engines: Engines, sndbuf: int | None = None) -> None:
        app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
        app.state.engines, app.state.sessions = engines, {}
        self.app = app
        self.sock = socket.socket()
        if sndbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self.sock.getsockname()[1]}/ws"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off", ws_ping_interval=None))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Serving:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def test_a_client_that_does_not_read_is_dropped_and_the_server_keeps_nothing(engines, caplog):
    from websockets.asyncio.client import connect

    # The socket and uvicorn's 64 KiB write buffer fill first, then the outbox, up to its (small) bound.
    settings = dataclasses.replace(engines.settings, outbox_max_bytes=128 * 1024)
    with Serving(dataclasses.replace(engines, settings=settings), sndbuf=4096) as serving:
        sessions = serving.app.state.sessions

        async def turn_over() -> None:
            while sessions and next(iter(sessions.values())).turn is not None:
                await asyncio.sleep(0.05)

        async def scenario() -> int:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that reads nothing, tiny window
            sock.connect(serving.sock.getsockname())
            async with connect(serving.url, sock=sock, max_queue=1, ping_interval=None, close_timeout=1) as ws:
                await ws.send(json.dumps({"type": "hello", "v": 1}))
                assert json.loads(await ws.recv())["type"] == "welcome"  # the last frame it reads
                turns = 0
                while sessions and turns < 40:
                    turns += 1
                    await ws.send(json.dumps({"type": "text", "turn_id": turns,
                                              "text": "Tell me a long story about a dragon and a knight."}))
                    await asyncio.sleep(0.1)
                    await asyncio.wait_for(turn_over(), 60)
                return turns

        turns = asyncio.run(scenario())
        assert sessions == {} and turns < 40, f"still open after {turns} unread turns"
        assert "the client does not read" in caplog.text
