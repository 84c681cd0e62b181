"""The browser's grammar-constrained command search (web/voxline/whisper.js) on the real Whisper tiny.en model, run
by node as `voxline bench readings` runs it: where the free transcript goes wrong at its first word ("time at foot
one hour" for "timer for one hour"), the grammar only refuses it a word later, and the search must be able to leave
the free transcript before the token the grammar refused (`grammarBacktrack`)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from voxline import paths
from voxline.bench.readings import NODE_SCRIPT, _clip
from voxline.intents import builtin_grammar, normalize, recognize
from voxline.intents.lexicon import decoding_lexicon

SAID = "timer for one hour"
VOICES = ("espeak-gb", "espeak-us-f3", "hibari")


def _decode(clips: list[np.ndarray], configs: dict) -> dict:
    grammar = builtin_grammar()
    with tempfile.TemporaryDirectory() as tmp:
        paths_ = []
        for i, clip in enumerate(clips):
            path = Path(tmp) / f"{i}.f32"
            clip.astype(np.float32).tofile(path)
            paths_.append({"path": str(path)})
        request = {"modelDir": str(paths.model_dir("whisper-tiny-en-onnx")),
                   "lexicon": decoding_lexicon(grammar, "en"), "clips": paths_, "configs": configs}
        done = subprocess.run(["node", str(NODE_SCRIPT)], input=json.dumps(request), capture_output=True, text=True,
                              check=True)
    return json.loads(done.stdout)


def test_a_misheard_first_word_is_read_as_the_command_by_leaving_the_free_transcript_early():
    grammar = builtin_grammar()
    out = _decode([_clip(SAID, voice, seed=0) for voice in VOICES],
                  {"backtrack": {}, "anchored": {"grammarBacktrack": False}})
    anchored_missed = 0
    for voice, now, before in zip(VOICES, out["backtrack"], out["anchored"]):
        reading = now["command"]
        assert reading, f"{voice}: no command reading of {now['text']!r}"
        match = recognize(normalize(reading["text"]), grammar, "en")
        assert match and match.intent == "timer.set" and match.slots == {"seconds": 3600}, (voice, reading)
        anchored_missed += before["command"] is None
    # the case this search exists for: the free transcript's first word was wrong in a way the grammar let pass
    assert anchored_missed >= 1, [r["text"] for r in out["backtrack"]]
