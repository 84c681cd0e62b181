"""The page obeys the server's `welcome` in Chromium: a server whose re-recognition gate is above the page's own floor
gets the audio of a turn the page was confident enough about by its own measure (tests/test_welcome_terms.py does
the same with the page's link under node, at the default gates 0.5 and 0.6)."""

from __future__ import annotations

import json

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.config import Settings
from voxline.server import protocol as p

from e2e.conftest import E2E_LLM, settled_frames
from e2e.harness import ServerThread, VoxlinePage

PAGE_FLOOR = 0.5
"""settings.js `localIntentMinConfidence`: below it the page sends audio whatever the server says."""
STRICT_GATE = 0.999
"""The server's gate here: every turn the page hears with a confidence from its floor up lies below it."""


@pytest.fixture(scope="module")
def strict_server():
    with ServerThread(Settings.from_env(llm_model=E2E_LLM, asr_confidence_gate=STRICT_GATE)) as server:
        yield server


def test_a_turn_below_the_servers_announced_gate_goes_with_its_audio(browser_type, strict_server, tmp_path):
    audio, (question,) = compose([("what is the capital of france", hibari("what is the capital of france"))],
                                 tail_s=8.0)
    wav = write_wav(tmp_path / "question.wav", audio)
    vx = VoxlinePage(browser_type, strict_server.url, wav)
    try:
        vx.wait_for("ev.some(e => e.name === 'transcript' && e.source === 'server')",
                    timeout_s=len(audio) / RATE + 90)
        welcome = json.loads(next(f for f in vx.ws_received if isinstance(f, str)))
        assert welcome["type"] == "welcome" and welcome["limits"]["asr_confidence_gate"] == STRICT_GATE
        sent = settled_frames(vx.ws_sent)
        (start,) = [m for m in sent if m["type"] == "turn.start"]  # no speculative turn: it could carry no audio
        assert PAGE_FLOOR <= start["confidence"] < STRICT_GATE, start  # the page alone would have sent no audio
        assert start["audio"] == "opus" and "speculative" not in start, start
        frames = [f for f in vx.ws_sent if isinstance(f, bytes)]
        assert frames and all(f[0] == p.FRAME_OPUS for f in frames)
        assert [m["type"] for m in sent].count("turn.audio_end") == 1
        (heard,) = [e for e in vx.events("transcript") if e.get("source") == "server"]
        assert "capital" in heard["text"].lower(), vx.timeline()
        assert question.end_s > 0
    finally:
        vx.close()
