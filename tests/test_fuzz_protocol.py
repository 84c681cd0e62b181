"""Hostile input on `/ws`: the decoders and a live `Session` fuzzed with hypothesis, then the named cases over a real
socket (a 10 MB frame, invalid UTF-8, a transcript over the limit, a wrong PCM16 rate), then sessions with site keys:
random tokens in-process, and random sessions with Opus frames up to the frame limit against `voxline serve`, whose
memory must stay within `FUZZ_MEMORY_BOUND_BYTES`.

The fuzz runs in the suite, so it is bounded and reproducible: a fixed number of examples each, `derandomize=True`
(the examples follow from the test's code, not from a random seed) and no example database.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from voxline.config import Settings
from voxline.errors import BadMessage, VoxlineError
from voxline.server import protocol as p
from voxline.server.engines import Engines
from voxline.server.outbox import Outbound, Outbox
from voxline.server.session import Session, SessionState
from voxline.server.ws import websocket_endpoint

SMOLLM = "smollm2-135m-instruct-ct2"
TURN_TIMEOUT_S = 60.0
"""A turn of the fuzz must end within this (a few hundred ms on SmolLM2 with 8 reply tokens): else it hangs."""
FRAME_TIMEOUT_S = 5.0
"""Handing one frame to the session never waits on a model."""


def _fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])  # run_async keeps no state


def _codes(cls: type[VoxlineError]) -> set[str]:
    return {cls.code}.union(*(_codes(sub) for sub in cls.__subclasses__()))


ERROR_CODES = _codes(VoxlineError)
"""Every code a server `error` may carry: those of the one exception tree."""
CLOSE_CODES = {value for name, value in vars(p).items() if name.startswith("CLOSE_")}


@pytest.fixture(scope="module")
def engines(model_dir):
    # espeak and 8 reply tokens: a fuzzed turn costs a few hundred milliseconds, not seconds.
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak", reply_max_tokens=8), model_dir)


# ---------------------------------------------------------------------------------------------- strategies

any_chars = st.characters(exclude_categories=())  # lone surrogates and control characters included
hostile_text = st.one_of(
    st.text(any_chars, max_size=40),
    st.text(st.characters(categories=["Cc", "Cf", "Zl", "Zp"]), max_size=20),
    st.sampled_from(["", " ", "\x00", "\ud800", "\udfff\ud800", "<|im_end|>", "a" * (p.MAX_TEXT_CHARS + 1),
                     "ü" * p.MAX_TEXT_CHARS, "x" * (p.MAX_TEXT_FRAME_BYTES + 1)]),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), hostile_text,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([-1, 0, 1, 2, 16000, 44100, 2**32 - 1, 2**32, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
FIELD_NAMES = ["type", "v", "lang", "token", "capabilities", "opus", "pcm16", "sample_rate", "turn_id", "transcript",
               "confidence", "audio", "want_server_asr", "channels", "description", "played_ms", "text", "reply_audio",
               "tier"]
near_schema = st.builds(
    lambda kind, fields: {"type": kind, **fields} if kind is not None else fields,
    st.one_of(st.none(), st.sampled_from(p.CLIENT_MESSAGE_TYPES), hostile_text),
    st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), json_values, max_size=6),
)


@st.composite
def text_frames(draw) -> str | bytes:
    """What a WebSocket text frame may carry, valid or not: JSON near the schema, encoded several ways, sometimes
    with one byte changed; or anything at all."""
    shape = draw(st.sampled_from(["json", "json-bytes", "corrupted", "text", "bytes"]))
    if shape == "text":
        return draw(st.text(any_chars, max_size=200))
    if shape == "bytes":
        return draw(st.binary(max_size=200))
    document = json.dumps(draw(near_schema), ensure_ascii=draw(st.booleans()))
    if shape == "json":
        return document
    data = document.encode("utf-8", "surrogatepass")  # a lone surrogate becomes invalid UTF-8
    if shape == "corrupted" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data


binary_frames = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda kind, flags, turn_id, payload: struct.pack("<BBHI", kind, flags, 0, turn_id) + payload,
              st.sampled_from([p.FRAME_OPUS, p.FRAME_PCM16, p.FRAME_REPLY_AUDIO, 0x00, 0xFF]),
              st.integers(0, 255), st.integers(0, 2**32 - 1), st.binary(max_size=64)),
)
utterances = st.text(st.characters(exclude_categories=["Cs"]), max_size=p.MAX_TEXT_CHARS)
turn_ids = st.integers(0, 2**32 - 1)
confidences = st.floats(0.0, 1.0)
valid_messages = st.one_of(
    st.builds(p.Hello, v=st.integers(-(2**63), 2**63 - 1), lang=st.text(min_size=2, max_size=35),
              token=st.none() | st.text(max_size=40),
              capabilities=st.builds(p.Capabilities, opus=st.booleans(), pcm16=st.booleans(),
                                     sample_rate=st.integers(1, 2**31), reply_audio=st.booleans(),
                                     tier=st.none() | st.integers(1, 5))),
    st.builds(p.TurnStart, turn_id=turn_ids, transcript=utterances, confidence=confidences,
              audio=st.sampled_from([None, "opus", "pcm16"]), want_server_asr=st.booleans(),
              opus=st.none() | st.builds(p.OpusConfig, sample_rate=st.integers(1, 2**31), channels=st.integers(1, 2),
                                         description=st.none() | st.text(max_size=40))),
    st.builds(p.AudioEnd, turn_id=turn_ids),
    st.builds(p.BargeIn, turn_id=turn_ids, played_ms=st.floats(0.0, 1e12)),
    st.builds(p.TextTurn, turn_id=turn_ids, text=utterances),
    st.just(p.Bye()),
)
small_turn_ids = st.integers(0, 4)  # few enough that turns, audio and barge-ins meet
plausible_messages = st.one_of(
    st.builds(p.Hello, v=st.sampled_from([1, 1, 2]), lang=st.sampled_from(["en", "en-US", "zh", "xx"]),
              capabilities=st.builds(p.Capabilities, opus=st.booleans(), pcm16=st.booleans(),
                                     sample_rate=st.sampled_from([16000, 16000, 44100]))),
    st.builds(p.TurnStart, turn_id=small_turn_ids, transcript=st.sampled_from(["", "pause", "what is two plus two"]),
              confidence=confidences, audio=st.sampled_from([None, "opus", "pcm16"]), want_server_asr=st.booleans()),
    st.builds(p.AudioEnd, turn_id=small_turn_ids),
    st.builds(p.BargeIn, turn_id=small_turn_ids, played_ms=st.floats(0.0, 5000.0)),
    st.builds(p.TextTurn, turn_id=small_turn_ids, text=st.sampled_from(["mute", "tell me a joke", "\x00\x07"])),
    st.just(p.Bye()),
).map(p.encode_message)
plausible_audio = st.builds(p.encode_audio_frame, st.sampled_from(["opus", "pcm16"]), small_turn_ids,
                            st.binary(min_size=1, max_size=64))
frames = st.one_of(text_frames(), plausible_messages, binary_frames.map(lambda data: ("binary", data)),
                   plausible_audio.map(lambda data: ("binary", data)))


# ---------------------------------------------------------------------------------------------- decoders


@_fuzz(200)
@given(text_frames())
def test_the_text_decoder_raises_only_bad_message(data):
    try:
        message = p.parse_client_message(data)
    except BadMessage as exc:
        assert exc.code == "bad_message" and exc.message
        assert len(exc.message) < 600, "an error message never echoes a whole frame back"
    else:
        assert isinstance(message, p.ClientMessage.__args__)


@_fuzz(200)
@given(valid_messages)
def test_every_valid_message_round_trips(message):
    assert p.parse_client_message(p.encode_message(message)) == message


@_fuzz(300)
@given(binary_frames)
def test_the_binary_decoder_reads_its_header_or_raises_bad_message(data):
    try:
        frame = p.parse_audio_frame(data)
    except BadMessage as exc:
        assert exc.code == "bad_message" and exc.message
        return
    kind, _flags, _reserved, turn_id = struct.unpack_from("<BBHI", data)
    assert (frame.kind, frame.turn_id, frame.payload) == (
        {p.FRAME_OPUS: "opus", p.FRAME_PCM16: "pcm16"}[kind], turn_id, data[p.UPLINK_HEADER_BYTES:])


def test_a_lone_surrogate_is_bad_message_not_a_crash():
    with pytest.raises(BadMessage, match="UTF-8"):
        p.parse_client_message('{"type": "text", "turn_id": 1, "text": "\ud800"}')


@pytest.mark.parametrize(("frame", "advice"), [
    ("{not json", "one JSON object per text frame"),
    ("[1, 2]", "one JSON object per text frame"),
    ('{"type": "teleport"}', "hello, turn.start"),
    ('{"v": 1}', "hello, turn.start"),
    ('{"type": "text", "turn_id": "one", "text": "hi"}', "docs/protocol.md"),
    ('{"type": "text", "turn_id": 1, "text": "' + "a" * (p.MAX_TEXT_CHARS + 1) + '"}', "<= 1000"),
])
def test_each_decoding_error_says_what_to_do(frame, advice):
    with pytest.raises(BadMessage) as info:
        p.parse_client_message(frame)
    assert advice in info.value.message


def test_the_frame_limit_fits_every_legal_frame():
    thirty_seconds_pcm16 = int(p.MAX_TURN_AUDIO_SECONDS * p.PCM16_UPLINK_RATE_HZ * 2)
    assert p.MAX_FRAME_BYTES >= p.UPLINK_HEADER_BYTES + thirty_seconds_pcm16
    assert p.MAX_FRAME_BYTES >= 4 * p.MAX_TEXT_FRAME_BYTES  # a text frame's characters in UTF-8


# ---------------------------------------------------------------------------------------------- a live session


class RecordingOutbox(Outbox):
    """Keeps every frame the session queued, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Outbound] = []

    def put(self, item: Outbound) -> None:
        self.sent.append(item)
        super().put(item)


def _decoded(item: Outbound) -> dict | bytes:
    if item.close_code is not None:
        return {"close": item.close_code}
    data = item.data() if callable(item.data) else item.data
    if isinstance(data, bytes):
        p.parse_reply_audio(data)
        return data
    p.parse_server_message(data)  # every frame is a well-formed server message
    return json.loads(data)


def _check(frames: list[dict | bytes]) -> None:
    for frame in frames:
        if isinstance(frame, dict) and "close" in frame:
            assert frame["close"] in CLOSE_CODES
        elif isinstance(frame, dict) and frame["type"] == "error":
            assert frame["code"] in ERROR_CODES and frame["message"].strip(), frame


async def _feed(session: Session, frame: str | bytes | tuple[str, bytes]) -> None:
    if isinstance(frame, tuple):
        await asyncio.wait_for(session.receive_bytes(frame[1]), FRAME_TIMEOUT_S)
    else:
        await asyncio.wait_for(session.receive_text(frame), FRAME_TIMEOUT_S)


def _rejected_by_decoder(frame: str | bytes | tuple[str, bytes]) -> bool:
    try:
        if isinstance(frame, tuple):
            p.parse_audio_frame(frame[1])
        else:
            p.parse_client_message(frame)
    except BadMessage:
        return True
    return False


@_fuzz(150)
@given(greet=st.booleans(), inbound=st.lists(frames, min_size=1, max_size=20))
def test_a_session_fed_random_frames_answers_each_bad_one_with_an_error(engines, run_async, greet, inbound):
    async def scenario():
        outbox = RecordingOutbox()
        session = Session(engines, outbox)
        if greet:
            await session.receive_text('{"type": "hello", "v": 1, "capabilities": {"opus": true}}')
        for frame in inbound:
            if session.state is SessionState.CLOSED:
                break  # the socket reader stops here too
            before = len(outbox.sent)
            await _feed(session, frame)
            answer = [_decoded(item) for item in outbox.sent[before:]]
            _check(answer)
            if _rejected_by_decoder(frame):
                assert [f.get("code", f.get("close")) for f in answer] in (
                    ["bad_message"], ["bad_message", p.CLOSE_POLICY_VIOLATION]), answer
        turn = session.turn
        await asyncio.wait_for(session.close(), FRAME_TIMEOUT_S)
        assert session.state is SessionState.CLOSED
        if turn is not None and turn.task is not None:
            assert turn.task.done()

    run_async(scenario())


async def _whole_turn(session: Session, outbox: RecordingOutbox, before: int) -> list[dict | bytes]:
    turn = session.turn
    if turn is not None and turn.task is not None:
        await asyncio.wait_for(asyncio.shield(turn.task), TURN_TIMEOUT_S)
    answer = [_decoded(item) for item in outbox.sent[before:]]
    _check(answer)
    return answer


@_fuzz(8)
@given(text=utterances | hostile_text, via=st.sampled_from(["text", "turn.start"]))
def test_any_utterance_gets_a_whole_turn(engines, run_async, text, via):
    frame = json.dumps({"type": "text", "turn_id": 1, "text": text} if via == "text" else
                       {"type": "turn.start", "turn_id": 1, "transcript": text, "confidence": 0.9})

    async def scenario():
        outbox = RecordingOutbox()
        session = Session(engines, outbox)
        await session.receive_text('{"type": "hello", "v": 1}')
        before = len(outbox.sent)
        await session.receive_text(frame)
        answer = await _whole_turn(session, outbox, before)
        kinds = [f["type"] if isinstance(f, dict) else "audio" for f in answer]
        if len(text) > p.MAX_TEXT_CHARS or any("\ud800" <= c <= "\udfff" for c in text):  # lone surrogates
            assert kinds == ["error"] and answer[0]["code"] == "bad_message"
        else:
            assert kinds.count("reply.done") == 1 and kinds[-2:] == ["reply.done", "timings"], kinds
        assert session.state is SessionState.LISTENING
        await session.close()

    run_async(scenario())


@_fuzz(4)
@given(packets=st.lists(st.binary(min_size=1, max_size=160), min_size=1, max_size=25))
def test_random_bytes_as_opus_end_the_turn_and_the_session_goes_on(engines, run_async, packets):
    async def scenario():
        outbox = RecordingOutbox()
        session = Session(engines, outbox)
        await session.receive_text('{"type": "hello", "v": 1, "capabilities": {"opus": true}}')
        before = len(outbox.sent)
        await session.receive_text(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "", "confidence": 0.2,
                                               "audio": "opus", "want_server_asr": True}))
        for packet in packets:
            await session.receive_bytes(p.encode_audio_frame("opus", 1, packet))
        await session.receive_text('{"type": "turn.audio_end", "turn_id": 1}')
        answer = await _whole_turn(session, outbox, before)
        messages = [f for f in answer if isinstance(f, dict)]
        assert [m["type"] for m in messages].count("reply.done") == 1
        assert {m["code"] for m in messages if m["type"] == "error"} <= {"asr_failed"}
        before = len(outbox.sent)
        await session.receive_text('{"type": "text", "turn_id": 2, "text": "pause the music"}')
        answer = await _whole_turn(session, outbox, before)
        assert answer[0]["type"] == "intent" and answer[0]["intent"] == "media.pause"
        await session.close()

    run_async(scenario())


# ---------------------------------------------------------------------------------------------- a real socket


@contextmanager
def serving(engines: Engines, **config):
    """uvicorn on a free loopback port, serving `/ws` over `engines`, with extra uvicorn `config`."""
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = engines, {}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"ws://127.0.0.1:{sock.getsockname()[1]}/ws"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _next_json(ws) -> dict:
    while isinstance(frame := ws.recv(timeout=30), bytes):
        pass
    return json.loads(frame)


def _until(ws, kind: str) -> list[dict]:
    messages = [_next_json(ws)]
    while messages[-1]["type"] != kind:
        messages.append(_next_json(ws))
    return messages


def _still_serves(ws, turn_id: int) -> None:
    ws.send(json.dumps({"type": "text", "turn_id": turn_id, "text": "next song"}))
    assert _until(ws, "timings")[0]["intent"] == "media.next"


@pytest.fixture(scope="module")
def bounded_url(engines):
    """The server as `voxline serve` runs it: uvicorn's frame limit set to `MAX_FRAME_BYTES`."""
    with serving(engines, ws_max_size=p.MAX_FRAME_BYTES) as url:
        yield url


@pytest.fixture(scope="module")
def default_url(engines):
    """uvicorn with its own default frame limit (16 MiB), as an app embedded without `voxline serve` runs."""
    with serving(engines) as url:
        yield url


def test_a_10_mb_frame_is_refused_before_it_is_buffered(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        assert _next_json(ws)["type"] == "welcome"
        ws.send(json.dumps({"type": "text", "turn_id": 1, "text": "x" * (10 * 2**20)}))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=30)
    assert info.value.rcvd.code == p.CLOSE_MESSAGE_TOO_BIG and str(p.MAX_FRAME_BYTES) in info.value.rcvd.reason


def test_a_10_mb_frame_within_uvicorns_default_limit_is_bad_message_and_the_session_goes_on(default_url):
    with connect(default_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        assert _next_json(ws)["type"] == "welcome"
        ws.send(json.dumps({"type": "text", "turn_id": 1, "text": "x" * (10 * 2**20)}))
        error = _next_json(ws)
        assert error["code"] == "bad_message" and "limit" in error["message"] and len(error["message"]) < 300
        _still_serves(ws, 2)


def test_a_text_frame_over_the_json_limit_is_bad_message_and_the_session_goes_on(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        _next_json(ws)
        ws.send(json.dumps({"type": "bye", "pad": "x" * p.MAX_TEXT_FRAME_BYTES}))
        error = _next_json(ws)
        assert error["code"] == "bad_message" and f"{p.MAX_TEXT_FRAME_BYTES}-byte limit" in error["message"]
        _still_serves(ws, 1)


def test_a_pcm16_frame_of_thirty_seconds_still_fits(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        _next_json(ws)
        ws.send(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "mute", "confidence": 0.9,
                            "audio": "pcm16"}))
        ws.send(p.encode_audio_frame("pcm16", 1, b"\x00\x00" * int(p.MAX_TURN_AUDIO_SECONDS * 16000)))
        ws.send(json.dumps({"type": "turn.audio_end", "turn_id": 1}))
        assert _until(ws, "timings")[0]["intent"] == "media.mute"


def test_invalid_utf8_in_a_text_frame_closes_1007_and_the_server_lives_on(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        _next_json(ws)
        ws.send(b'{"type": "text", "turn_id": 1, "text": "caf\xe9"}', text=True)  # Latin-1, not UTF-8
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=30)
    assert info.value.rcvd.code == p.CLOSE_INVALID_PAYLOAD
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        assert _next_json(ws)["type"] == "welcome"


def test_a_transcript_over_the_limit_is_bad_message_naming_it(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1}))
        _next_json(ws)
        ws.send(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "a" * (p.MAX_TEXT_CHARS + 1),
                            "confidence": 0.9}))
        error = _next_json(ws)
        assert error["code"] == "bad_message"
        assert "transcript" in error["message"] and str(p.MAX_TEXT_CHARS) in error["message"]
        _still_serves(ws, 1)  # the refused turn_id was never claimed


def test_a_wrong_pcm16_rate_is_a_clear_error(bounded_url):
    with connect(bounded_url) as ws:
        ws.send(json.dumps({"type": "hello", "v": 1, "capabilities": {"pcm16": True, "sample_rate": 44100}}))
        error = _next_json(ws)
        assert error["code"] == "bad_message"
        assert "44100" in error["message"] and "resample to 16000 Hz" in error["message"]
        ws.send(json.dumps({"type": "hello", "v": 1}))
        assert _next_json(ws)["type"] == "welcome"


# ---------------------------------------------------------------------------------------------- with site keys

SHOP = "https://shop.example"
KEYS_JSON = json.dumps([{"id": "shop", "secret": "shop-secret-0123456789abcdef", "origins": [SHOP], "public": True},
                        {"id": "app", "secret": "app-secret-0123456789abcdef0", "max_sessions": 2}])
FUZZ_MEMORY_BOUND_BYTES = 64 * 2**20
"""Server RSS growth allowed over the whole socket fuzz below (sessions one after another, Opus frames up to the
1 MiB frame limit): a session keeps at most `MAX_OPUS_TURN_BYTES` (1.9 MB) of turn audio and frees it when the turn
ends, and a frame in flight is held about three times (socket buffer, frame, payload)."""


def _tokens():
    from voxline.server.auth import mint_token, parse_site_keys

    keys = parse_site_keys(KEYS_JSON)
    minted = st.sampled_from([("shop", SHOP), ("shop", None), ("app", None), ("app", SHOP)]).map(
        lambda kv: mint_token(keys[kv[0]], kv[1]))

    def mutate(token: str, at: int, char: str) -> str:
        at %= len(token)
        return token[:at] + char + token[at + 1:]

    return st.one_of(
        st.none(), minted, st.builds(mutate, minted, st.integers(0, 200), st.characters()),
        st.text(max_size=300), st.sampled_from(["v1.shop.²³.abc.def", "v1.shop.١٢.abc.def", "v1.shop.9999999999999.a.b",
                                                "v1..1.a.b", "v1.shop.1.a.b.c", "v1.shop.-1.a.b"]),
        st.builds(lambda parts: ".".join(parts), st.lists(st.text(max_size=12), min_size=5, max_size=5)))


@_fuzz(150)
@given(token=_tokens(), origin=st.sampled_from([SHOP, None, "https://evil.example"]),
       inbound=st.lists(frames, max_size=8))
def test_a_keyed_session_fed_random_tokens_and_frames_never_fails_outside_the_protocol(engines, run_async, token,
                                                                                         origin, inbound):
    from voxline.server.admission import Gate, Peer

    keyed = Settings(llm_model=SMOLLM, tts_engine="espeak", reply_max_tokens=8, site_keys=KEYS_JSON)

    async def scenario():
        outbox = RecordingOutbox()
        gate = Gate(keyed)
        peer = Peer(origin, "10.0.0.1", "127.0.0.1:8000")
        try:
            gate.admit("s", peer)
        except VoxlineError as exc:
            assert exc.code == "origin_not_allowed" and origin == "https://evil.example"
            return
        session = Session(engines, outbox, "s", gate=gate, peer=peer)
        await _feed(session, json.dumps({"type": "hello", "v": 1, "token": token, "capabilities": {"opus": True}}))
        answer = [_decoded(item) for item in outbox.sent]
        _check(answer)
        assert answer[0].get("type") == "welcome" or answer[0]["code"] in {
            "unauthenticated", "origin_not_allowed", "too_many_sessions"}, answer
        for frame in inbound:
            if session.state is SessionState.CLOSED:
                break
            await _feed(session, frame)
        _check([_decoded(item) for item in outbox.sent])
        await asyncio.wait_for(session.close(), FRAME_TIMEOUT_S)
        gate.release("s")
        assert gate.open_sessions() == 0 and gate.open_sessions(key_id="shop") == 0

    run_async(scenario())


OPUS_TOC_BYTES = [0x08, 0x1B, 0x19, 0xF8, 0xFB, 0xFF, 0x00, 0x4B]
"""TOC bytes of Opus packets: SILK, hybrid and CELT configurations, codes 0-3 (one to many frames)."""
opus_sizes = st.one_of(st.integers(1, 4000),
                       st.sampled_from([65_536, 512 * 1024, p.MAX_FRAME_BYTES - p.UPLINK_HEADER_BYTES]))
big_opus = st.builds(lambda toc, size, fill, turn: p.encode_audio_frame("opus", turn, bytes([toc]) + bytes([fill]) *
                                                                        (size - 1)),
                     st.sampled_from(OPUS_TOC_BYTES), opus_sizes, st.integers(0, 255), st.sampled_from([1, 1, 2]))
socket_frames = st.one_of(text_frames(), plausible_messages, big_opus.map(lambda data: ("binary", data)),
                          st.just(("binary", b"\x01\x00\x00\x00\x01\x00\x00\x00" + b"x" * (p.MAX_FRAME_BYTES + 1))))
socket_sessions = st.tuples(
    _tokens(), st.sampled_from([SHOP, None, "https://evil.example"]),
    st.lists(st.one_of(socket_frames, st.just(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "mute",
                                                          "confidence": 0.2, "audio": "opus",
                                                          "want_server_asr": True})),
                       st.just('{"type": "turn.audio_end", "turn_id": 1}')), max_size=10))


@pytest.fixture(scope="module")
def keyed_serve():
    from test_hardening_serve import Serve

    with Serve(VOXLINE_SITE_KEYS=KEYS_JSON) as server:
        yield server


def test_a_keyed_server_fuzzed_over_real_sockets_stays_within_its_memory_bound(keyed_serve):
    """Random sessions (tokens valid, altered or junk; origins; frames including Opus packets up to the frame
    limit) one after another against `voxline serve` with site keys: every error is a known one, every close code a
    named one, never 1011, and the server's RSS grows by at most `FUZZ_MEMORY_BOUND_BYTES`."""
    from test_hardening_serve import peak_rss

    closes: list[int] = []

    @_fuzz(40)
    @given(socket_sessions)
    def one_session(session):
        token, origin, inbound = session
        with connect(keyed_serve.ws, origin=origin, max_size=None, open_timeout=30) as ws:
            try:
                ws.send(json.dumps({"type": "hello", "v": 1, "token": token, "capabilities": {"opus": True}}))
                for frame in inbound:
                    ws.send(frame[1] if isinstance(frame, tuple) else frame)
                ws.send('{"type": "bye"}')
                while True:
                    frame = ws.recv(timeout=TURN_TIMEOUT_S)
                    if isinstance(frame, str):
                        message = json.loads(frame)
                        if message["type"] == "error":
                            assert message["code"] in ERROR_CODES and message["message"], message
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
                if code is None and closed.sent is None:
                    # No close frame either way: only after a frame over the limit, which the server never reads
                    # (`CLOSE_MESSAGE_TOO_BIG`); reproduced on demand, ~1 in 3 such sessions on this machine.
                    assert any(isinstance(frame, tuple) and len(frame[1]) > p.MAX_FRAME_BYTES for frame in inbound), (
                        "a socket closed without a close frame, though every frame was within the limit", closed)
                    return
                assert code in CLOSE_CODES, (code, closed)
                assert code != p.CLOSE_INTERNAL_ERROR
                closes.append(code)

    with peak_rss(keyed_serve) as rss:
        one_session()
    growth = rss["peak"] - rss["before"]
    print(f"server RSS {rss['before'] / 2**20:.0f} MiB, peak {rss['peak'] / 2**20:.0f} MiB over {len(closes)} sessions")
    assert growth <= FUZZ_MEMORY_BOUND_BYTES, f"server RSS grew by {growth / 2**20:.0f} MiB"
    assert p.CLOSE_UNAUTHENTICATED in closes, closes
    from voxline.server.auth import mint_token, parse_site_keys

    with connect(keyed_serve.ws) as ws:  # still serving, and a good session still ends normally
        ws.send(json.dumps({"type": "hello", "v": 1, "token": mint_token(parse_site_keys(KEYS_JSON)["app"])}))
        assert _next_json(ws)["type"] == "welcome"
        ws.send('{"type": "bye"}')
        with pytest.raises(ConnectionClosed) as info:
            while True:
                ws.recv(timeout=FRAME_TIMEOUT_S)
    assert info.value.rcvd.code == p.CLOSE_NORMAL
