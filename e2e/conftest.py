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


# Collects every voxline:* event on the page from the first moment, before any page script runs.
RECORD_EVENTS = """
window.__vx = [];
for (const name of ['ready', 'speech-start', 'speech-end', 'transcript', 'intent', 'reply', 'reply-audio', 'error']) {
  document.addEventListener('voxline:' + name, (e) => window.__vx.push({name, ...e.detail}));
}
"""


class VoxlinePage:
    """A Chromium whose fake microphone plays one WAV (once), on the demo page with `?autostart=1`."""

    def __init__(self, browser_type, server, wav: Path | None, query: str = "") -> None:
        args = [*CHROMIUM_FLAGS]
        if wav is not None:
            args.append(f"--use-file-for-fake-audio-capture={wav}%noloop")
        self.browser = browser_type.launch(executable_path=CHROMIUM, args=args)
        self.context = self.browser.new_context(permissions=["microphone"])
        self.page = self.context.new_page()
        self.page.add_init_script(RECORD_EVENTS)
        self.console: list[str] = []
        self.page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        self.page.on("pageerror", lambda err: self.console.append(f"pageerror: {err}"))
        self.page.goto(f"{server.url}/?autostart=1{query}")

    def events(self, name: str | None = None) -> list[dict]:
        events = self.page.evaluate("window.__vx")
        return [e for e in events if name is None or e["name"] == name]

    def wait_for(self, predicate: str, timeout_s: float) -> None:
        """Wait for a JS predicate over `window.__vx` (an array of {name, ...detail})."""
        self.page.wait_for_function(f"(() => {{ const ev = window.__vx; return {predicate}; }})()",
                                    timeout=timeout_s * 1000, polling=100)

    def close(self) -> None:
        self.context.close()
        self.browser.close()


@pytest.fixture
def open_voxline(browser_type, voxline_server):
    """Open the demo page with a given fake-microphone WAV; closed at the end of the test."""
    opened: list[VoxlinePage] = []

    def _open(wav: Path | None, query: str = "") -> VoxlinePage:
        opened.append(VoxlinePage(browser_type, voxline_server, wav, query))
        return opened[-1]

    yield _open
    for page in opened:
        page.close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_FLAGS}


@pytest.fixture
def browser_context_args(browser_context_args):
    return {**browser_context_args, "permissions": ["microphone"]}
