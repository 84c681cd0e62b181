"""`voxline bench readings`: the device's decision as the page makes it, scored on hand-made decodes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

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
    gate = readings.COMMAND_MIN_CONFIDENCE
    assert readings.decide(_row("Skip this truck", 0.4, "Skip this track", gate), grammar)[0] == "media.next"
    assert readings.decide(_row("Skip this truck", 0.4, "Skip this track", gate - 0.01), grammar) is None
    assert readings.decide(_row("Skip this truck", 0.4, "Skip this track", 0.3), grammar, gate=0.3)[0] == "media.next"
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


def _features(spelled=0.5, margin=0.0, free_confidence=0.5, reading_words=2, free_words=2, agreement=1.0,
              support=None):
    support = {} if support is None else {"support": support}
    return {"features": {"spelled": spelled, "margin": margin, "freeConfidence": free_confidence,
                         "readingWords": reading_words, "freeWords": free_words, "agreement": agreement} | support}


def test_the_fit_recovers_a_model_that_separates_readings():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    y = (x @ np.array([2.0, -1.0]) + 0.5 + rng.logistic(size=400) * 0.3 > 0).astype(float)
    w = readings.fit_logistic(x, y, l2=0.01)
    assert w[0] > abs(w[1]) > 0 and w[1] < 0  # the signs of both weights, and which weighs more
    assert np.mean((readings.predict(w, x) >= 0.5) == (y == 1)) > 0.9


def test_features_are_those_whisper_js_feeds_its_model():
    """The Python features and the page's `commandConfidence` agree: the fit's coefficients mean the same there."""
    node = shutil.which("node")
    assert node
    reading = _features(spelled=0.3, margin=-1.5, free_confidence=0.6, reading_words=1, free_words=4, agreement=0.4,
                        support=-4.0)
    whisper = (Path(__file__).resolve().parents[1] / "web" / "voxline" / "whisper.js").as_uri()
    script = (f"import {{ commandConfidence, COMMAND_CONFIDENCE_MODEL }} from {json.dumps(whisper)};"
              f"console.log(JSON.stringify([commandConfidence({json.dumps(reading['features'])}),"
              f" COMMAND_CONFIDENCE_MODEL]));")
    page, model = json.loads(subprocess.run([node, "--input-type=module", "-e", script], capture_output=True,
                                            text=True, check=True).stdout)
    weights = np.array([model[name] for name in readings.FEATURE_NAMES] + [model["bias"]])
    ours = readings.predict(weights, np.array([readings.features(reading)]))[0]
    assert abs(page - ours) < 1e-9
    # fewer words than were heard: the reading covers part of a sentence, and counts for less
    assert page < readings.predict(weights, np.array([readings.features(_features(0.3, -1.5, 0.6, 4, 4, 0.4, -4.0))]))[0]
    # a reading the free transcript does not bear out counts for less
    assert page > readings.predict(weights, np.array([readings.features(_features(0.3, -1.5, 0.6, 1, 4, 0.0, -4.0))]))[0]
    # and one the unprompted decoder finds less likely
    assert page > readings.predict(weights, np.array([readings.features(_features(0.3, -1.5, 0.6, 1, 4, 0.4, -8.0))]))[0]


def test_a_labelled_set_is_scored_by_its_labels(tmp_path):
    """A `.jsonl` line is right by its own intent, `also_accept` and slots (free text by its content words), not by
    what the grammar reads of its written words."""
    grammar = builtin_grammar()
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in [
        {"text": "halt", "intent": "media.stop", "slots": {}, "kind": "one-word", "also_accept": ["assistant.stop"]},
        {"text": "put on some jazz", "intent": "media.play", "slots": {"query": "jazz"}, "kind": "command"},
        {"text": "what is a timer", "intent": None, "slots": {}, "kind": "ood"},
    ]) + "\n")
    lines = readings.set_lines(path, grammar)
    items = [readings._item(text, labelled, grammar) | {"voice": "v"} for text, labelled in lines]
    rows = [_row("Stop.", 0.9), _row("Play jazz please.", 0.9), _row("What is a timer?", 0.9)]
    report = readings.score(items, rows, grammar)
    assert (report["commands"], report["correct"], report["one_word_correct"]) == (2, 2, 1)
    assert (report["ood"], report["ood_accepted"]) == (1, 0)
    rows[1] = _row("Play blues.", 0.9)
    assert readings.score(items, rows, grammar)["wrong_action"] == 1
    assert len(readings.set_lines(path, grammar, limit=2)) == 2
