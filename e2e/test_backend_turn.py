"""The backend turn from the browser: a spoken question answered with speech, barge-in, and a dead backend.

hibari-tts speech through Chromium's fake microphone; the e2e server runs SmolLM2 (the benchmark uses Qwen).
"""

from __future__ import annotations

import json

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.bench.browser import ServerThread, VoxlinePage
from voxline.config import Settings
from e2e.conftest import E2E_LLM


BARGE_IN_STOP_S = 3.0
"""Speech over the reply → the server's interrupted reply.done, on the capture clock."""


def _wav(tmp_path, texts, **layout):
    audio, placed = compose([(t, hibari(t, seed=i)) for i, t in enumerate(texts)], **layout)
    return write_wav(tmp_path / "turn.wav", audio), placed, len(audio) / RATE


def test_a_spoken_question_gets_a_spoken_reply(open_voxline, tmp_path):
    wav, (question,), duration_s = _wav(tmp_path, ["what is the capital of france"], tail_s=8.0)
    vx = open_voxline(wav)
    vx.wait_for("ev.some(e => e.name === 'reply' && e.final)", timeout_s=duration_s + 90)
    final = vx.events("reply")[-1]
    assert final["text"].strip(), vx.timeline()
    assert final["interrupted"] is False
    audio = vx.events("reply-audio")
    assert len(audio) == 1 and audio[0]["first"] is True, vx.timeline()
    ttfa_ms = 1000 * (audio[0]["audio_t"] - question.end_s)
    print(json.dumps({"browser_ttfa_ms": round(ttfa_ms), "reply": final["text"]}))
    assert 0 < ttfa_ms < 5000
    sent = [json.loads(f) for f in vx.ws_sent if isinstance(f, str)]
    assert [m["type"] for m in sent] == ["hello", "turn.start"]
    assert sent[1]["transcript"].lower().startswith("what is the capital of france")


def test_speaking_over_the_reply_stops_it(open_voxline, tmp_path):
    texts = ["tell me a long story about a dragon who loves to bake bread", "stop"]
    # The second utterance starts 4 s after the question ends, so the reply is playing by then. With 2.5 s the
    # "stop" came before any reply audio in 1 of 2 full CI runs and 1 of 5 runs alone on the 2 shared cores (cause
    # not pinned down; the reply now waits up to 150 ms in the scheduler's lane for company).
    wav, placed, duration_s = _wav(tmp_path, texts, gap_s=4.0, tail_s=6.0)
    vx = open_voxline(wav)
    vx.wait_until_heard(duration_s)
    timeline = vx.timeline()
    replies = vx.events("reply")
    assert vx.events("reply-audio"), timeline
    story = [r for r in replies if r["turn_id"] == 1]
    done = next((r for r in story if r["final"]), None)
    assert done is not None and done["interrupted"] is True, timeline
    barge = next(e for e in vx.events("speech-start") if e["audio_t"] > placed[1].start_s - 0.3)
    # Usually a few tens of milliseconds; once, in a full CI run on the 2 shared cores, 2.8 s (open: see the note).
    assert done["audio_t"] - barge["audio_t"] < BARGE_IN_STOP_S, "the server must stop generating"
    frames = [json.loads(f) for f in vx.ws_sent if isinstance(f, str)]
    barge_ins = [m for m in frames if m["type"] == "barge_in"]
    assert [m["turn_id"] for m in barge_ins] == [1] and barge_ins[0]["played_ms"] > 0, frames
    # The dialog keeps only what was heard: no more than what had been generated when the user spoke.
    streamed = max((len(r["text"]) for r in story if not r["final"]), default=0)
    assert len(done["text"]) <= streamed
    # "stop" itself is the stop command, resolved on the device or by the server.
    assert any(i["intent"] == "assistant.stop" for i in vx.events("intent")), timeline


def test_with_the_backend_stopped_the_page_says_so_and_cached_commands_work(browser_type, tmp_path):
    wav, placed, duration_s = _wav(tmp_path, ["pause the music", "what is the capital of france", "pause the music"],
                                   lead_s=14.0, gap_s=5.0)
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
