"""`voxline talk` against a real server (SmolLM2, hibari, Whisper base), run as the CLI a user would run."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from voxline.bench.audio import compose, hibari, write_wav
from voxline.client import EventPrinter, TalkOptions, talk
from voxline.client_audio import FRAME_MS, FRAME_SAMPLES, UPLINK_RATE_HZ, Speaker, read_audio_file
from voxline.config import Settings
from e2e.harness import ServerThread

TOKEN = "test-token"
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def server():
    with ServerThread(Settings.from_env(llm_model="smollm2-135m-instruct-ct2", auth_token=TOKEN)) as running:
        yield running


@pytest.fixture(scope="module")
def ws_url(server):
    return server.url.replace("http://", "ws://") + "/ws"


def spoken(folder: Path, name: str, text: str) -> Path:
    audio, _ = compose([(text, hibari(text, seed=3))], lead_s=0.3, gap_s=0.0, tail_s=0.3)
    return write_wav(folder / name, audio)


@pytest.fixture(scope="module")
def question(tmp_path_factory):
    return spoken(tmp_path_factory.mktemp("talk"), "question.wav", "what is the capital of France")


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    return spoken(tmp_path_factory.mktemp("talk"), "command.wav", "pause the music")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voxline.cli", "talk", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def events_of(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wav_question_prints_transcript_reply_and_timings_then_exits(ws_url, question):
    result = run_cli("--server", ws_url, "--token", TOKEN, "--wav", str(question), "--json")
    assert result.returncode == 0, result.stderr
    events = events_of(result)
    names = [e["name"] for e in events]
    assert names[:3] == ["voxline:ready", "voxline:speech-start", "voxline:speech-end"], names
    assert names[-1] == "voxline:timings"
    assert all(isinstance(e["t"], float) and isinstance(e["audio_t"], float) for e in events)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)

    (transcript,) = [e for e in events if e["name"] == "voxline:transcript"]
    assert "capital" in transcript["text"].lower() and "france" in transcript["text"].lower()
    assert transcript["final"] is True and transcript["source"] == "server"
    replies = [e for e in events if e["name"] == "voxline:reply"]
    assert replies[-1]["final"] is True and replies[-1]["text"].strip()
    assert all(not r["final"] for r in replies[:-1]) and len(replies) > 1  # streamed, token by token
    (audio,) = [e for e in events if e["name"] == "voxline:reply-audio"]
    assert audio["first"] is True and audio["played"] is False  # no speaker on a test machine

    timings = events[-1]
    end_of_speech = next(e for e in events if e["name"] == "voxline:speech-end")
    assert timings["ttfa_ms"] == pytest.approx(audio["t"] - end_of_speech["t"], abs=5.0)
    assert 0 < timings["ttfa_ms"] < 60_000
    assert {"asr_ms", "llm_first_token_ms", "first_audio_sent_ms", "total_ms"} <= timings["server"].keys()
    # Real time: the 2 s file took about 2 s to send.
    assert end_of_speech["t"] - events[1]["t"] == pytest.approx(end_of_speech["end_t"] * 1000, rel=0.2)


def test_spoken_command_comes_back_as_an_intent_and_its_confirmation_is_saved(ws_url, command, tmp_path):
    reply = tmp_path / "reply.wav"
    result = run_cli("--server", ws_url, "--token", TOKEN, "--wav", str(command), "--fast", "--json",
                  "--save-reply", str(reply))
    assert result.returncode == 0, result.stderr
    events = events_of(result)
    (intent,) = [e for e in events if e["name"] == "voxline:intent"]
    assert intent["intent"] == "media.pause" and intent["source"] == "server" and intent["slots"] == {}
    final = [e for e in events if e["name"] == "voxline:reply" and e["final"]]
    assert final[-1]["text"] == intent["confirmation"]
    with wave.open(str(reply)) as saved:
        assert saved.getframerate() == 24_000 and saved.getnchannels() == 1
        assert saved.getnframes() / 24_000 > 0.3  # the spoken confirmation


def test_readable_output_without_json(ws_url, command):
    result = run_cli("--server", ws_url, "--token", TOKEN, "--wav", str(command), "--fast", "--no-play")
    assert result.returncode == 0, result.stderr
    assert "intent: media.pause" in result.stdout
    assert "first audio" in result.stderr and "Traceback" not in result.stderr


def test_wrong_token_is_a_clear_auth_error(ws_url, command):
    result = run_cli("--server", ws_url, "--token", "wrong", "--wav", str(command), "--json")
    assert result.returncode == 2
    assert "error [unauthorized]" in result.stderr and "--token" in result.stderr
    assert "Traceback" not in result.stderr


def test_server_down_is_a_clear_error_with_a_nonzero_exit():
    result = run_cli("--server", f"ws://127.0.0.1:{free_port()}/ws", "--text", "hello", "--json")
    assert result.returncode == 2
    assert "error [backend_unreachable]" in result.stderr and "voxline serve" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_not_a_voxline_server_is_a_clear_error(server):
    result = run_cli("--server", server.url.replace("http://", "ws://") + "/nothing", "--text", "hello")
    assert result.returncode == 2
    assert "error [backend_unreachable]" in result.stderr and "Traceback" not in result.stderr


def _has_audio_devices() -> bool:
    import sounddevice

    return len(sounddevice.query_devices()) > 0


def test_list_devices_without_audio_devices_says_so():
    result = run_cli("--list-devices")
    assert "Traceback" not in result.stderr
    if _has_audio_devices():
        assert result.returncode == 0 and "name" in result.stdout
    else:
        assert result.returncode == 2
        assert "error [audio_device_unavailable]: no audio devices found" in result.stderr


def test_microphone_without_a_device_says_what_to_use_instead(ws_url):
    if _has_audio_devices():
        pytest.skip("this machine has audio devices")
    result = run_cli("--server", ws_url, "--token", TOKEN)
    assert result.returncode == 2
    assert "error [audio_device_unavailable]" in result.stderr and "--wav FILE" in result.stderr
    assert "Traceback" not in result.stderr


class WavMicrophone:
    """Stands in for `Microphone`: a file's frames, then silence, four times faster than real time."""

    def __init__(self, wav: Path, silence_s: float = 3.0) -> None:
        samples = read_audio_file(wav)
        self.samples = np.concatenate([samples, np.zeros(int(silence_s * UPLINK_RATE_HZ), np.int16)])
        self.frames: asyncio.Queue[bytes] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._deliver())

    async def _deliver(self) -> None:
        for offset in range(0, self.samples.size - FRAME_SAMPLES + 1, FRAME_SAMPLES):
            self.frames.put_nowait(self.samples[offset:offset + FRAME_SAMPLES].tobytes())
            await asyncio.sleep(FRAME_MS / 1000 / 4)

    def close(self) -> None:
        self.task.cancel()


def test_microphone_turn_is_endpointed_answered_and_played(ws_url, question, fake_sounddevice, run_async):
    out, err = io.StringIO(), io.StringIO()
    options = TalkOptions(server=ws_url, token=TOKEN, json=True)

    async def run() -> int:
        speaker = Speaker(None, 24_000, asyncio.get_running_loop(), on_first_sample=lambda turn_id: None)
        return await talk(options, EventPrinter(True, out=out, err=err), microphone=WavMicrophone(question),
                          speaker=speaker)

    assert run_async(run()) == 0, err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    names = [e["name"] for e in events]
    assert names[:3] == ["voxline:ready", "voxline:speech-start", "voxline:speech-end"], names
    assert events[2]["reason"] == "silence"
    assert any(e["name"] == "voxline:transcript" and "France" in e["text"] for e in events), events
    (audio,) = [e for e in events if e["name"] == "voxline:reply-audio"]
    assert audio["played"] is True
    assert events[-1]["name"] == "voxline:timings" and events[-1]["ttfa_ms"] > 0
    assert len(fake_sounddevice.played.strip(b"\x00")) > 24_000  # over half a second of reply reached the speaker
