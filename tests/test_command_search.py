"""The browser's grammar-constrained command search (web/voxline/whisper.js) on the real Whisper tiny.en model, run
by node as `voxline bench readings` runs it: where the free transcript goes wrong at its first word ("time at foot
one hour" for "timer for one hour"), the grammar only refuses it a word later, and the search must be able to leave
the free transcript before the token the grammar refused (`grammarBacktrack`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from voxline.bench.readings import _clip, decode
from voxline.intents import builtin_grammar, normalize, recognize

SAID = "timer for one hour"
VOICES = ("espeak-gb", "espeak-us-f3", "hibari")


def test_a_misheard_first_word_is_read_as_the_command_by_leaving_the_free_transcript_early():
    grammar = builtin_grammar()
    with tempfile.TemporaryDirectory() as tmp:
        clips = [Path(tmp) / f"{voice}.f32" for voice in VOICES]
        for voice, path in zip(VOICES, clips):
            _clip(SAID, voice, seed=0).astype(np.float32).tofile(path)
        out = decode(clips, {"backtrack": {}, "anchored": {"grammarBacktrack": False}}, grammar)
    anchored_missed = 0
    for voice, now, before in zip(VOICES, out["backtrack"], out["anchored"]):
        reading = now["command"]
        assert reading, f"{voice}: no command reading of {now['text']!r}"
        match = recognize(normalize(reading["text"]), grammar, "en")
        assert match and match.intent == "timer.set" and match.slots == {"seconds": 3600}, (voice, reading)
        anchored_missed += before["command"] is None
    # the case this search exists for: the free transcript's first word was wrong in a way the grammar let pass
    assert anchored_missed >= 1, [r["text"] for r in out["backtrack"]]
