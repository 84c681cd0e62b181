"""The page obeys `welcome`: the page's own link (web/voxline/link.js, under node with a real WebSocket) against a
real server. A turn whose confidence lies between the page's floor (0.5) and the server's re-recognition gate (0.6)
goes with its audio, and the server re-recognises it; above the server's gate the transcript goes alone.

Before, the page sent audio only below its own 0.5, so such a turn reached the server (which wanted to re-recognise
it) without audio, and the browser's transcript stood.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from voxline.bench.audio import RATE, hibari
from voxline.config import DEFAULT_ASR_CONFIDENCE_GATE, Settings
from voxline.server import protocol as p
from voxline.server_asr import encode_opus

from e2e.harness import ServerThread

ROOT = Path(__file__).resolve().parents[1]
LINK = ROOT / "web" / "voxline" / "link.js"
PAGE_FLOOR = 0.5
"""settings.js `localIntentMinConfidence`: the page's own gate, checked against the file below."""
BETWEEN_GATES = 0.55
"""A confidence the page alone would not have sent audio for, and the server re-recognises."""
MISHEARD = "turn the volume dawn"
"""The browser's transcript of the turn: wrong, as a transcript at this confidence may be."""

# One turn from the page's link, as the page sends it (voxline.js #serverTurn): audio when `link.wantsAudio`.
DRIVER = """
import { readFileSync } from 'node:fs';
import { BackendLink } from %(link)s;

const turn = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const bytes = (b64) => Uint8Array.from(Buffer.from(b64, 'base64')).buffer;
const seen = { transcripts: [], intents: [], errors: [] };
const link = new BackendLink(turn.url, {
  onStatus(connected) {
    if (!connected || seen.sent) return;
    seen.terms = link.terms;
    seen.sentAudio = link.wantsAudio(turn.confidence, turn.floor);
    const decoderConfig = { sampleRate: turn.sampleRate, numberOfChannels: 1, description: bytes(turn.description) };
    const audio = seen.sentAudio ? { packets: turn.packets.map(bytes), seconds: turn.seconds, decoderConfig } : null;
    seen.sent = link.sendTurn({ transcript: turn.transcript, confidence: turn.confidence, audio });
  },
  onTranscript: (turnId, text, confidence) => seen.transcripts.push({ text, confidence }),
  onIntent: (turnId, msg) => seen.intents.push(msg.intent),
  onReplyDelta() {},
  onReplyAudio() {},
  onReplyDone(turnId, text) {
    seen.reply = text;
    link.close();
    console.log(JSON.stringify(seen));
    process.exit(0);
  },
  onTimings() {},
  onError: (code, message) => seen.errors.push({ code, message }),
}, { opus: true });
link.connect();
setTimeout(() => { console.log(JSON.stringify({ ...seen, timedOut: true })); process.exit(1); }, 90000);
"""


@pytest.fixture(scope="module")
def server():
    with ServerThread(Settings.from_env(llm_model="smollm2-135m-instruct-ct2")) as running:
        yield running


@pytest.fixture(scope="module")
def spoken():
    """"turn the volume down" as the page's encoder would send it: Opus packets and their description."""
    samples = hibari("turn the volume down")
    packets, description = encode_opus(samples, RATE)
    return {"packets": [base64.b64encode(packet).decode() for packet in packets], "sampleRate": RATE,
            "description": base64.b64encode(description).decode(), "seconds": len(samples) / RATE}


def _page_turn(server, tmp_path, spoken, *, transcript: str, confidence: float) -> dict:
    node = shutil.which("node")
    assert node, "node is required (the README's setup installs the project on Node 20)"
    driver = tmp_path / "turn.mjs"
    driver.write_text(DRIVER % {"link": json.dumps(LINK.as_uri())})
    turn = tmp_path / "turn.json"
    url = server.url.replace("http://", "ws://") + "/ws"
    turn.write_text(json.dumps({**spoken, "url": url, "transcript": transcript, "confidence": confidence,
                                "floor": PAGE_FLOOR}))
    # Node 20's WebSocket (undici's, as browsers have it) is behind a flag; later versions have it by default.
    result = subprocess.run([node, "--experimental-websocket", "--no-warnings", str(driver), str(turn)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_pages_floor_is_below_the_servers_gate():
    settings = (ROOT / "web" / "voxline" / "settings.js").read_text(encoding="utf-8")
    assert f"localIntentMinConfidence: {PAGE_FLOOR}," in settings
    assert PAGE_FLOOR < BETWEEN_GATES < DEFAULT_ASR_CONFIDENCE_GATE


def test_a_turn_between_the_pages_and_the_servers_gate_is_re_recognised(server, tmp_path, spoken):
    seen = _page_turn(server, tmp_path, spoken, transcript=MISHEARD, confidence=BETWEEN_GATES)
    assert seen["terms"]["asrConfidenceGate"] == DEFAULT_ASR_CONFIDENCE_GATE
    assert seen["terms"]["replySampleRate"] == p.REPLY_AUDIO_RATE_HZ
    assert seen["terms"]["maxOpusTurnBytes"] == p.MAX_OPUS_TURN_BYTES
    assert seen["sentAudio"] is True
    (heard,) = seen["transcripts"]  # the server's own transcript: it re-recognised the audio
    assert "volume down" in heard["text"].lower(), seen
    assert seen["intents"] == ["media.volume_down"], seen
    assert seen["errors"] == [], seen


def test_a_turn_above_the_servers_gate_goes_without_audio(server, tmp_path, spoken):
    seen = _page_turn(server, tmp_path, spoken, transcript="turn the volume down", confidence=0.65)
    assert seen["sentAudio"] is False
    assert seen["transcripts"] == []  # the browser's transcript stood
    assert seen["intents"] == ["media.volume_down"], seen
