"""The embeddable widget on a page of another origin, in real Chromium, with the one-line script tag.

The host page is served by a second, plain HTTP server (another port, and `localhost` instead of `127.0.0.1`, so it
is another site too), without COOP/COEP: the page is not cross-origin isolated, so Voxline runs single-threaded
and must say so. Everything else (script, workers, worklets, wasm, models, Pyodide, the WebSocket) comes from the
Voxline server. The host page's own CSS tries hard to restyle the widget, and must not manage to.

Screenshots of the widget in each state are kept in e2e/artifacts/ (git-ignored: the test artifact).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.config import Settings
from e2e.harness import RECORD_EVENTS, HostPage, ServerThread, launch_chromium

from .conftest import E2E_LLM

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# The host page's CSS: every rule here would change the widget if styles leaked into its shadow root.
HOST_CSS = """
  * { font-family: "Times New Roman", serif !important; color: rgb(255, 0, 0) !important; }
  button { background: rgb(255, 0, 0) !important; border: 5px dashed lime !important; }
  p { font-size: 40px !important; margin: 3em !important; }
  voxline-assistant { --voxline-accent: rgb(10, 125, 56); }
"""
HOST_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>A shop</title><style>{css}</style></head>
<body>
  <h1>A shop that embeds Voxline</h1>
  <p>Host page text.</p>
  <script src="{voxline}/widget.js" data-server="{ws}"></script>
  <script>
    // What a host page does: act on its own intents, add its own sentences.
    window.__handled = [];
    VoxlineWidget.assistant.then((el) => el.onIntent('media.pause', (detail) => window.__handled.push(detail.intent)));
  </script>
</body>
</html>
"""
SHOT_STATES = ("loading", "idle", "listening", "thinking", "speaking", "offline", "error")


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    """A command, then a question for the server; the microphone opens only when the button is pressed."""
    clips = [("pause the music", hibari("pause the music", seed=1)),
             ("what is the capital of France", hibari("what is the capital of France", seed=2))]
    audio, placed = compose(clips, lead_s=1.5, gap_s=3.0, tail_s=6.0)
    return write_wav(tmp_path_factory.mktemp("widget") / "spoken.wav", audio), placed, len(audio) / RATE


@pytest.fixture(scope="module")
def host_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def voxline_server(host_port):
    """A Voxline server that lets the host site's pages use it, as a server embedded in another site must be told
    (`VOXLINE_ALLOWED_ORIGINS`; by default it admits only its own origin)."""
    with ServerThread(Settings.from_env(llm_model=E2E_LLM, allowed_origins=f"http://localhost:{host_port}")) as server:
        yield server


@pytest.fixture
def host_page(voxline_server, host_port):
    ws = voxline_server.url.replace("http://", "ws://") + "/ws"
    html = HOST_PAGE.format(css=HOST_CSS, voxline=voxline_server.url, ws=ws)
    with HostPage(html, host_port) as server:
        yield server


def shoot(page, state: str) -> None:
    """Screenshot the widget, after checking it shows `state`."""
    widget = page.locator("voxline-assistant")
    assert widget.get_attribute("state") == state
    ARTIFACTS.mkdir(exist_ok=True)
    widget.screenshot(path=ARTIFACTS / f"widget-{state}.png", animations="disabled")


def wait_state(page, state: str, timeout_s: float) -> None:
    page.wait_for_function(f"document.querySelector('voxline-assistant')?.getAttribute('state') === '{state}'",
                           timeout=timeout_s * 1000, polling="raf")


def test_widget_embedded_cross_origin_hears_a_command_and_answers_a_question(browser_type, host_page, spoken):
    wav, placed, duration_s = spoken
    browser = launch_chromium(browser_type, wav)
    try:
        context = browser.new_context(permissions=["microphone"])
        page = context.new_page()
        page.add_init_script(RECORD_EVENTS)
        console: list[str] = []
        page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda err: console.append(f"pageerror: {err}"))
        page.goto(host_page.url)
        events = lambda name=None: [e for e in page.evaluate("window.__vx") if name in (None, e["name"])]  # noqa: E731

        # One script tag made one floating element, themed by the page, untouched by the page's CSS.
        page.wait_for_selector("voxline-assistant[floating]", state="attached")
        # Every state the element takes, as it takes it: a state can last less than a frame (a question whose
        # speculative answer is ready when the turn ends is thinking for an instant), too short to be polled.
        page.evaluate("""(() => {
            const el = document.querySelector('voxline-assistant');
            window.__states = [el.getAttribute('state')];
            new MutationObserver(() => window.__states.push(el.getAttribute('state')))
              .observe(el, {attributes: true, attributeFilter: ['state']});
        })()""")
        wait_state(page, "loading", 10)
        shoot(page, "loading")
        page.wait_for_function("window.__vx.some(e => e.name === 'ready' || e.name === 'error')", timeout=120_000)
        ready = events("ready")
        assert ready, (events(), console)
        assert ready[0]["isolated"] is False and ready[0]["threads"] == 1
        assert page.evaluate("self.crossOriginIsolated") is False
        style = page.evaluate("""(() => {
            const root = document.querySelector('voxline-assistant').shadowRoot;
            const css = (sel) => getComputedStyle(root.querySelector(sel));
            return {button: css('.mic').backgroundColor, border: css('.mic').borderStyle,
                    font: css('.status').fontFamily, color: css('.status').color, size: css('.status').fontSize};
        })()""")
        assert style["button"] != "rgb(255, 0, 0)" and style["border"] == "none", style
        assert "Times" not in style["font"] and style["color"] != "rgb(255, 0, 0)" and style["size"] == "14px", style
        wait_state(page, "idle", 10)
        shoot(page, "idle")

        # Local intents need the engine (Pyodide, from the Voxline origin): only then open the microphone.
        page.wait_for_function("document.querySelector('voxline-assistant').voxline?.intents?.ready === true",
                               timeout=120_000)
        version = page.evaluate("""document.querySelector('voxline-assistant').extendIntents([{language: 'en',
            intents: {'shop.cart': {sentences: ['open [the] [shopping] cart'], confirm: ['Opening your cart.']}}}])""")
        assert isinstance(version, str) and version
        match = page.evaluate("document.querySelector('voxline-assistant').voxline.intents.recognize('open the cart')")
        assert match["match"]["intent"] == "shop.cart"

        # Keyboard: focus lands on the mic button (delegatesFocus), Enter toggles it.
        page.evaluate("document.querySelector('voxline-assistant').focus()")
        assert page.evaluate("document.querySelector('voxline-assistant').shadowRoot.activeElement?.className") == "mic"
        page.keyboard.press("Enter")
        button = page.locator("voxline-assistant").locator(".mic")
        assert button.get_attribute("aria-pressed") == "true"
        wait_state(page, "listening", 30)
        # The page's --voxline-accent (once the colour transition is over).
        page.wait_for_function("getComputedStyle(document.querySelector('voxline-assistant').shadowRoot"
                               ".querySelector('.mic')).backgroundColor === 'rgb(10, 125, 56)'", timeout=2000)
        shoot(page, "listening")

        page.wait_for_function("window.__vx.some(e => e.name === 'intent')", timeout=(duration_s + 60) * 1000)
        intent = events("intent")[0]
        assert intent["intent"] == "media.pause", (events(), console)
        assert intent["source"] in ("local", "cache"), intent
        assert page.evaluate("window.__handled") == ["media.pause"]
        live = page.evaluate("document.querySelector('voxline-assistant').shadowRoot"
                             ".querySelector('[aria-live]').textContent")
        assert live, "the live region announces the answer"

        # The question goes to the server over the cross-origin WebSocket (thinking) and is answered aloud.
        wait_state(page, "speaking", placed[1].end_s + 90)
        shoot(page, "speaking")
        states = page.evaluate("window.__states")
        assert "thinking" in states[:states.index("speaking")], states
        assert events("reply-audio"), (events(), console)
        assert any(e["final"] and e["text"] for e in events("reply")), events("reply")

        # Enter again closes the microphone.
        page.evaluate("document.querySelector('voxline-assistant').focus()")
        page.keyboard.press("Enter")
        assert button.get_attribute("aria-pressed") == "false"
        wait_state(page, "idle", 30)
        # And once more: the microphone opens again (on a fresh Voxline instance, models from the cache).
        page.keyboard.press("Enter")
        wait_state(page, "listening", 60)
        assert len(events("ready")) == 2
        page.keyboard.press("Space")
        assert button.get_attribute("aria-pressed") == "false"
        wait_state(page, "idle", 30)

        # Offline and error, from the events that cause them (stopping the shared server would end other tests),
        # once the fresh instance's link is open: its `voxline:link` open would clear an offline state set before.
        # Read from that instance, not as a count of opens: the instance stopped by Space may be disposed before
        # its own link opened (on a loaded machine), and then sends no open at all.
        try:
            page.wait_for_function("""(() => {
                const voxline = document.querySelector('voxline-assistant').voxline;
                return window.__vx.filter(e => e.name === 'ready').length >= 3 && voxline?.link?.connected === true;
            })()""", timeout=60_000)
        except Exception as error:
            raise AssertionError(("the fresh instance's link did not open", events(), console)) from error
        page.evaluate("""document.querySelector('voxline-assistant').dispatchEvent(new CustomEvent('voxline:error',
            {detail: {code: 'backend_unreachable', message: 'The Voxline server is unreachable.'}}))""")
        wait_state(page, "offline", 5)
        shoot(page, "offline")
        # thinking, as a server turn pending shows it (the real one above may have lasted less than a frame)
        page.evaluate("""document.querySelector('voxline-assistant').dispatchEvent(new CustomEvent('voxline:turn',
            {detail: {state: 'server-pending', turn_id: 99}}))""")
        wait_state(page, "thinking", 5)
        shoot(page, "thinking")
        page.evaluate("""document.querySelector('voxline-assistant').dispatchEvent(new CustomEvent('voxline:error',
            {detail: {code: 'mic_denied', message: 'Microphone access was refused.'}}))""")
        wait_state(page, "error", 5)
        shoot(page, "error")
        assert sorted(p.stem for p in ARTIFACTS.glob("widget-*.png")) == sorted(f"widget-{s}" for s in SHOT_STATES)
        assert not [line for line in console if line.startswith("pageerror")], console
    finally:
        browser.close()


def test_widget_as_an_es_module_on_a_page_that_places_the_element_itself(browser_type, voxline_server, host_port):
    html = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>An app</title></head><body>
      <main><voxline-assistant label="Ask the shop"></voxline-assistant></main>
      <script type="module">import '{voxline_server.url}/voxline-widget.mjs';</script>
    </body></html>"""
    browser = launch_chromium(browser_type)
    try:
        with HostPage(html, host_port) as host:
            page = browser.new_context(permissions=["microphone"]).new_page()
            page.add_init_script(RECORD_EVENTS)
            page.goto(host.url)
            page.wait_for_function("window.__vx.some(e => e.name === 'ready' || e.name === 'error')", timeout=120_000)
            events = page.evaluate("window.__vx")
            assert [e["name"] for e in events if e["name"] in ("ready", "error")] == ["ready"], events
            # Other events (link, turn) may follow ready before the list is read: pick ready by name.
            assert next(e for e in events if e["name"] == "ready")["isolated"] is False
            assert page.locator("voxline-assistant").get_attribute("floating") is None  # the page's own, in place
            assert page.locator("voxline-assistant").locator(".mic").get_attribute("aria-label") == "Ask the shop"
            wait_state(page, "idle", 10)
    finally:
        browser.close()
