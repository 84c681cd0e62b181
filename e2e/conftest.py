"""End-to-end fixtures: a real `voxline serve` app on a loopback port, driven by Debian's Chromium.

Chromium's fake microphone plays a WAV file chosen per test; pass it with
`@pytest.mark.parametrize("fake_mic", [path], indirect=True)` or override the `fake_mic` fixture.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from voxline.config import Settings
from voxline.server.app import create_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]


class ServerThread:
    """uvicorn in a daemon thread on a free port; `url` is ready once the socket listens."""

    def __init__(self, settings: Settings) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("voxline test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self._sock.close()


@pytest.fixture(scope="session")
def voxline_server():
    settings = Settings.from_env(llm_model="smollm2-135m-instruct-ct2")
    with ServerThread(settings) as server:
        yield server


@pytest.fixture
def fake_mic(request) -> Path | None:
    """The WAV the fake microphone plays (None: Chromium's built-in beep)."""
    return getattr(request, "param", None)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_FLAGS}


@pytest.fixture
def browser_context_args(browser_context_args):
    return {**browser_context_args, "permissions": ["microphone"]}
