"""The `/ws` endpoint end to end, over Starlette's TestClient, on real models (SmolLM2, hibari, Whisper base)."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from voxline.bench.audio import RATE, espeak
from voxline.config import Settings
from voxline.server import protocol as p
from voxline.server.app import create_app
from voxline.server.engines import Engines
from voxline.server.pipeline import APOLOGY
from voxline.server.turn import MAX_PCM16_BYTES
from voxline.server.ws import websocket_endpoint
from voxline.server_asr import encode_opus

SMOLLM = "smollm2-135m-instruct-ct2"


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM), model_dir)


def ws_app(engines: Engines) -> Starlette:
    """The endpoint alone, as the app mounts it, over already loaded engines."""
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = engines, {}
    return app


@pytest.fixture
def app(engines):
    return ws_app(engines)


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


class Conversation:
    """A test-side client: sends protocol messages, collects what comes back until a given message type."""

    def __init__(self, ws) -> None:
        self.ws = ws

    def send(self, **message) -> None:
        self.ws.send_text(json.dumps(message))

    def hello(self, **fields) -> dict:
        self.send(type="hello", v=1, **fields)
        return self.next_message()

    def next_message(self) -> dict:
        return json.loads(self.ws.receive_text())

    def until(self, kind: str) -> tuple[list[dict], list[p.ReplyAudioFrame]]:
        """Messages and audio frames up to and including the first message of type `kind`."""
        messages: list[dict] = []
        audio: list[p.ReplyAudioFrame] = []
        while True:
            frame = self.ws.receive()
            if frame.get("bytes") is not None:
                audio.append(p.parse_reply_audio(frame["bytes"]))
                continue
            messages.append(json.loads(frame["text"]))
            if messages[-1]["type"] == kind:
                return messages, audio


def of_type(messages: list[dict], kind: str) -> list[dict]:
    return [m for m in messages if m["type"] == kind]


def test_a_text_turn_streams_text_and_audio_then_done_and_timings(client):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        welcome = talk.hello(lang="en")
        assert welcome["type"] == "welcome"
        talk.send(type="text", turn_id=1, text="what is the capital of France")
        messages, audio = talk.until("timings")
    deltas = of_type(messages, "reply.delta")
    (done,) = of_type(messages, "reply.done")
    timings = messages[-1]
    assert deltas and all(d["turn_id"] == 1 for d in deltas)
    assert done == {"type": "reply.done", "turn_id": 1, "text": "".join(d["text"] for d in deltas).strip(),
                    "interrupted": False}
    assert "Paris" in done["text"]
    assert audio and [f.seq for f in audio] == list(range(len(audio))) and {f.turn_id for f in audio} == {1}
    assert audio[-1].clause_end and sum(len(f.pcm) for f in audio) / 2 / p.REPLY_AUDIO_RATE_HZ > 0.5
    for key in ("intent_ms", "llm_first_token_ms", "first_clause_ms", "tts_first_audio_ms", "first_audio_sent_ms"):
        assert 0 < timings[key] <= timings["total_ms"], key
    assert timings["llm_first_token_ms"] <= timings["tts_first_audio_ms"] <= timings["first_audio_sent_ms"]
    assert timings["llm_tokens"] > 0 and timings["interrupted"] is False


def test_a_command_turn_gets_an_intent_and_its_confirmation_without_the_llm(client, engines):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello()
        talk.send(type="turn.start", turn_id=1, transcript="pause the music", confidence=0.92)
        messages, audio = talk.until("timings")
    intent = messages[0]
    assert intent == {"type": "intent", "turn_id": 1, "intent": "media.pause", "slots": {},
                      "text": "pause the music", "confirmation": "Paused.",
                      "grammar_version": engines.grammar.version}
    assert not of_type(messages, "reply.delta")
    assert of_type(messages, "reply.done")[0]["text"] == "Paused."
    assert audio  # the confirmation is spoken
    assert "llm_first_token_ms" not in messages[-1]


def test_barge_in_stops_the_reply_and_the_history_keeps_only_what_was_heard(client, app):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello()
        talk.send(type="text", turn_id=1, text="Tell me a long story about a brave knight and a dragon.")
        first_clause: list[p.ReplyAudioFrame] = []
        messages: list[dict] = []
        while not (first_clause and first_clause[-1].clause_end):
            frame = ws.receive()
            if frame.get("bytes") is not None:
                first_clause.append(p.parse_reply_audio(frame["bytes"]))
            else:
                messages.append(json.loads(frame["text"]))
        # The user heard the whole first clause, then spoke.
        played_ms = sum(len(f.pcm) for f in first_clause) / 2 / p.REPLY_AUDIO_RATE_HZ * 1000
        talk.send(type="barge_in", turn_id=1, played_ms=played_ms)
        more, late_audio = talk.until("timings")
        messages += more
        (session,) = app.state.sessions.values()
        history, first_clause_text = session.history.exchanges, session.last_turn.clauses[0].text
        # The session goes on.
        talk.send(type="text", turn_id=2, text="pause")
        after, _ = talk.until("timings")
    (done,) = of_type(messages, "reply.done")
    generated = "".join(d["text"] for d in of_type(messages, "reply.delta")).strip()
    assert done["interrupted"] is True and messages[-1]["interrupted"] is True
    assert done["text"] and generated.startswith(done["text"]) and len(done["text"]) < len(generated)
    assert done["text"] == first_clause_text  # exactly the clause that was heard
    assert all(f.clause == 0 for f in first_clause + late_audio)  # no later clause's audio after the cut
    assert history[-1].user.startswith("Tell me a long story") and history[-1].assistant == done["text"]
    assert of_type(after, "intent")[0]["intent"] == "media.pause"


def test_a_barge_in_after_the_reply_was_sent_still_trims_the_history(client, app):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello()
        talk.send(type="text", turn_id=1, text="what is the capital of France")
        talk.until("timings")
        # The page was still playing the reply when the user spoke over its start.
        talk.send(type="barge_in", turn_id=1, played_ms=0)
        talk.send(type="barge_in", turn_id=99, played_ms=0)  # answered, so we know the first was handled
        assert talk.next_message()["code"] == "illegal_state"
        (session,) = app.state.sessions.values()
        assert session.history.exchanges[-1].assistant == ""


def test_malformed_frames_get_error_codes_and_the_session_continues(client):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        ws.send_text('{"type": "text", "turn_id": 1, "text": "too early"}')
        assert talk.next_message()["code"] == "illegal_state"
        talk.hello()
        ws.send_text("{not json")
        ws.send_text('{"type": "teleport"}')
        ws.send_text('{"type": "text", "turn_id": "one", "text": "hi"}')
        ws.send_bytes(b"\x01\x00")
        ws.send_bytes(p.encode_audio_frame("pcm16", 1, b"\x00\x00"))  # audio outside a turn
        ws.send_text('{"type": "turn.audio_end", "turn_id": 1}')
        ws.send_text('{"type": "hello", "v": 1}')
        errors = [talk.next_message() for _ in range(7)]
        assert [(e["type"], e["code"]) for e in errors] == [("error", "bad_message")] * 4 + [
            ("error", "illegal_state")] * 3
        assert all(e["message"] for e in errors)
        talk.send(type="text", turn_id=1, text="next song")
        messages, _ = talk.until("timings")
        assert messages[0]["intent"] == "media.next"


def test_low_confidence_opus_audio_is_re_recognised_on_the_server(client):
    packets, head = encode_opus(espeak("please set a timer for ten minutes", speed=150), RATE)
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello(capabilities={"opus": True})
        talk.send(type="turn.start", turn_id=3, transcript="please set a time for tin minutes", confidence=0.31,
                  audio="opus", opus={"sample_rate": RATE, "channels": 1,
                                      "description": base64.b64encode(head).decode()})
        for packet in packets:
            ws.send_bytes(p.encode_audio_frame("opus", 3, packet))
        talk.send(type="turn.audio_end", turn_id=3)
        messages, _ = talk.until("timings")
    transcript, intent = messages[0], messages[1]
    assert transcript["type"] == "transcript" and transcript["source"] == "server"
    assert "timer" in transcript["text"].lower()
    assert (intent["intent"], intent["slots"]) == ("timer.set", {"seconds": 600})
    assert messages[-1]["asr_ms"] > 0


def test_confident_audio_turns_keep_the_browser_transcript(client):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello()
        talk.send(type="turn.start", turn_id=1, transcript="mute", confidence=0.9, audio="pcm16")
        ws.send_bytes(p.encode_audio_frame("pcm16", 1, b"\x10\x00" * 1600))
        talk.send(type="turn.audio_end", turn_id=1)
        messages, _ = talk.until("timings")
    assert not of_type(messages, "transcript") and messages[0]["intent"] == "media.mute"
    assert "asr_ms" not in messages[-1]


def test_too_much_turn_audio_is_limit_exceeded_and_the_turn_goes_on(client):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello()
        talk.send(type="turn.start", turn_id=1, transcript="unmute", confidence=0.9, audio="pcm16")
        ws.send_bytes(p.encode_audio_frame("pcm16", 1, b"\x00\x00" * (MAX_PCM16_BYTES // 2 + 1)))
        assert talk.next_message()["code"] == "limit_exceeded"
        talk.send(type="turn.audio_end", turn_id=1)
        messages, _ = talk.until("timings")
    assert messages[0]["intent"] == "media.unmute"


def test_a_failing_model_gets_an_apology_and_an_error_and_the_session_lives_on(client):
    with client.websocket_connect("/ws") as ws:
        talk = Conversation(ws)
        talk.hello(capabilities={"opus": True})
        talk.send(type="turn.start", turn_id=1, transcript="", confidence=0.1, audio="opus")
        ws.send_bytes(p.encode_audio_frame("opus", 1, b"\xff\xfe\xfd not opus at all"))
        talk.send(type="turn.audio_end", turn_id=1)
        messages, _ = talk.until("timings")
        assert [m["type"] for m in messages] == ["error", "reply.done", "timings"]
        assert messages[0]["code"] == "asr_failed" and messages[0]["turn_id"] == 1
        assert messages[1]["text"] == APOLOGY
        talk.send(type="text", turn_id=2, text="stop the music")
        messages, _ = talk.until("timings")
        assert messages[0]["intent"] == "media.stop"


@pytest.mark.parametrize(("hello", "code", "close"), [
    ({"v": 2}, "unsupported_version", p.CLOSE_UNSUPPORTED_VERSION),
    ({"v": 1, "lang": "xx"}, "unsupported_language", p.CLOSE_UNSUPPORTED_LANGUAGE),
])
def test_an_unservable_hello_closes_with_a_named_code(client, hello, code, close):
    with client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "hello", **hello}))
        assert json.loads(ws.receive_text())["code"] == code
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
    assert info.value.code == close


def test_a_server_with_a_token_refuses_a_hello_without_it(engines):
    secured = dataclasses.replace(engines, settings=dataclasses.replace(engines.settings, auth_token="s3cret"))
    with TestClient(ws_app(secured)) as client:
        with client.websocket_connect("/ws") as ws:
            talk = Conversation(ws)
            ws.send_text('{"type": "hello", "v": 1, "token": "guess"}')
            assert talk.next_message()["code"] == "unauthorized"
            with pytest.raises(WebSocketDisconnect) as info:
                ws.receive_text()
            assert info.value.code == p.CLOSE_UNAUTHORIZED
        with client.websocket_connect("/ws") as ws:
            assert Conversation(ws).hello(token="s3cret")["type"] == "welcome"


def test_bye_closes_normally(client, app):
    with client.websocket_connect("/ws") as ws:
        Conversation(ws).hello()
        ws.send_text('{"type": "bye"}')
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
    assert info.value.code == p.CLOSE_NORMAL
    assert app.state.sessions == {}


def test_a_peer_sending_garbage_is_closed_for_policy_violation(client):
    with client.websocket_connect("/ws") as ws:
        for _ in range(p.MAX_CONSECUTIVE_BAD_FRAMES):
            ws.send_bytes(b"\x00")
        for _ in range(p.MAX_CONSECUTIVE_BAD_FRAMES):
            assert json.loads(ws.receive_text())["code"] == "bad_message"
        with pytest.raises(WebSocketDisconnect) as info:
            ws.receive_text()
    assert info.value.code == p.CLOSE_POLICY_VIOLATION


def test_the_app_loads_models_once_and_reports_them_loaded():
    settings = Settings.from_env(llm_model=SMOLLM)
    with TestClient(create_app(settings)) as client:
        loaded = {m["name"]: m["loaded"] for m in client.get("/healthz").json()["models"]}
        assert loaded[SMOLLM] and loaded[settings.tts_model]
        assert not loaded[settings.server_asr_model]  # loaded by the first turn that needs it
        with client.websocket_connect("/ws") as ws:
            talk = Conversation(ws)
            talk.hello()
            talk.send(type="turn.start", turn_id=1, transcript="", confidence=0.0, audio="pcm16")
            pcm = (espeak("pause", speed=150)[:: RATE // 16000] * 32767).astype("<i2").tobytes()
            ws.send_bytes(p.encode_audio_frame("pcm16", 1, pcm))
            talk.send(type="turn.audio_end", turn_id=1)
            talk.until("timings")
        loaded = {m["name"]: m["loaded"] for m in client.get("/healthz").json()["models"]}
        assert loaded[settings.server_asr_model]
