"""`voxline bench readings`: the device's decision as the page makes it, scored on hand-made decodes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from voxline.bench import readings
from voxline.intents import builtin_grammar

SETTINGS_JS = Path(__file__).resolve().parents[1] / "web" / "voxline" / "settings.js"


def _row(text, confidence, reading=None, reading_confidence=0.0):
    command = None if reading is None else {"text": reading, "confidence": reading_confidence}
    return {"text": text, "confidence": confidence, "command": command, "decodeMs": 1.0, "encodeMs": 2.0}


def test_the_gates_are_the_page_s():
    node = shutil.which("node")
    assert node
    script = f"import {{ DEFAULTS }} from {json.dumps(SETTINGS_JS.as_uri())}; console.log(JSON.stringify(DEFAULTS));"
    defaults = json.loads(subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True,
                                         check=True).stdout)
    assert defaults["commandMinConfidence"] == readings.COMMAND_MIN_CONFIDENCE
    assert defaults["localIntentMinConfidence"] == readings.LOCAL_INTENT_MIN_CONFIDENCE


def test_a_confident_reading_wins_over_an_unsure_transcript():
    grammar = builtin_grammar()
    assert readings.decide(_row("Skip this truck", 0.4, "Skip this track", 0.6), grammar)[0] == "media.next"
    assert readings.decide(_row("Skip this truck", 0.4, "Skip this track", 0.3), grammar) is None
    assert readings.decide(_row("Pause the music.", 0.9), grammar)[0] == "media.pause"
    assert readings.decide(_row("What is the capital of France?", 0.95), grammar) is None


def test_scoring_counts_right_wrong_and_out_of_domain_answers():
    grammar = builtin_grammar()
    items = [{"text": t, "voice": "v", "truth": readings._key(t, grammar)}
             for t in ["stop", "volume to forty percent", "what is a timer"]]
    rows = [_row("Stop.", 0.8), _row("volume to 4%", 0.9), _row("What is the time?", 0.9)]
    report = readings.score(items, rows, grammar)
    assert (report["commands"], report["correct"], report["wrong_action"]) == (2, 1, 1)
    assert (report["one_word"], report["one_word_correct"]) == (1, 1)
    assert (report["ood"], report["ood_accepted"]) == (1, 1)
    assert [e["text"] for e in report["errors"]] == ["volume to forty percent", "what is a timer"]
