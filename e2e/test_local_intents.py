"""Spoken commands resolved on the device: the grammar engine in Pyodide, then the IndexedDB cache, no network.

hibari-tts speech (synthetic, natural-sounding) through Chromium's fake microphone. The harness presses the microphone
button once the grammar engine is up; the pages these tests open themselves listen at once, so their audio leads
with silence (`ENGINE_START_S`) for Pyodide to start, since the fake microphone starts playing when the page opens it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.bench.readings import COMMAND_MIN_CONFIDENCE  # the page's gate (kept in step by a test)
from e2e.conftest import settled_frames
from e2e.harness import wait_for_js

ENGINE_START_S = 14.0


@pytest.fixture(scope="module")
def twice_pause(tmp_path_factory):
    texts = ["pause the music", "turn the volume down", "pause the music"]
    clips = [(text, hibari(text, seed=i)) for i, text in enumerate(texts)]
    audio, placed = compose(clips, lead_s=ENGINE_START_S, gap_s=3.0)
    return write_wav(tmp_path_factory.mktemp("intents") / "commands.wav", audio), placed, len(audio) / RATE


def _words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def _refuse_websocket(page):
    page.route_web_socket("**/ws", lambda ws: ws.close(code=1011, reason="test: backend down"))


@pytest.mark.parametrize("ws_down", [False, True], ids=["backend-up", "ws-unavailable"])
def test_commands_resolve_locally_then_from_the_cache_without_the_network(open_voxline, twice_pause, ws_down):
    wav, placed, duration_s = twice_pause
    vx = open_voxline(wav, before_goto=_refuse_websocket if ws_down else None)
    vx.wait_for("ev.some(e => e.name === 'ready')", timeout_s=90)
    wait_for_js(vx.page, "window.voxline.intents?.ready === true", 60)
    requests: list[str] = []
    vx.page.on("request", lambda request: requests.append(request.url))
    vx.wait_until_heard(duration_s)
    intents = vx.events("intent")
    assert [i["intent"] for i in intents] == ["media.pause", "media.volume_down", "media.pause"], vx.timeline()
    assert intents[0]["source"] == "local"
    assert intents[2]["source"] == "cache"
    for intent, truth in zip(intents, placed):
        # never before all the words were heard: a command acts after a silence (capture clock), not on a partial
        assert intent["audio_t"] > truth.end_s, vx.timeline()
    assert requests == [], "local intents must not touch the network"
    # Each exchange is over when its command acts: `voxline:turn` idle (local), once per utterance.
    ends = [e.get("outcome") for e in vx.events("turn") if e["state"] == "idle"]
    assert ends == ["local"] * 3, vx.timeline()
    if not ws_down:
        assert [json.loads(f)["type"] for f in vx.ws_sent] == ["hello"], "no WebSocket frame for local intents"


def test_cached_commands_need_neither_the_engine_nor_the_backend(browser_type, voxline_server, twice_pause):
    """A second visit in the same profile: Pyodide is blocked and, once the models are loaded, so is the server."""
    from e2e.harness import RECORD_EVENTS, launch_chromium

    wav, placed, duration_s = twice_pause
    browser = launch_chromium(browser_type, wav)
    try:
        context = browser.new_context(permissions=["microphone"])
        first = context.new_page()
        first.add_init_script(RECORD_EVENTS)
        first.goto(voxline_server.url + "/?autostart=1")
        wait_for_js(first, "window.__vx.filter(e => e.name === 'intent').length >= 3", duration_s + 90)
        first.close()

        second = context.new_page()
        second.add_init_script(RECORD_EVENTS)
        second.route("**/vendor/pyodide/**", lambda route: route.abort())
        second.goto(voxline_server.url + "/?autostart=1")
        wait_for_js(second, "window.__vx.some(e => e.name === 'ready')", 90)
        second.route("**/*", lambda route: route.abort())  # the backend is gone from here on
        wait_for_js(second, f"window.voxline.capture.audioTime > {duration_s + 2}", duration_s + 90)
        events = second.evaluate("window.__vx")
        intents = [e for e in events if e["name"] == "intent"]
        assert [(i["intent"], i["source"]) for i in intents] == [
            ("media.pause", "cache"), ("media.volume_down", "cache"), ("media.pause", "cache")], events
        assert second.evaluate("window.voxline.intents.ready") is False
    finally:
        browser.close()


def test_the_recogniser_reads_commands_with_the_grammar_and_questions_without(open_voxline, tmp_path):
    """Grammar-aware decoding in Chromium: the ASR worker gets the engine's word graph; a command's final
    transcript carries a command reading that the device acts on, a question's goes to the server unchanged."""
    texts = ["skip to the next song", "what is the capital of france"]
    clips = [(text, hibari(text, seed=i)) for i, text in enumerate(texts)]
    audio, placed = compose(clips, gap_s=4.0)
    wav = write_wav(tmp_path / "grammar.wav", audio)
    vx = open_voxline(wav)
    vx.wait_until_heard(len(audio) / RATE)
    finals = [e for e in vx.events("transcript") if e["final"] and e.get("source") != "server"]
    command = next(e for e in finals if abs(e["end_t"] - placed[0].end_s) < 1.0)
    assert command["command"] is not None, vx.timeline()
    intents = vx.events("intent")
    assert [(i["intent"], i["source"]) for i in intents] == [("media.next", "local")], vx.timeline()
    # The device acted on a command reading (the pause's decode or the final one): words as the reading has them.
    assert _words(intents[0]["text"]) == _words(command["command"]["text"]) == ["skip", "to", "the", "next", "song"]
    question = next(e for e in finals if abs(e["end_t"] - placed[1].end_s) < 1.0)
    assert question["command"] is None or question["command"]["confidence"] < COMMAND_MIN_CONFIDENCE, vx.timeline()
    sent = settled_frames(vx.ws_sent)
    turns = [m for m in sent if m["type"] == "turn.start"]
    assert len(turns) == 1 and turns[0]["transcript"] == question["text"], sent


@pytest.mark.parametrize("pause_s", [0.15, 0.45])
def test_a_command_that_goes_on_after_a_short_pause_is_not_cut(open_voxline, tmp_path, pause_s):
    """Grammar-aware endpointing: "turn the volume down" is a complete command, but one that could go on; after a
    pause of the kind people make inside a sentence (shorter than `prefixCommandSilenceSecs`; 0.45 s is longer than
    the 0.3 s the design before waited) the speaker goes on with "to thirty percent", and the device acts once, on
    the whole command."""
    parts = ["turn the volume down", "to thirty percent", "pause the music"]
    clips = [(text, hibari(text, seed=i)) for i, text in enumerate(parts)]
    first, _ = compose(clips[:2], gap_s=pause_s, tail_s=0.0)
    rest, _ = compose(clips[2:], lead_s=3.0, gap_s=3.0)
    audio = np.concatenate([first, rest])
    wav = write_wav(tmp_path / "going-on.wav", audio)
    vx = open_voxline(wav)
    vx.wait_until_heard(len(audio) / RATE)
    intents = vx.events("intent")
    assert [(i["intent"], i["slots"]) for i in intents] == [("media.volume_set", {"level": 30}),
                                                           ("media.pause", {})], vx.timeline()
    # smart-turn, in its own worker, answered about a pause (on a loaded machine maybe after the turn ended)
    wait_for_js(vx.page, "window.voxline.lastTurnCheck?.prob !== undefined", 60)
    check = vx.page.evaluate("window.voxline.lastTurnCheck")
    assert 0 <= check["prob"] <= 1 and check["ms"] > 0, check


VOLUME_DOWN = {"intent": "media.volume_down", "slots": {}}


SKIP_THEN_TIMER = [("media.next", {}, None), ("timer.set", {"seconds": 600}, None)]


@pytest.mark.parametrize(("parts", "expected", "gap_s"), [
    # together another command: it acts too, as an intent that amends the first
    (["turn the volume down", "to thirty percent"],
     [("media.volume_down", {}, None), ("media.volume_set", {"level": 30}, VOLUME_DOWN)], 1.5),
    # together no command: what was added is a request of its own, decided as any turn (here by the grammar)
    (["skip this song", "and set a timer for ten minutes"], SKIP_THEN_TIMER, 1.5),
    # the same after a pause the pause's decode may outlast: it decides all the same (`latePauseDecodes`; before,
    # a decode that answered after the speaker went on was dropped, and the whole turn went to the server)
    (["skip this song", "and set a timer for ten minutes"], SKIP_THEN_TIMER, 0.35),
    # together the same command: nothing more to do
    (["go back", "one song"], [("media.previous", {}, None)], 1.5),
], ids=["an-amendment", "a-request-of-its-own", "a-request-after-a-short-pause", "the-same-command"])
def test_what_the_speaker_adds_after_a_command_acted_is_heard(open_voxline, tmp_path, parts, expected, gap_s):
    """A command acts at the pause; the speaker then goes on before the turn is over, and the whole turn is read.
    When it is another command ("turn the volume down" … "to thirty percent"), that acts too and `amends` the
    first; when it is no command ("skip this song" … "and set a timer for ten minutes"), what the speaker added is
    a request of its own and acts too; when it says the same ("go back" … "one song"), nothing more acts. None goes
    to the server. The pause (1.5 s; 0.35 s, still longer than `commandSilenceSecs`, for a complete command) is
    longer than a command that could go on waits (`prefixCommandSilenceSecs`, 0.3 s here), the pause decides
    however late its decode answers, before the speaker went on (a quiet machine) or after (a busy one), and the
    turn ends 2.5 s after the speech (hangover, smart-turn off), so the outcome does not depend on the machine's
    speed."""
    clips = [(text, hibari(text, seed=i)) for i, text in enumerate(parts)]
    audio, placed = compose(clips, gap_s=gap_s, tail_s=4.0)
    wav = write_wav(tmp_path / "went-on.wav", audio)
    vx = open_voxline(wav, "&vx.prefixCommandSilenceSecs=0.3&vx.hangoverSecs=2.5&vx.turnCompleteProb=2")
    vx.wait_until_heard(len(audio) / RATE)
    intents = vx.events("intent")
    timeline = "\n".join(vx.timeline())
    assert [(i["intent"], i["slots"], i.get("amends")) for i in intents] == expected, timeline
    # The first acted on the pause's decode (`early`), before the turn was over: on a quiet machine during the
    # pause, on a loaded one maybe after the speaker went on (`latePauseDecodes`).
    assert intents[0]["early"] and intents[0]["audio_t"] > placed[0].end_s, timeline
    assert all(i["audio_t"] > placed[1].end_s for i in intents[1:]), timeline
    assert len(vx.events("speech-end")) == 1, timeline
    assert [e.get("outcome") for e in vx.events("turn") if e["state"] == "idle"] == ["local"], timeline
    assert [json.loads(f)["type"] for f in vx.ws_sent] == ["hello"], "no WebSocket frame for local intents"
