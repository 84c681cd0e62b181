"""Protocol v1 parsing and encoding: every client message, good and bad frames, binary audio framing."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from voxline.errors import BadMessage
from voxline.server import protocol as p


@pytest.mark.parametrize(("frame", "expected"), [
    ({"type": "hello", "v": 1},
     p.Hello(v=1, lang="en", token=None, capabilities=p.Capabilities())),
    ({"type": "hello", "v": 1, "lang": "zh-CN", "token": "t",
      "capabilities": {"opus": True, "pcm16": False, "sample_rate": 48000}},
     p.Hello(v=1, lang="zh-CN", token="t", capabilities=p.Capabilities(opus=True, pcm16=False, sample_rate=48000))),
    ({"type": "turn.start", "turn_id": 3, "transcript": "pause", "confidence": 0.9},
     p.TurnStart(turn_id=3, transcript="pause", confidence=0.9)),
    ({"type": "turn.start", "turn_id": 4, "transcript": "", "confidence": 0.2, "audio": "opus",
      "want_server_asr": True, "opus": {"sample_rate": 16000, "channels": 1, "description": "T3B1c0hlYWQ="}},
     p.TurnStart(turn_id=4, transcript="", confidence=0.2, audio="opus", want_server_asr=True,
                 opus=p.OpusConfig(sample_rate=16000, channels=1, description="T3B1c0hlYWQ="))),
    ({"type": "turn.audio_end", "turn_id": 4}, p.AudioEnd(turn_id=4)),
    ({"type": "barge_in", "turn_id": 4, "played_ms": 1250.5}, p.BargeIn(turn_id=4, played_ms=1250.5)),
    ({"type": "text", "turn_id": 5, "text": "hello"}, p.TextTurn(turn_id=5, text="hello")),
    ({"type": "bye"}, p.Bye()),
    # unknown fields are ignored, so a newer client can add some
    ({"type": "bye", "reason": "tab closed"}, p.Bye()),
])
def test_client_messages_parse_into_typed_structs(frame, expected):
    assert p.parse_client_message(json.dumps(frame)) == expected


def test_parsing_accepts_bytes_too():
    assert p.parse_client_message(b'{"type":"bye"}') == p.Bye()


@pytest.mark.parametrize("frame", [
    "not json",
    "[]",
    '"hello"',
    "{}",
    '{"type": "hello"}',  # v is required
    '{"type": "hello", "v": "1"}',
    '{"type": "dance"}',
    '{"type": "turn.start", "turn_id": 1, "transcript": "x"}',  # confidence missing
    '{"type": "turn.start", "turn_id": 1, "transcript": "x", "confidence": 1.5}',
    '{"type": "turn.start", "turn_id": 1, "transcript": "x", "confidence": 0.5, "audio": "mp3"}',
    '{"type": "turn.start", "turn_id": 1, "transcript": "x", "confidence": 0.5, "opus": {"channels": 3}}',
    '{"type": "text", "turn_id": -1, "text": "x"}',
    '{"type": "text", "turn_id": 4294967296, "text": "x"}',
    '{"type": "text", "turn_id": 1.5, "text": "x"}',
    '{"type": "text", "turn_id": 1, "text": null}',
    '{"type": "barge_in", "turn_id": 1, "played_ms": -3}',
    '{"type": "text", "turn_id": 1, "text": "' + "a" * (p.MAX_TEXT_CHARS + 1) + '"}',
])
def test_malformed_messages_are_bad_message(frame):
    with pytest.raises(BadMessage) as info:
        p.parse_client_message(frame)
    assert info.value.code == "bad_message"


def test_oversized_text_frames_are_refused_before_parsing():
    frame = json.dumps({"type": "bye", "pad": "x" * p.MAX_TEXT_FRAME_BYTES})
    with pytest.raises(BadMessage, match="limit"):
        p.parse_client_message(frame)


def test_opus_description_decodes_from_base64():
    assert p.OpusConfig(description=base64.b64encode(b"OpusHead").decode()).description_bytes() == b"OpusHead"
    assert p.OpusConfig().description_bytes() is None
    with pytest.raises(BadMessage):
        p.OpusConfig(description="not base64!").description_bytes()


def test_uplink_audio_frames_round_trip():
    for kind in ("opus", "pcm16"):
        frame = p.parse_audio_frame(p.encode_audio_frame(kind, 7, b"\x01\x02\x03\x04"))
        assert frame == p.AudioFrame(kind, 7, b"\x01\x02\x03\x04")


def test_uplink_header_layout_is_little_endian():
    data = p.encode_audio_frame("pcm16", 0x01020304, b"\x00\x00")
    assert data[:8] == bytes([p.FRAME_PCM16, 0, 0, 0, 0x04, 0x03, 0x02, 0x01])


@pytest.mark.parametrize("data", [
    b"",
    bytes([p.FRAME_OPUS, 0, 0, 0, 1, 0, 0, 0]),  # header without payload
    struct.pack("<BBHI", 0x7F, 0, 0, 1) + b"xx",  # unknown kind
    struct.pack("<BBHI", p.FRAME_REPLY_AUDIO, 0, 0, 1) + b"xx",  # a server kind from the client
    struct.pack("<BBHI", p.FRAME_PCM16, 0, 0, 1) + b"xxx",  # odd PCM16 length
])
def test_bad_binary_frames_are_bad_message(data):
    with pytest.raises(BadMessage):
        p.parse_audio_frame(data)


def test_reply_audio_frames_round_trip_with_aligned_samples():
    pcm = struct.pack("<4h", 0, 1000, -1000, 32767)
    data = p.encode_reply_audio(9, 12, 2, pcm, clause_end=True)
    assert p.REPLY_HEADER_BYTES % 2 == 0  # Int16Array(buffer, 12) needs an even offset
    assert data[p.REPLY_HEADER_BYTES:] == pcm
    frame = p.parse_reply_audio(data)
    assert (frame.turn_id, frame.seq, frame.clause, frame.clause_end, frame.pcm) == (9, 12, 2, True, pcm)
    assert not p.parse_reply_audio(p.encode_reply_audio(9, 13, 2, pcm, clause_end=False)).clause_end


@pytest.mark.parametrize("message", [
    p.Welcome(session_id="s", v=1, limits={"max_text_chars": 1000}, reply_audio={"sample_rate": 24000},
              models={"llm": "m"}),
    p.Transcript(turn_id=1, text="hello"),
    p.IntentMessage(turn_id=1, intent="media.volume_set", slots={"level": 30}, text="volume 30",
                    confirmation="Volume 30.", grammar_version="abc"),
    p.ReplyDelta(turn_id=1, text=" Paris"),
    p.ReplyDone(turn_id=1, text="Paris.", interrupted=True),
    p.Timings(turn_id=1, interrupted=False, intent_ms=0.4, llm_first_token_ms=80.0),
    p.ErrorMessage(code="illegal_state", message="no", turn_id=2),
])
def test_server_messages_round_trip(message):
    text = p.encode_message(message)
    assert json.loads(text)["type"] == type(message).__struct_config__.tag
    assert p.parse_server_message(text) == message


def test_timings_and_errors_leave_out_what_did_not_apply():
    assert json.loads(p.encode_message(p.Timings(turn_id=1, interrupted=False, intent_ms=1.0))) == {
        "type": "timings", "turn_id": 1, "interrupted": False, "intent_ms": 1.0}
    assert json.loads(p.encode_message(p.ErrorMessage(code="bad_message", message="m"))) == {
        "type": "error", "code": "bad_message", "message": "m"}


def test_close_codes_are_distinct_and_in_their_ranges():
    codes = {name: value for name, value in vars(p).items() if name.startswith("CLOSE_")}
    assert len(set(codes.values())) == len(codes)
    registered = {1000, 1001, 1007, 1008, 1009, 1011, 1012}  # RFC 6455 and IANA's registry (1012: service restart)
    for name, value in codes.items():
        assert value in registered or 4000 <= value <= 4999, name
