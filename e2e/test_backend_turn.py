"""The backend turn from the browser: a spoken question answered with speech, barge-in, and a dead backend.

hibari-tts speech through Chromium's fake microphone; the e2e server runs SmolLM2 (the benchmark uses Qwen).
"""

from __future__ import annotations

import json

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.config import Settings
from voxline.dialog import heard_text
from voxline.server.pipeline import REPLY_FRAME_MS
from e2e.conftest import E2E_LLM, settled_frames
from e2e.harness import ServerThread, VoxlinePage


ONE_CHUNK_S = REPLY_FRAME_MS / 1000
"""Barge-in: speech over the reply → its playback stopped, within one reply audio frame on the capture clock."""
STOP_AFTER_QUESTION_S = 15.0
"""Where "stop" starts after the question ends: after the reply's first audio, and before the story (~20 s of speech,
96 tokens) has played out. On the 2 cores shared with other test runs (load average 5-7), the browser's final
transcript once came 16 s after the end of the question and the VAD ran up to 4 s behind the microphone, so 4 s and
then 8 s raced the first reply audio; end of speech → first audio is ~3 s on a quiet machine."""
RECORD_TIMINGS = "document.addEventListener('voxline:timings', (e) => window.__vx.push({name: 'timings', ...e.detail}));"


def _record_timings(page):
    page.add_init_script(RECORD_TIMINGS)


def _wav(tmp_path, texts, **layout):
    audio, placed = compose([(t, hibari(t, seed=i)) for i, t in enumerate(texts)], **layout)
    return write_wav(tmp_path / "turn.wav", audio), placed, len(audio) / RATE


def _assert_ordered(stages: dict, order: list[str]) -> None:
    times = [stages[name] for name in order]
    assert times == sorted(times), stages


def test_a_spoken_question_gets_a_spoken_reply(open_voxline, tmp_path):
    wav, (question,), duration_s = _wav(tmp_path, ["what is the capital of france"], tail_s=8.0)
    vx = open_voxline(wav, before_goto=_record_timings)
    vx.wait_for("ev.some(e => e.name === 'timings')", timeout_s=duration_s + 90)
    final = vx.events("reply")[-1]
    assert final["final"] and final["text"].strip(), vx.timeline()
    assert final["interrupted"] is False
    audio = [e for e in vx.events("reply-audio") if e.get("first")]
    assert len(audio) == 1, vx.timeline()
    ttfa_ms = 1000 * (audio[0]["audio_t"] - question.end_s)
    print(json.dumps({"browser_ttfa_ms": round(ttfa_ms), "reply": final["text"]}))
    assert 0 < ttfa_ms < 5000
    # One turn: sent when the turn ended, or speculatively at the pause and confirmed when it ended.
    sent = settled_frames(vx.ws_sent)
    assert [m["type"] for m in sent] == ["hello", "turn.start"], sent
    assert sent[1]["transcript"].lower().startswith("what is the capital of france")
    # One timings event for the turn: the page's stages in order on the capture clock, and the server's own.
    (timings,) = vx.events("timings")
    assert timings["source"] == "server" and timings["server_turn_id"] == sent[1]["turn_id"], timings
    stages = timings["stages"]
    _assert_ordered(stages, ["speech_end", "turn_end", "transcript", "sent", "first_audio"])
    assert abs(stages["speech_end"] - question.end_s) < 0.3, (stages, question)
    assert stages["first_audio"] == audio[0]["audio_t"]
    assert timings["timings"]["stages"]["tts"] > 0 and timings["timings"]["first_audio_sent_ms"] > 0, timings
    # The exchange, as `voxline:turn` reports it to hosts: idle once the reply's last sample has played.
    vx.wait_for("ev.some(e => e.name === 'turn' && e.state === 'idle')", timeout_s=60)
    states = [(e["state"], e.get("outcome")) for e in vx.events("turn")]
    assert states[-4:] == [("deciding", None), ("server-pending", None), ("replying", None), ("idle", "reply")], states
    (played,) = [e for e in vx.events("reply-audio") if e.get("last")]
    assert vx.events("turn")[-1]["audio_t"] >= played["audio_t"]
    # The demo page draws it: one waterfall row, with the server's stages in it.
    row = vx.page.locator("#timings > li")
    assert row.count() == 1
    assert row.locator("rect.server").count() >= 3


def test_speaking_over_the_reply_stops_it(open_voxline, tmp_path, voxline_server):
    """What the user hears: playback stops within one chunk of the barge-in speech, whether or not the server
    had finished generating the reply; the server keeps in its dialog exactly what was heard."""
    texts = ["tell me a long story about a dragon who loves to bake bread", "stop"]
    wav, (question, stop), duration_s = _wav(tmp_path, texts, gap_s=STOP_AFTER_QUESTION_S, tail_s=6.0)
    vx = open_voxline(wav, before_goto=_record_timings)
    vx.wait_until_heard(duration_s)
    timeline = "\n".join(vx.timeline())
    story_audio = [e for e in vx.events("reply-audio") if e["turn_id"] == 1]
    first = next((e for e in story_audio if e.get("first")), None)
    barge = next((e for e in vx.events("speech-start") if e["audio_t"] > stop.start_s - 0.3), None)
    assert barge is not None, f"'stop' was not heard as speech\n{timeline}"
    assert first is not None and first["audio_t"] < barge["audio_t"], f"the reply must be playing when 'stop' is heard\n{timeline}"
    last = [e for e in story_audio if e.get("last")]
    assert len(last) == 1 and last[0]["interrupted"] is True, f"{story_audio}\n{timeline}"
    stopped_after_s = last[0]["audio_t"] - barge["audio_t"]
    done = next(r for r in vx.events("reply") if r["turn_id"] == 1 and r["final"])
    print(json.dumps({"stop_after_speech_start_ms": round(1000 * stopped_after_s),
                      "speech_start_after_stop_onset_ms": round(1000 * (barge["audio_t"] - stop.start_s)),
                      "played_ms": last[0]["played_ms"], "generation_interrupted": done["interrupted"]}))
    assert 0 <= stopped_after_s <= ONE_CHUNK_S, f"playback went on {stopped_after_s:.3f} s after the speech began"
    # Heard: from the first sample to the cut, give or take the audio output's own latency.
    assert abs(last[0]["played_ms"] / 1000 - (last[0]["audio_t"] - first["audio_t"])) < ONE_CHUNK_S
    frames = [json.loads(f) for f in vx.ws_sent if isinstance(f, str)]
    barge_ins = [m for m in frames if m["type"] == "barge_in"]
    assert [m["turn_id"] for m in barge_ins] == [1], frames
    assert abs(barge_ins[0]["played_ms"] - last[0]["played_ms"]) <= 1, (barge_ins, last)
    # The server: still generating → it stopped (interrupted, text cut to what was heard); already done → its
    # reply stands as sent, but either way the dialog keeps only what was heard.
    (session,) = [s for s in voxline_server.server.config.app.state.sessions.values()
                  if s.history.exchanges and s.history.exchanges[0].user.lower().startswith("tell me a long story")]
    kept = session.history.exchanges[0].assistant
    generated = max((r["text"] for r in vx.events("reply") if r["turn_id"] == 1), key=len)
    assert 0 < len(kept.split()) < len(generated.split()), ("some of the story, not all of it, was heard", kept, done)
    if done["interrupted"]:
        assert done["text"] == kept
    if session.last_turn.turn_id == 1:  # "stop" was resolved on the device: the story's clauses are still there
        assert kept == heard_text(session.last_turn.clauses, barge_ins[0]["played_ms"])
    # One transition back to hearing, naming the reply spoken over.
    assert any(e["state"] == "hearing" and e.get("interrupted") == 1 and abs(e["audio_t"] - barge["audio_t"]) < 0.1
               for e in vx.events("turn")), timeline
    # "stop" itself is the stop command, resolved on the device or by the server.
    assert any(i["intent"] == "assistant.stop" for i in vx.events("intent")), timeline
    (timings,) = [t for t in vx.events("timings") if t.get("server_turn_id") == 1]
    assert timings["stages"]["first_audio"] == first["audio_t"]


def test_with_the_backend_stopped_the_page_says_so_and_cached_commands_work(browser_type, tmp_path):
    wav, placed, duration_s = _wav(tmp_path, ["pause the music", "what is the capital of france", "pause the music"],
                                   gap_s=5.0)
    server = ServerThread(Settings.from_env(llm_model=E2E_LLM)).__enter__()
    vx = VoxlinePage(browser_type, server.url, wav)
    try:
        vx.wait_for("ev.some(e => e.name === 'intent')", timeout_s=90)
        server.__exit__(None, None, None)  # the backend goes away after the first command
        vx.wait_until_heard(duration_s)
        errors = vx.events("error")
        assert any(e["code"] == "backend_unreachable" for e in errors), vx.timeline()
        intents = [(i["intent"], i["source"]) for i in vx.events("intent")]
        assert intents == [("media.pause", "local"), ("media.pause", "cache")], vx.timeline()
        assert not vx.events("reply"), "nobody was there to answer the question"
        assert vx.page.locator("#state").get_attribute("data-state") == "offline"
    finally:
        vx.close()


SPECULATE_AT_EVERY_PAUSE = "&vx.hangoverSecs=6&vx.turnCompleteProb=2&vx.speculativeMinConfidence=0.3"
"""The turn ends only after 6 s of silence (smart-turn never ends it), and any transcript heard at a pause is
sent speculatively. The pause inside the test's utterance is 4 s: its decode must answer before the speaker goes
on, or the page rightly sends nothing (a 2.5 s pause was once too short, with the suite's other work and the
page's own start on the same two cores; the harness now listens only once the page's start is over)."""


def test_a_speculative_turn_the_user_talks_over_is_dropped_without_a_trace(open_voxline, tmp_path, voxline_server):
    texts = ["what is the capital of france", "and what about spain"]
    wav, _, duration_s = _wav(tmp_path, texts, gap_s=4.0, tail_s=10.0)
    vx = open_voxline(wav, SPECULATE_AT_EVERY_PAUSE, before_goto=_record_timings)
    vx.wait_for("ev.some(e => e.name === 'timings')", timeout_s=duration_s + 90)
    frames = settled_frames(vx.ws_sent)
    assert [m["type"] for m in frames] == ["hello", "cancelled", "turn.start"], frames
    cancelled, turn = frames[1:]
    assert cancelled["transcript"].lower().startswith("what is the capital of france"), cancelled
    assert "spain" not in cancelled["transcript"].lower() and "spain" in turn["transcript"].lower(), frames
    # Nothing of the cancelled turn reached the page (no message, no audio frame: its turn id is at bytes 4-7).
    said = [json.loads(m) for m in vx.ws_received if isinstance(m, str)]
    assert not [m for m in said if m.get("turn_id") == cancelled["turn_id"]], said
    assert not [f for f in vx.ws_received if isinstance(f, bytes) and int.from_bytes(f[4:8], "little") ==
                cancelled["turn_id"]]
    assert {r["turn_id"] for r in vx.events("reply")} == {turn["turn_id"]}, vx.timeline()
    # The server's dialog has the user's whole turn only.
    (session,) = [s for s in voxline_server.server.config.app.state.sessions.values()
                  if any("spain" in e.user.lower() for e in s.history.exchanges)]
    assert [e.user for e in session.history.exchanges] == [turn["transcript"].strip()]
