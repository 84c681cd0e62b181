"""Issue 16 over uvicorn on a loopback port in this process (so a test can reach the engines and the sessions): a
model failing after the first reply audio went out, a finished turn's audio freed, forwarded addresses from a named
proxy, a parked audio turn during a drain, and model files altered with their size and mtime kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from voxline import paths
from voxline.config import Settings
from voxline.errors import DigestMismatch
from voxline.models import load_manifest
from voxline.models.supply import StartupVerification, is_current
from voxline.server import protocol as p
from voxline.server.app import create_app
from voxline.server.drain import Drain
from voxline.server.limits import uvicorn_options
from voxline.server.engines import Engines
from voxline.server.pipeline import APOLOGY
from voxline.server.ws import websocket_endpoint

SMOLLM = "smollm2-135m-instruct-ct2"
STORY = "Tell me a long story about a brave knight and a dragon."


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak", reply_max_tokens=48), model_dir)


@contextmanager
def serving(app, settings: Settings):
    """uvicorn as `voxline serve` configures it (`uvicorn_options`), on a free loopback port, in a thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on", **uvicorn_options(settings)))

    def run() -> None:
        with suppress(SystemExit):  # uvicorn's answer to a failed startup
            server.run(sockets=[sock])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def ws_app(engines: Engines, **settings) -> Starlette:
    configured = dataclasses.replace(engines, settings=dataclasses.replace(engines.settings, **settings))
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = configured, {}
    return app


def frames_until(ws, kind: str) -> list:
    """Messages (dicts) and audio frames (bytes) up to the first message of type `kind`."""
    frames = []
    while True:
        frame = ws.recv(timeout=60)
        frames.append(frame if isinstance(frame, bytes) else json.loads(frame))
        if isinstance(frames[-1], dict) and frames[-1]["type"] == kind:
            return frames


def hello(ws) -> None:
    ws.send(json.dumps({"type": "hello", "v": 1, "capabilities": {"opus": True}}))
    assert json.loads(ws.recv(timeout=30))["type"] == "welcome"


# ---------------------------------------------------------------------------------------------- a failure mid-reply


@contextmanager
def espeak_failing_after(engines: Engines, calls: int):
    """espeak-ng that works `calls` times, then exits 1 (a synthesizer that dies in the middle of a reply)."""
    binary = engines.tts.binary
    with tempfile.TemporaryDirectory() as folder:
        counter, wrapper = Path(folder) / "calls", Path(folder) / "espeak-ng"
        counter.write_text("")
        wrapper.write_text(f'#!/bin/sh\necho x >> {counter}\n'
                           f'[ "$(wc -l < {counter})" -le {calls} ] || {{ echo "voice lost" >&2; exit 1; }}\n'
                           f'exec {binary} "$@"\n')
        wrapper.chmod(stat.S_IRWXU)
        engines.tts.binary = str(wrapper)
        engines.phrases.clear()
        try:
            yield
        finally:
            engines.tts.binary = binary


def test_a_tts_failure_after_the_first_audio_ends_the_turn_with_a_typed_error_and_the_session_goes_on(engines):
    app = ws_app(engines)
    with serving(app, engines.settings) as address, connect(f"ws://{address}/ws") as ws:
        hello(ws)
        with espeak_failing_after(engines, calls=1):
            ws.send(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
            frames = frames_until(ws, "timings")
        kinds = ["audio" if isinstance(f, bytes) else f["type"] for f in frames]
        assert "audio" in kinds and kinds.index("audio") < kinds.index("error"), kinds
        (error,) = [f for f in frames if isinstance(f, dict) and f["type"] == "error"]
        assert (error["code"], error["turn_id"]) == ("tts_failed", 1) and "espeak-ng" in error["message"]
        (done,) = [f for f in frames if isinstance(f, dict) and f["type"] == "reply.done"]
        assert done["text"] == APOLOGY and kinds[-2:] == ["reply.done", "timings"]
        ws.send(json.dumps({"type": "text", "turn_id": 2, "text": "what is two plus two"}))
        frames = frames_until(ws, "timings")
        assert not [f for f in frames if isinstance(f, dict) and f["type"] == "error"]
        assert any(isinstance(f, bytes) for f in frames)
        (session,) = app.state.sessions.values()
        assert len(session.history.exchanges) == 1  # the failed exchange stays out of the dialog


# ---------------------------------------------------------------------------------------------- audio of a turn


def test_a_finished_turns_audio_is_freed(engines):
    app = ws_app(engines)
    with serving(app, engines.settings) as address, connect(f"ws://{address}/ws") as ws:
        hello(ws)
        ws.send(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "pause", "confidence": 0.95,
                            "audio": "opus"}))
        for _ in range(50):
            ws.send(p.encode_audio_frame("opus", 1, bytes([0xF8]) + bytes(999)))
        ws.send(json.dumps({"type": "turn.audio_end", "turn_id": 1}))
        assert frames_until(ws, "timings")[0]["intent"] == "media.pause"
        (session,) = app.state.sessions.values()
        assert session.last_turn.turn_id == 1 and session.last_turn.chunks == []
        assert session.last_turn.audio_budget.bytes == 50_000  # it was there while the turn ran


# ---------------------------------------------------------------------------------------------- forwarded addresses


def test_forwarded_addresses_are_believed_from_a_named_proxy_only(engines):
    settings = dataclasses.replace(engines.settings, forwarded_allow_ips="127.0.0.1", max_sessions_per_address=2)
    app = ws_app(engines, max_sessions_per_address=2)
    with serving(app, settings) as address:
        with connect(f"ws://{address}/ws", additional_headers={"X-Forwarded-For": "203.0.113.1"}) as a, \
                connect(f"ws://{address}/ws", additional_headers={"X-Forwarded-For": "203.0.113.1"}) as b, \
                connect(f"ws://{address}/ws", additional_headers={"X-Forwarded-For": "203.0.113.2"}) as c:
            for ws in (a, b, c):
                hello(ws)
            with connect(f"ws://{address}/ws", additional_headers={"X-Forwarded-For": "203.0.113.1"}) as d:
                assert json.loads(d.recv(timeout=30))["code"] == "too_many_sessions"
            peers = sorted(s.peer.address for s in app.state.sessions.values())
            assert peers == ["203.0.113.1", "203.0.113.1", "203.0.113.2"]


# ---------------------------------------------------------------------------------------------- the drain


def test_a_drain_does_not_wait_for_a_turn_whose_audio_never_ends(engines):
    app = ws_app(engines, audio_idle_timeout_s=0)  # the idle watch off: the drain alone must not wait for it
    app.state.drain = Drain(app.state.sessions, timeout_s=30.0)

    async def start_drain(request):  # SIGTERM's part, on the server's own loop
        app.state.drain.task = asyncio.create_task(app.state.drain.run())
        return PlainTextResponse("draining")

    app.router.routes.append(Route("/drain", start_drain))
    with serving(app, engines.settings) as address, connect(f"ws://{address}/ws") as ws:
        hello(ws)
        ws.send(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "", "confidence": 0.1,
                            "audio": "pcm16"}))
        ws.send(p.encode_audio_frame("pcm16", 1, bytes(640)))
        while not any(s.turn for s in app.state.sessions.values()):
            time.sleep(0.01)
        started = time.monotonic()
        urllib.request.urlopen(f"http://{address}/drain", timeout=30).read()
        messages = []
        with pytest.raises(ConnectionClosed) as info:
            while True:
                frame = ws.recv(timeout=30)
                if isinstance(frame, str):
                    messages.append(json.loads(frame))
        assert time.monotonic() - started < 15.0  # not the drain's 30 s
    assert info.value.rcvd.code == p.CLOSE_SERVICE_RESTART
    assert [(m["type"], m.get("code")) for m in messages][:2] == [("error", "server_restarting"), ("reply.done", None)]
    assert messages[0]["turn_id"] == 1


# ---------------------------------------------------------------------------------------------- altered models


@pytest.fixture
def cache_with_copies(tmp_path, monkeypatch):
    """A cache whose models link to the real ones, except `copies`, which are real copies a test may alter."""
    real = paths.cache_dir()

    def make(*copies: str) -> Path:
        cache = tmp_path / "cache"
        (cache / "models").mkdir(parents=True)
        shutil.copytree(real / "stamps", cache / "stamps")
        for folder in (real / "models").iterdir():
            if folder.name in copies:
                shutil.copytree(folder, cache / "models" / folder.name, copy_function=shutil.copy2)
                for artifact in (cache / "models" / folder.name).iterdir():  # the stamps' mtimes, as built
                    original = (folder / artifact.name).stat()
                    os.utime(artifact, ns=(original.st_atime_ns, original.st_mtime_ns))
            else:
                (cache / "models" / folder.name).symlink_to(folder)
        monkeypatch.setenv(paths.CACHE_ENV, str(cache))
        return cache

    return make


def flip_byte_keeping_mtime(path: Path, offset: int = 1000) -> None:
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_browser_model_altered_with_size_and_mtime_kept_is_not_served(cache_with_copies):
    cache_with_copies("silero-vad-v5-16k")
    spec = load_manifest().model("silero-vad-v5-16k")
    (artifact,) = spec.artifacts
    flip_byte_keeping_mtime(paths.model_dir(spec.name) / artifact)
    assert is_current(spec)  # the stamp cannot tell: this is what the server used to trust
    settings = Settings.from_env(llm_model=SMOLLM, tts_engine="espeak")
    with serving(create_app(settings), settings) as address:
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{address}/wasm_models/{spec.name}/{artifact}", timeout=30)
        assert info.value.code == 503 and "voxline models fetch" in info.value.read().decode()
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{address}/healthz", timeout=30)
        body = json.loads(info.value.read())
        assert info.value.code == 503 and body["status"] == "degraded"
        verified = {m["name"]: m["verified"] for m in body["models"]}
        assert verified.pop(spec.name) is False and all(verified.values())
        other = load_manifest().model("smart-turn-v3.2")
        name = next(iter(other.artifacts))
        with urllib.request.urlopen(f"http://{address}/wasm_models/{other.name}/{name}", timeout=30) as answer:
            import hashlib

            assert hashlib.sha256(answer.read()).hexdigest() == other.artifacts[name]


def test_a_served_model_altered_after_startup_is_still_served_as_it_was_verified(cache_with_copies):
    cache_with_copies("silero-vad-v5-16k")
    spec = load_manifest().model("silero-vad-v5-16k")
    (artifact,) = spec.artifacts
    settings = Settings.from_env(llm_model=SMOLLM, tts_engine="espeak")
    with serving(create_app(settings), settings) as address:
        flip_byte_keeping_mtime(paths.model_dir(spec.name) / artifact)
        with urllib.request.urlopen(f"http://{address}/wasm_models/{spec.name}/{artifact}", timeout=30) as answer:
            import hashlib

            assert hashlib.sha256(answer.read()).hexdigest() == spec.artifacts[artifact]


def test_a_loaded_model_altered_with_size_and_mtime_kept_stops_startup(cache_with_copies):
    cache_with_copies("hibari-heart")
    spec = load_manifest().model("hibari-heart")
    artifact = max(spec.artifacts, key=lambda a: (paths.model_dir(spec.name) / a).stat().st_size)
    flip_byte_keeping_mtime(paths.model_dir(spec.name) / artifact)
    assert is_current(spec)
    settings = Settings.from_env(llm_model=SMOLLM, tts_engine="espeak")
    with pytest.raises(RuntimeError, match="did not start"), serving(create_app(settings), settings):
        pass
    # Why it did not start, and the fix, as the server's startup check says it (uvicorn logs it on "uvicorn.error",
    # whose handlers depend on which test configured uvicorn's logging first, so it is read at the source).
    verification = StartupVerification(load_manifest(), served=[], loaded=["hibari-heart"])
    with pytest.raises(DigestMismatch, match="differ from their pins") as refused:
        verification.require(["hibari-heart"])
    assert "hibari-heart" in str(refused.value) and "voxline models fetch" in str(refused.value)
