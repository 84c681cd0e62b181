"""`voxline bench readings`: what the device would act on, grammar-aware decoding beside the free decode alone.

The browser's own Whisper module (web/voxline/whisper.js, run by node on onnxruntime-web's wasm, one thread) decodes
each clip twice, alternating: `grammar` (the current defaults: command readings from the grammar's word graph, a
prompted second decode for short unsure utterances) and `free` (``grammarDecode`` off: the free transcript and its
word confidence, the design before it). For each, the device's decision is scored the way the page makes it: a
command reading at or above ``commandMinConfidence``, else the free transcript at or above
``localIntentMinConfidence``, matched by the grammar engine; anything else goes to the server (no answer here).

The default set is `sets/tuning-en.txt`, on which the confidence gate was chosen; the held-out set for the whole
pipeline is `sets/commands-en.jsonl` (`voxline bench intents --set`). Expected intents come from the grammar
engine on the written text (a line the grammar does not match is out of domain). Voices are synthetic (espeak-ng
variants, hibari): a proxy for real speech.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from voxline.bench import audio as test_audio
from voxline.bench.stats import summary

SETS = Path(__file__).with_name("sets")
NODE_SCRIPT = Path(__file__).with_name("node") / "readings.mjs"
VOICES = {
    "espeak-gb": ("espeak", "en-gb", 165),
    "espeak-us-f3": ("espeak", "en-us+f3", 150),
    "espeak-us-fast": ("espeak", "en-us", 180),
    "hibari": ("hibari", None, 1.0),
    "hibari-fast": ("hibari", None, 1.15),
}
CONFIGS = {"grammar": {}, "free": {"grammarDecode": False}}
ASR_RATE = 16_000
# The page's gates (web/voxline/settings.js DEFAULTS): kept in step by test_bench_readings.
COMMAND_MIN_CONFIDENCE = 0.35
LOCAL_INTENT_MIN_CONFIDENCE = 0.5


def _clip(text: str, voice: str, seed: int) -> np.ndarray:
    kind, name, speed = VOICES[voice]
    samples = test_audio.hibari(text, seed=seed, speed=speed) if kind == "hibari" else \
        test_audio.espeak(text, voice=name, speed=int(speed))
    positions = np.arange(int(len(samples) * ASR_RATE / test_audio.RATE)) * test_audio.RATE / ASR_RATE
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def _key(text: str | None, grammar) -> tuple[str, str] | None:
    from voxline.intents import recognize

    match = recognize(text, grammar) if text else None
    return None if match is None else (match.intent, json.dumps(match.slots, sort_keys=True))


def decide(row: dict, grammar) -> tuple[str, str] | None:
    """What the page acts on for one decode (see the module docstring), or None (the server's turn)."""
    reading = row.get("command")
    if reading and reading["confidence"] >= COMMAND_MIN_CONFIDENCE:
        return _key(reading["text"], grammar)
    if row["confidence"] >= LOCAL_INTENT_MIN_CONFIDENCE:
        return _key(row["text"], grammar)
    return None


def score(items: list[dict], rows: list[dict], grammar) -> dict:
    """Accuracy, wrong actions and out-of-domain accepts of the device's decisions."""
    counts = {"commands": 0, "one_word": 0, "ood": 0, "correct": 0, "one_word_correct": 0, "wrong_action": 0,
              "ood_accepted": 0}
    errors = []
    for item, row in zip(items, rows):
        truth, got = item["truth"], decide(row, grammar)
        if truth is None:
            counts["ood"] += 1
            counts["ood_accepted"] += got is not None
        else:
            counts["commands"] += 1
            one_word = len(item["text"].split()) == 1
            counts["one_word"] += one_word
            counts["correct"] += got == truth
            counts["one_word_correct"] += one_word and got == truth
            counts["wrong_action"] += got is not None and got != truth
        if got != truth:
            errors.append({"text": item["text"], "voice": item["voice"], "heard": row["text"],
                           "reading": (row.get("command") or {}).get("text"), "expected": truth, "got": got})
    n = max(1, counts["commands"])
    return {**counts, "accuracy": round(counts["correct"] / n, 3),
            "one_word_on_device": round(counts["one_word_correct"] / max(1, counts["one_word"]), 3),
            "ood_false_accepts": round(counts["ood_accepted"] / max(1, counts["ood"]), 3),
            "decode_ms": summary([r["decodeMs"] for r in rows]), "encode_ms": summary([r["encodeMs"] for r in rows]),
            "errors": errors}


def run(set_path: Path, voices: list[str]) -> dict:
    from voxline import paths
    from voxline.intents import builtin_grammar
    from voxline.intents.lexicon import decoding_lexicon

    started = time.monotonic()
    grammar = builtin_grammar()
    texts = [line.strip() for line in set_path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    with tempfile.TemporaryDirectory() as tmp:
        items = []
        for i, text in enumerate(texts):
            for voice in voices:
                clip_path = Path(tmp) / f"{i}-{voice}.f32"
                _clip(text, voice, seed=i).tofile(clip_path)
                items.append({"text": text, "voice": voice, "path": str(clip_path), "truth": _key(text, grammar)})
        request = {"modelDir": str(paths.model_dir("whisper-tiny-en-onnx")),
                   "lexicon": decoding_lexicon(grammar, "en"), "clips": [{"path": i["path"]} for i in items],
                   "configs": CONFIGS}
        done = subprocess.run(["node", str(NODE_SCRIPT)], input=json.dumps(request), capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the node decoder failed: {done.stderr[-2000:]}")
        results = json.loads(done.stdout)
    report = {"benchmark": "readings", "set": str(set_path), "voices": voices,
              "speech": "synthetic (espeak-ng, hibari): a proxy for real voices", "utterances": len(items)}
    for name, rows in results.items():
        report[name] = score(items, rows, grammar)
    report["accuracy_ratio_vs_free"] = round(report["grammar"]["accuracy"] / max(1e-9, report["free"]["accuracy"]), 2)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def main(args) -> int:
    voices = [v for spec in args.voices or ["espeak-gb,espeak-us-f3,espeak-us-fast,hibari,hibari-fast"]
              for v in spec.split(",")]
    unknown = [v for v in voices if v not in VOICES]
    if unknown:
        raise SystemExit(f"unknown voice(s) {', '.join(unknown)}: choose from {', '.join(VOICES)}")
    report = run(args.set or SETS / "tuning-en.txt", voices)
    errors = {name: report[name].pop("errors") for name in CONFIGS}
    print(json.dumps(report, indent=1))
    if args.errors:
        for name, rows in errors.items():
            for row in rows:
                print(json.dumps({"config": name, **row}))
    return 0
