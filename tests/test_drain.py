"""Shutting down without losing a turn: the drain in-process, and SIGTERM to a real `voxline serve`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient

from voxline.config import Settings
from voxline.server import protocol as p
from voxline.server.drain import Drain
from voxline.server.engines import Engines
from voxline.server.pipeline import APOLOGY
from voxline.server.ws import websocket_endpoint

SMOLLM = "smollm2-135m-instruct-ct2"
STORY = "Tell me a long story about a brave knight and a dragon."


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak"), model_dir)


def draining_app(engines: Engines, timeout_s: float) -> Starlette:
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = engines, {}
    app.state.drain = Drain(app.state.sessions, timeout_s)
    return app


def hello(ws) -> None:
    ws.send_text('{"type": "hello", "v": 1}')
    assert json.loads(ws.receive_text())["type"] == "welcome"


def until_closed(ws) -> tuple[list[dict], int]:
    """Every text message until the close, and the close code."""
    messages = []
    while (frame := ws.receive())["type"] != "websocket.close":
        if frame.get("text") is not None:
            messages.append(json.loads(frame["text"]))
    return messages, frame["code"]


def first_delta(ws) -> dict:
    while True:
        frame = ws.receive()
        if frame.get("text") is not None and json.loads(frame["text"])["type"] == "reply.delta":
            return json.loads(frame["text"])


def test_the_turn_in_flight_finishes_new_turns_and_sessions_are_refused_then_1012(engines):
    app = draining_app(engines, timeout_s=60)
    drain = app.state.drain
    with TestClient(app) as client:
        with client.websocket_connect("/ws") as talking, client.websocket_connect("/ws") as idle:
            hello(talking)
            hello(idle)
            talking.send_text(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
            deltas = [first_delta(talking)]
            drained = client.portal.start_task_soon(drain.run)
            while not drain.draining:
                time.sleep(0.01)
            # A new turn is refused, and still answered.
            idle.send_text('{"type": "text", "turn_id": 1, "text": "pause the music"}')
            refused, idle_close = until_closed(idle)
            assert [m["type"] for m in refused[:3]] == ["error", "reply.done", "timings"]
            assert (refused[0]["code"], refused[0]["turn_id"]) == ("server_restarting", 1)
            assert refused[1]["text"] == APOLOGY
            # A new connection is refused.
            with client.websocket_connect("/ws") as late:
                late_messages, late_close = until_closed(late)
            assert [m["code"] for m in late_messages] == ["server_restarting"] and late_close == 1012
            # The turn in flight ends as it would have.
            messages, close = until_closed(talking)
            drained.result(timeout=30)
    deltas += [m for m in messages if m["type"] == "reply.delta"]
    (done,) = [m for m in messages if m["type"] == "reply.done"]
    assert done["interrupted"] is False and done["text"] == "".join(d["text"] for d in deltas).strip()
    assert [m["type"] for m in messages if m["type"] != "reply.delta"] == ["reply.done", "timings", "error"]
    assert messages[-1]["code"] == "server_restarting"
    assert close == idle_close == p.CLOSE_SERVICE_RESTART
    assert app.state.sessions == {}


def test_a_turn_that_outlasts_the_drain_is_cut_and_told_so(engines):
    app = draining_app(engines, timeout_s=0.2)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        hello(ws)
        ws.send_text(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
        first_delta(ws)
        drained = client.portal.start_task_soon(app.state.drain.run)
        messages, close = until_closed(ws)
        drained.result(timeout=30)
    tail = [m for m in messages if m["type"] != "reply.delta"]
    assert [m["type"] for m in tail] == ["error", "reply.done", "timings", "error"]
    assert (tail[0]["code"], tail[0]["turn_id"]) == ("server_restarting", 1) and "0.2 s" in tail[0]["message"]
    assert tail[1]["text"] == APOLOGY and tail[-1]["code"] == "server_restarting"
    assert close == p.CLOSE_SERVICE_RESTART


def test_a_drain_with_nothing_in_flight_closes_at_once(engines):
    app = draining_app(engines, timeout_s=60)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        hello(ws)
        started = time.monotonic()
        client.portal.call(app.state.drain.run)
        messages, close = until_closed(ws)
    assert time.monotonic() - started < 5
    assert [m["code"] for m in messages] == ["server_restarting"] and close == p.CLOSE_SERVICE_RESTART


# ---------------------------------------------------------------------------------------------- SIGTERM


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_to_voxline_serve_lets_the_turn_in_flight_finish_then_closes_1012(tmp_path):
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    port = free_port()
    env = {**os.environ, "VOXLINE_LLM_MODEL": SMOLLM, "VOXLINE_TTS_ENGINE": "espeak", "VOXLINE_DRAIN_TIMEOUT_S": "30"}
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "voxline.cli", "serve", "--port", str(port)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "voxline serve did not start"
            time.sleep(0.5)

        async def turn_across_sigterm() -> tuple[list[dict], int, int]:
            async with connect(f"ws://127.0.0.1:{port}/ws") as ws:
                await ws.send(json.dumps({"type": "hello", "v": 1}))
                assert json.loads(await ws.recv())["type"] == "welcome"
                await ws.send(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
                messages, audio_frames = [], 0
                while not messages or messages[-1]["type"] != "reply.delta":
                    frame = await ws.recv()
                    if isinstance(frame, str):
                        messages.append(json.loads(frame))
                server.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosed) as closed:
                    while True:
                        frame = await asyncio.wait_for(ws.recv(), 60)
                        if isinstance(frame, str):
                            messages.append(json.loads(frame))
                        else:
                            audio_frames += 1
                return messages, closed.value.rcvd.code, audio_frames

        messages, close_code, audio_frames = asyncio.run(turn_across_sigterm())
        returncode = server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    output = log_path.read_text()
    deltas = "".join(m["text"] for m in messages if m["type"] == "reply.delta").strip()
    (done,) = [m for m in messages if m["type"] == "reply.done"]
    assert done["interrupted"] is False and done["text"] == deltas and deltas, output
    assert [m["type"] for m in messages if m["type"] != "reply.delta"] == ["reply.done", "timings", "error"]
    assert messages[-1]["code"] == "server_restarting"
    assert audio_frames > 0  # the reply was also spoken to the end
    assert close_code == p.CLOSE_SERVICE_RESTART
    assert returncode in (0, -signal.SIGTERM), output
    assert "Traceback" not in output
