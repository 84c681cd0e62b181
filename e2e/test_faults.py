"""The backend killed in the middle of a spoken answer: the page says it is offline, a cached command still works,
and once a server is back on the same port the page reconnects by itself and answers a question again.

A real `voxline serve` process (SmolLM2, espeak-ng replies) is killed with SIGKILL, so nothing closes the socket
politely; hibari-tts speech through Chromium's fake microphone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from voxline.bench.audio import RATE, hibari, write_wav
from e2e.conftest import E2E_LLM
from e2e.harness import RECORD_EVENTS, launch_chromium

SERVER_START_S = 30.0
RECONNECT_MAX_MS = 2000
"""The page's backoff cap for this test (`?vx.reconnectMaxMs=`): the server is back within a second or two."""
SCRIPT = [  # (what is said, silence after it in seconds)
    ("pause the music", 2.5),  # taught to the cache by the local grammar while all is well
    ("tell me a long story about a dragon who loves to bake bread", 4.0),  # the server dies while answering it
    ("pause the music", 9.0),  # offline: from the cache; the server comes back during the silence after it
    ("what is the capital of france", 8.0),  # answered by the new server
]


def _script_wav(path: Path) -> tuple[Path, list[tuple[float, float]]]:
    """The WAV and where each utterance's speech lies (seconds from the start)."""
    parts, spans, at = [np.zeros(RATE, np.float32)], [], 1.0
    for i, (text, silence_s) in enumerate(SCRIPT):
        speech = hibari(text, seed=i)
        spans.append((at, at + len(speech) / RATE))
        parts += [speech, np.zeros(int(silence_s * RATE), np.float32)]
        at = spans[-1][1] + silence_s
    audio = np.concatenate(parts)
    audio += 1e-4 * np.random.default_rng(0).standard_normal(audio.size).astype(np.float32)  # a room is never silent
    return write_wav(path, audio), spans


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(port: int, log: Path) -> subprocess.Popen:
    """`voxline serve` on `port`, returned once /healthz answers."""
    env = {**os.environ, "VOXLINE_LLM_MODEL": E2E_LLM, "VOXLINE_TTS_ENGINE": "espeak"}
    process = subprocess.Popen([sys.executable, "-m", "voxline.cli", "serve", "--port", str(port)], env=env,
                               stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    pytest.fail(f"voxline serve did not start on port {port}: {log.read_text()[-2000:]}")


def test_a_killed_backend_is_shown_cached_commands_work_and_the_page_reconnects(browser_type, tmp_path):
    wav, spans = _script_wav(tmp_path / "faults.wav")
    port = _free_port()
    log = tmp_path / "serve.log"
    server = _serve(port, log)
    browser = launch_chromium(browser_type, wav)
    try:
        # The test's polling predicates are evaluated in the page, which the page's CSP (no 'unsafe-eval') refuses.
        page = browser.new_context(permissions=["microphone"], bypass_csp=True).new_page()
        page.add_init_script(RECORD_EVENTS)
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        page.goto(f"http://127.0.0.1:{port}/?vx.reconnectMaxMs={RECONNECT_MAX_MS}")

        def events(name: str) -> list[dict]:
            return [e for e in page.evaluate("window.__vx") if e["name"] == name]

        def wait(predicate: str, timeout_s: float) -> None:
            page.wait_for_function(f"(() => {{ const ev = window.__vx; return {predicate}; }})()",
                                   timeout=timeout_s * 1000, polling=50)

        def timeline() -> str:
            return "\n".join(f"{e['audio_t']:.2f} {e['name']} " + " ".join(
                f"{k}={e[k]!r}" for k in ("text", "intent", "source", "final", "interrupted", "code") if k in e)
                for e in page.evaluate("window.__vx")) + "\n" + log.read_text()[-1500:]

        # The local grammar must be up to teach the cache, so the microphone (and the WAV) starts only then.
        page.wait_for_function("window.voxline?.intents?.ready === true && window.voxline.link?.connected === true",
                               timeout=120_000)
        page.evaluate("window.voxline.listen()")

        wait("ev.some(e => e.name === 'intent')", timeout_s=spans[0][1] + 20)
        assert [(i["intent"], i["source"]) for i in events("intent")] == [("media.pause", "local")], timeline()

        # The question is being answered: kill the server between two tokens of its reply.
        wait("ev.some(e => e.name === 'reply' && !e.final)", timeout_s=spans[1][1] + 30)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        killed_turn = [r for r in events("reply") if not r["final"]][-1]["turn_id"]
        wait("ev.some(e => e.name === 'error' && e.code === 'backend_unreachable')", timeout_s=10)
        assert page.locator("#state").get_attribute("data-state") == "offline", timeline()
        ends = [r["interrupted"] for r in events("reply") if r["final"] and r["turn_id"] == killed_turn]
        assert ends == [True], "the killed turn ends once, where it stopped: " + timeline()

        # Offline, the taught command still acts, from the cache.
        wait("ev.filter(e => e.name === 'intent').length >= 2", timeout_s=spans[2][1] + 20)
        assert (events("intent")[1]["intent"], events("intent")[1]["source"]) == ("media.pause", "cache"), timeline()
        assert page.evaluate("window.voxline.link.connected") is False, "nothing answered on that port yet"

        # A server comes back on the same port: the page reconnects by itself and answers the last question.
        restarted = time.monotonic()
        server = _serve(port, log)
        page.wait_for_function("window.voxline.link.connected === true", timeout=(RECONNECT_MAX_MS + 5000))
        print(f"server restart and reconnect took {time.monotonic() - restarted:.1f} s")
        assert page.evaluate("window.voxline.capture.audioTime") < spans[3][0], "reconnected before the question"
        wait(f"ev.some(e => e.name === 'reply' && e.final && e.turn_id > {killed_turn})", timeout_s=spans[3][1] + 40)
        answer = [r for r in events("reply") if r["final"]][-1]
        assert answer["interrupted"] is False and answer["text"].strip(), timeline()
        assert len(sockets) >= 2 and len(set(sockets)) == 1, sockets
        assert [e["code"] for e in events("error") if e["code"] != "backend_unreachable"] == [], timeline()
        links = [e["state"] for e in events("link")]
        assert links[:3] == ["connecting", "open", "offline"] and links[-1] == "open", links
        assert set(links) == {"connecting", "open", "offline"}, f"never closed for good: {links}"
        assert all(a != b for a, b in zip(links, links[1:])), f"each change reported once: {links}"
    finally:
        browser.close()
        if server.poll() is None:
            server.kill()
            server.wait(10)
