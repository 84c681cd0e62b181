"""A paraphrase the local grammar misses: the server's classifier resolves it as an intent (not a chat reply), the
page learns it, and the same words heard again are answered from the cache with no frame to the server.

The server runs the product's LLM (Qwen2.5 0.5B): the classifier is calibrated for it only (SmolLM2 is not asked).
hibari-tts speech through Chromium's fake microphone; both pages share one browser profile (one IndexedDB).
"""

from __future__ import annotations

import json

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.config import Settings
from voxline.intents import builtin_grammar, recognize
from e2e.conftest import settled_frames
from e2e.harness import RECORD_EVENTS, ServerThread, launch_chromium, wait_for_js

PARAPHRASE = "get some light going in the bedroom"
PRODUCT_LLM = "qwen2.5-0.5b-instruct-ct2"
ENGINE_START_S = 14.0  # Pyodide starts while the fake microphone plays the lead silence


@pytest.fixture(scope="module")
def qwen_server():
    with ServerThread(Settings.from_env(llm_model=PRODUCT_LLM, intent_classifier="llm")) as server:
        yield server


def _page(context, url):
    page = context.new_page()
    page.add_init_script(RECORD_EVENTS)
    sent: list = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    page.goto(url + "/?autostart=1")
    return page, sent


def test_a_paraphrase_is_resolved_by_the_server_then_answered_from_the_cache(browser_type, qwen_server, tmp_path):
    assert recognize(PARAPHRASE, builtin_grammar()) is None, "the test needs words the local grammar misses"
    audio, (said,) = compose([(PARAPHRASE, hibari(PARAPHRASE, seed=3))], lead_s=ENGINE_START_S, tail_s=4.0)
    wav = write_wav(tmp_path / "paraphrase.wav", audio)
    heard_s = len(audio) / RATE
    browser = launch_chromium(browser_type, wav)
    try:
        context = browser.new_context(permissions=["microphone"])
        first, first_sent = _page(context, qwen_server.url)
        # The first call of the classifier prefills its static prompt: seconds on 2 shared cores.
        wait_for_js(first, "window.__vx.some(e => e.name === 'intent' || (e.name === 'reply' && e.final))",
                    heard_s + 120)
        wait_for_js(first, "window.voxline.intents?.peek(window.__vx.find(e => e.name === 'transcript' && e.final)"
                           "?.text ?? '') != null", 30)
        events = first.evaluate("window.__vx")
        intents = [e for e in events if e["name"] == "intent"]
        assert [(i["intent"], i["slots"], i["source"]) for i in intents] == [
            ("lights.on", {"area": "bedroom"}, "server")], events
        assert not [e for e in events if e["name"] == "reply" and e["text"] and e["text"] != intents[0].get(
            "confirmation")], "a resolved command is never answered as chat"
        assert [m["type"] for m in settled_frames(first_sent)] == ["hello", "turn.start"], first_sent
        first.close()

        second, second_sent = _page(context, qwen_server.url)
        wait_for_js(second, f"window.voxline?.capture.audioTime > {said.end_s + 3}", heard_s + 90)
        events = second.evaluate("window.__vx")
        intents = [e for e in events if e["name"] == "intent"]
        assert [(i["intent"], i["slots"], i["source"]) for i in intents] == [
            ("lights.on", {"area": "bedroom"}, "cache")], events
        assert [json.loads(f)["type"] for f in second_sent if isinstance(f, str)] == ["hello"], second_sent
    finally:
        browser.close()
