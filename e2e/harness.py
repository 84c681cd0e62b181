"""The e2e harness: real Chromium on a real Voxline server, shared by the e2e tests, the browser benchmarks
(`e2e/bench/`) and the backend tests that need a server on a port (`ServerThread`). Not part of the package.

Debian's Chromium (Playwright's own browser download does not work on these machines), with a fake microphone
that plays one WAV file once (`%noloop`), on the demo page opened with `?autostart=1`.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import uvicorn

from voxline.config import Settings
from voxline.server.app import create_app
from voxline.server.protocol import UVICORN_WEBSOCKET_OPTIONS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]
EVENT_NAMES = ["ready", "speech-start", "speech-end", "transcript", "intent", "reply", "reply-audio", "link", "turn",
               "error"]
# Collects every voxline:* event on the page from the first moment, before any page script runs.
RECORD_EVENTS = (
    "window.__vx = [];\n"
    f"for (const name of {EVENT_NAMES!r}) "
    "document.addEventListener('voxline:' + name, (e) => window.__vx.push({name, ...e.detail}));"
)


class HostPage:
    """A plain HTTP server on loopback for one HTML page at `/` (anything else is 404): another site than the
    Voxline server, such as one that embeds the widget. `html` may be set after it starts (when the page names the
    Voxline server, whose port is not known yet). A context manager; `close()` stops it."""

    def __init__(self, html: str = "", port: int = 0) -> None:
        host = self
        self.html = html

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] != "/":
                    self.send_error(404)
                    return
                body = host.html.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.origin = f"http://localhost:{self.httpd.server_address[1]}"
        self.url = self.origin + "/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> HostPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ServerThread:
    """uvicorn in a daemon thread on a free loopback port."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        app = create_app(settings or Settings.from_env())
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                                    **UVICORN_WEBSOCKET_OPTIONS))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the Voxline server thread did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self._sock.close()


def wait_for_js(page, expression: str, timeout_s: float, poll_s: float = 0.1) -> object:
    """Wait until the JavaScript `expression` is truthy in `page`, and return its value.

    Use this, not Playwright's `wait_for_function`, on pages Voxline serves: that one runs `eval()` inside the
    page, which the demo page's Content-Security-Policy forbids (no `'unsafe-eval'`), whereas `page.evaluate`
    goes through DevTools, outside the page's policy.
    """
    deadline = time.monotonic() + timeout_s
    while not (value := page.evaluate(f"() => ({expression})")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g} s for {expression}")
        page.wait_for_timeout(poll_s * 1000)
    return value


def launch_chromium(browser_type, wav: Path | None = None):
    """Debian's Chromium; its fake microphone plays `wav` once (or Chromium's beep when None)."""
    args = [*CHROMIUM_FLAGS]
    if wav is not None:
        args.append(f"--use-file-for-fake-audio-capture={wav}%noloop")
    return browser_type.launch(executable_path=CHROMIUM, args=args)


UP_TIMEOUT_S = 180.0
"""How long a page may take to bring up everything it loads after `ready` (grammar engine, smart-turn): ~5 s on a
quiet machine, several times that with the suite's other work on the same two cores."""
EVERYTHING_UP = """(() => {
  const v = window.voxline;
  if (!v || !window.__vx.some((e) => e.name === 'ready')) return false;
  const engine = !v.intents || v.intents.ready || v.intents.failure;
  const lexicon = !v.intents?.ready || v.grammarDecodeState !== 'waiting';
  return Boolean(engine && lexicon && (v.turnDetectionState === 'up' || v.turnDetectionState === 'off'));
})()"""
"""The page has loaded what listening needs and everything that comes after `ready`, or has said it cannot."""
SETTLED = "(() => { const turns = ev.filter((e) => e.name === 'turn'); return !turns.length || turns.at(-1).state === 'idle'; })()"
"""The page has nothing left to decide: no turn heard, or the last one ended (`voxline:turn` idle, whatever its
outcome)."""


class VoxlinePage:
    """One browser whose fake microphone plays one WAV, on the demo page.

    `listen="when-up"` (the default) opens the page, waits until the grammar engine, the grammar-aware decoder and
    smart-turn are up (or have failed), and then presses the microphone button: Chromium's fake microphone starts
    its file when the page opens it, so what the test hears then meets the page as a user who waited for it would,
    whatever the machine's load, and needs no lead silence to cover the start. `listen="at-once"` opens the page
    with `?autostart=1`, which listens as soon as `voxline:ready` fires and loads the rest meanwhile.
    """

    def __init__(self, browser_type, base_url: str, wav: Path | None, query: str = "", before_goto=None,
                 listen: str = "when-up") -> None:
        self.browser = launch_chromium(browser_type, wav)
        self.context = self.browser.new_context(permissions=["microphone"])
        self.page = self.context.new_page()
        self.page.add_init_script(RECORD_EVENTS)
        self.console: list[str] = []
        self.page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        self.page.on("pageerror", lambda err: self.console.append(f"pageerror: {err}"))
        self.ws_sent: list[str | bytes] = []
        """Every WebSocket frame the page sent, in order (the hello included)."""
        self.ws_received: list[str | bytes] = []
        """Every WebSocket frame the page received, in order."""
        self.page.on("websocket", self._watch_socket)
        if before_goto is not None:
            before_goto(self.page)
        if listen == "at-once":
            self.page.goto(f"{base_url}/?autostart=1{query}")
            return
        if listen != "when-up":
            raise ValueError(f"listen must be 'when-up' or 'at-once', not {listen!r}")
        self.page.goto(f"{base_url}/?autostart=0{query}")
        try:
            wait_for_js(self.page, EVERYTHING_UP, UP_TIMEOUT_S, poll_s=0.05)
        except TimeoutError as exc:
            message = f"{exc}\n{self.timeline()}\n{self.console[-20:]}"
            self.close()  # the caller never gets this page to close
            raise TimeoutError(message) from None
        self.page.click("#mic")

    def _watch_socket(self, ws) -> None:
        ws.on("framesent", lambda payload: self.ws_sent.append(payload))  # playwright wraps only Python functions
        ws.on("framereceived", lambda payload: self.ws_received.append(payload))

    def events(self, name: str | None = None) -> list[dict]:
        events = self.page.evaluate("window.__vx")
        return [e for e in events if name is None or e["name"] == name]

    def timeline(self) -> list[str]:
        """The events as short lines, for assertion messages."""
        keys = ("text", "final", "intent", "source", "confidence", "reason", "end_t", "lag_s", "turn_prob",
                "turn_check_ms", "early", "state", "outcome", "code", "message")
        return [f"{e['audio_t']:.2f} {e['name']} " + " ".join(f"{k}={e[k]!r}" for k in keys if k in e)
                for e in self.events()]

    def wait_for(self, predicate: str, timeout_s: float) -> None:
        """Wait for a JS predicate over `ev`, the events so far (an array of {name, ...detail}), and `heard`,
        the seconds of microphone audio captured so far."""
        wait_for_js(self.page, f"(() => {{ const ev = window.__vx; const heard = window.voxline?.capture.audioTime "
                               f"?? 0; return {predicate}; }})()", timeout_s)

    def wait_until_heard(self, seconds: float, settle_s: float = 2.0, decide_timeout_s: float = 90.0) -> None:
        """Wait until the microphone has delivered `seconds` of audio and `settle_s` more, and then until the page
        has decided what it heard (on a loaded machine its decode and the grammar engine may answer seconds after
        the audio came in)."""
        self.wait_for(f"heard > {seconds + settle_s}", timeout_s=seconds + settle_s + 90)
        try:
            self.wait_for(SETTLED, timeout_s=decide_timeout_s)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n" + "\n".join(self.timeline())) from None

    def close(self) -> None:
        self.context.close()
        self.browser.close()
