"""Who may connect, seen from real Chromium: a page of a site key's origin gets a token from `/token` and connects;
the browser sees 4401 without a token and 4403 from an origin the server does not serve, and the link stops.

Two plain HTTP servers on other ports play the sites (`localhost`, so another site than the Voxline server on
`127.0.0.1`): the shop, whose origin the server's one public site key lists, and another site. Their pages run
`web/voxline/link.js` alone (no models) over the real WebSocket.
"""

from __future__ import annotations

import json

import pytest

from voxline.config import Settings
from e2e.harness import HostPage, ServerThread, launch_chromium, wait_for_js

SECRET = "shop-secret-for-the-e2e-test"
# Every WebSocket close the page sees, with its code.
RECORD_CLOSES = """
window.__closes = [];
const NativeWebSocket = WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener('close', (event) => window.__closes.push(event.code));
  }
};
"""
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>A page</title></head><body>
<script type="module">
  import {{ BackendLink, tokenFromUrl }} from '{voxline}/voxline/link.js';
  window.__events = [];
  const fromUrl = new URLSearchParams(location.search).get('token') === 'url';
  const token = fromUrl ? tokenFromUrl('{voxline}/token?key=shop') : null;
  window.link = new BackendLink('{ws}', {{
    onError: (code, message) => window.__events.push({{ code, message }}),
    onStatus: (connected) => window.__events.push({{ connected }}),
  }}, {{ token, reconnect: {{ firstMs: 200, maxMs: 200, jitter: 0 }} }});
  window.link.connect();
</script></body></html>"""


@pytest.fixture(scope="module")
def sites():
    shop, other = HostPage(), HostPage()
    keys = [{"id": "shop", "secret": SECRET, "origins": [shop.origin], "public": True}]
    settings = Settings.from_env(llm_model="smollm2-135m-instruct-ct2", tts_engine="espeak", site_keys=json.dumps(keys))
    with ServerThread(settings) as server:
        html = PAGE.format(voxline=server.url, ws=server.url.replace("http://", "ws://") + "/ws")
        shop.html = other.html = html
        yield shop, other
    shop.close()
    other.close()


@pytest.fixture(scope="module")
def browser(browser_type):
    browser = launch_chromium(browser_type)
    yield browser
    browser.close()


def open_page(browser, site: HostPage, query: str = ""):
    page = browser.new_page()
    page.add_init_script(RECORD_CLOSES)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.goto(f"{site.origin}/{query}")
    return page, sockets


def test_a_page_of_the_keys_origin_gets_a_token_and_connects(browser, sites):
    page, _ = open_page(browser, sites[0], "?token=url")
    wait_for_js(page, "window.link?.connected === true", 30)
    assert page.evaluate("window.__events") == [{"connected": True}]
    assert page.evaluate("window.link.hello.token").startswith("v1.shop.")
    page.close()


def test_without_a_token_the_browser_sees_4401_and_the_link_stops(browser, sites):
    page, sockets = open_page(browser, sites[0])
    wait_for_js(page, "window.__closes.length > 0", 30)
    page.wait_for_timeout(1000)  # longer than the reconnect wait: nothing more happens
    assert page.evaluate("window.__closes") == [4401]
    assert [e["code"] for e in page.evaluate("window.__events")] == ["unauthenticated"]
    assert page.evaluate("window.link.closed") is True and len(sockets) == 1
    page.close()


def test_another_origin_sees_4403_before_hello_and_gets_no_token(browser, sites):
    page, sockets = open_page(browser, sites[1])
    wait_for_js(page, "window.__closes.length > 0", 30)
    page.wait_for_timeout(1000)
    assert page.evaluate("window.__closes") == [4403]
    (error,) = page.evaluate("window.__events")
    assert error["code"] == "origin_not_allowed" and sites[1].origin in error["message"]
    assert len(sockets) == 1
    page.close()
    # Nor does /token give it one: the refusal carries no CORS header, so the page cannot even read it.
    page, sockets = open_page(browser, sites[1], "?token=url")
    wait_for_js(page, "window.__events.length > 0", 30)
    assert page.evaluate("window.__events")[0]["code"] == "token_unavailable" and sockets == []
    page.close()
