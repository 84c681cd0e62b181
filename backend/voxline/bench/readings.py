"""`voxline bench readings`: what the device would act on, grammar-aware decoding beside the free decode alone.

The browser's own Whisper module (web/voxline/whisper.js, run by node on onnxruntime-web's wasm, one thread) decodes
each clip once per configuration, alternating clip by clip (`--configs` picks some): `grammar` (the current
defaults: command readings from the grammar's word graph, a prompted second decode for short unsure utterances),
`anchored` (the constrained search leaves the free transcript only where the grammar first refuses it,
``grammarBacktrack`` off), `spelled` (the command confidence before it was calibrated, with its gate) and `free`
(``grammarDecode`` off: the free transcript and its word confidence alone), `graph-prompt` (the short utterances'
prompt from the word graph's shortest sentences, ``commandPromptFromSkills`` off), `confidence-dev-fit` (the command
confidence refitted on 160 lines of the development set, ``commandConfidenceModel``: measured, not adopted; see the
README), `confidence-before` (the command confidence as fitted before its `agreement` feature existed),
`confidence-before-support` (as fitted before its `support` feature existed: no forced decode), `one-token-runs`
(no drafted tokens, ``draftTokens`` 0: one decoder run per token; alike unless a partial came first),
`partial-drafts` (a partial decode of the clip's first 70 % first, whose tokens draft the final decode, as in the
page; not a page setting), `whole-window` (every position of the window through the encoder, ``encoderTail`` off:
the design before the cached silent tail), `tail-margin-0.5` and `tail-margin-1` (the head computes 0.5 s or 1 s
after the audio instead of 2 s, ``encoderTailMarginSecs``), `no-misheard-start-guard` (a reading that leaves out
the word heard before "pause" or "mute" is kept, ``misheardStartGuard`` off: the design before it). For each, the
device's decision is scored the way the page makes it: a command reading at or above ``commandMinConfidence``, else
the free transcript at or above ``localIntentMinConfidence``, matched by the grammar engine; anything else goes to
the server (no answer here).

The default set is `sets/tuning-en.txt`, on which the confidence gate was chosen; the held-out set for the whole
pipeline is `sets/commands-en.jsonl` (`voxline bench intents --set`). Expected intents come from the grammar
engine on the written text (a line the grammar does not match is out of domain); a `.jsonl` evaluation set
(`sets/README.md`, `--limit N` lines of it spread over the file) brings its own labels, scored as `voxline bench
intents --set` scores them. Voices are synthetic (espeak-ng variants, hibari): a proxy for real speech.
`--noise-snr-db` adds a copy of every clip with pink noise.

`--fit` fits the command confidence instead (whisper.js `COMMAND_CONFIDENCE_MODEL`): a logistic regression of
"the reading is what was said" on the reading's features, over every clip that gave one, and prints its
coefficients, then a sweep of gates and a reliability curve, both from predictions cross-validated by sentence
(5 folds: no sentence is scored by a model fitted on it).
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from voxline.bench import SETS
from voxline.bench import audio as test_audio
from voxline.bench.evalset import SetItem, limit_items, load_set, slots_match, spoken_items
from voxline.bench.stats import summary

NODE_SCRIPT = Path(__file__).with_name("node") / "readings.mjs"
VOICES = {
    "espeak-gb": ("espeak", "en-gb", 165),
    "espeak-us-f3": ("espeak", "en-us+f3", 150),
    "espeak-us-fast": ("espeak", "en-us", 180),
    "hibari": ("hibari", None, 1.0),
    "hibari-fast": ("hibari", None, 1.15),
}
# Page settings of each configuration decoded (see the module docstring).
CONFIGS = {"grammar": {}, "anchored": {"grammarBacktrack": False},
           "spelled": {"calibratedCommandConfidence": False, "commandMinConfidence": 0.35},
           "free": {"grammarDecode": False}, "graph-prompt": {"commandPromptFromSkills": False},
           "confidence-dev-fit": {"commandConfidenceModel": {
               "bias": 3.7, "spelled": 0.56, "margin": 0.48, "freeConfidence": 0.88, "wordRatio": 1.74}},
           "confidence-before": {"commandMinConfidence": 0.85, "commandConfidenceModel": {
               "bias": 3.85, "spelled": 0.32, "margin": 0.44, "freeConfidence": 0.53, "wordRatio": 2.99}},
           "confidence-before-support": {"commandConfidenceModel": {
               "bias": 2.72, "spelled": 0.75, "margin": 0.65, "freeConfidence": 0.06, "wordRatio": 2.42,
               "agreement": 1.14}},
           "one-token-runs": {"draftTokens": 0},
           "partial-drafts": {"partialFirst": 0.7},
           "whole-window": {"encoderTail": False},
           "tail-margin-0.5": {"encoderTailMarginSecs": 0.5}, "tail-margin-1": {"encoderTailMarginSecs": 1.0},
           "no-misheard-start-guard": {"misheardStartGuard": False}}
ASR_RATE = 16_000
# The page's gates (web/voxline/settings.js DEFAULTS): kept in step by test_bench_readings.
COMMAND_MIN_CONFIDENCE = 0.75
LOCAL_INTENT_MIN_CONFIDENCE = 0.5
FIT_FOLDS = 5
# Features whose worth `--fit` reports: the cross-validated sweep once more with the feature left out.
FIT_ABLATIONS = ("agreement", "support")
FIT_L2 = 1.0
SWEEP_GATES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
RELIABILITY_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0)


def _clip(text: str, voice: str, seed: int) -> np.ndarray:
    kind, name, speed = VOICES[voice]
    samples = test_audio.hibari(text, seed=seed, speed=speed) if kind == "hibari" else \
        test_audio.espeak(text, voice=name, speed=int(speed))
    positions = np.arange(int(len(samples) * ASR_RATE / test_audio.RATE)) * test_audio.RATE / ASR_RATE
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def _key(text: str | None, grammar) -> tuple[str, str] | None:
    from voxline.intents import recognize

    match = recognize(text, grammar) if text else None
    return None if match is None else _meaning(match.intent, match.slots)


def _meaning(intent: str, slots: dict) -> tuple[str, str]:
    """An intent and its slots as the scoring compares them (slots as sorted JSON)."""
    return intent, json.dumps(slots, sort_keys=True)


def decide(row: dict, grammar, gate: float = COMMAND_MIN_CONFIDENCE) -> tuple[str, str] | None:
    """What the page acts on for one decode (see the module docstring), or None (the server's turn); `gate`: the
    command confidence from which a reading acts."""
    reading = row.get("command")
    if reading and reading["confidence"] >= gate:
        return _key(reading["text"], grammar)
    if row["confidence"] >= LOCAL_INTENT_MIN_CONFIDENCE:
        return _key(row["text"], grammar)
    return None


def is_right(item: dict, got: tuple[str, str] | None) -> bool:
    """Whether a decision is what the item asked for. A line of a `.jsonl` set (`item["labelled"]`, a `SetItem`) is
    scored as `voxline bench intents --set` scores it (its `also_accept`, free text by its content words); a line of
    a text set by the intent and slots the grammar gives its written words."""
    labelled = item.get("labelled")
    if labelled is None:
        return got == item["truth"]
    if got is None or labelled.intent is None:
        return got is None and labelled.intent is None
    return labelled.accepts(got[0]) and slots_match(labelled.slots, json.loads(got[1]))


def score(items: list[dict], rows: list[dict], grammar, gate: float = COMMAND_MIN_CONFIDENCE) -> dict:
    """Accuracy, wrong actions and out-of-domain accepts of the device's decisions."""
    counts = {"commands": 0, "one_word": 0, "ood": 0, "correct": 0, "one_word_correct": 0, "wrong_action": 0,
              "ood_accepted": 0}
    errors = []
    for item, row in zip(items, rows):
        truth, got = item["truth"], decide(row, grammar, gate)
        right = is_right(item, got)
        if truth is None:
            counts["ood"] += 1
            counts["ood_accepted"] += got is not None
        else:
            counts["commands"] += 1
            one_word = item.get("one_word", len(item["text"].split()) == 1)
            counts["one_word"] += one_word
            counts["correct"] += right
            counts["one_word_correct"] += one_word and right
            counts["wrong_action"] += got is not None and not right
        if not right:
            errors.append({"text": item["text"], "voice": item["voice"], "heard": row["text"],
                           "reading": (row.get("command") or {}).get("text"), "expected": truth, "got": got})
    n = max(1, counts["commands"])
    return {**counts, "accuracy": round(counts["correct"] / n, 3),
            "one_word_on_device": round(counts["one_word_correct"] / max(1, counts["one_word"]), 3),
            "ood_false_accepts": round(counts["ood_accepted"] / max(1, counts["ood"]), 3),
            "decode_ms": summary([r["decodeMs"] for r in rows]), "encode_ms": summary([r["encodeMs"] for r in rows]),
            "free_decode_runs": summary([r["runs"] for r in rows if r.get("runs") is not None]),
            "drafted_tokens_kept": round(sum(r.get("kept") or 0 for r in rows)
                                         / max(1, sum(r.get("drafted") or 0 for r in rows)), 3),
            "errors": errors}


def features(reading: dict) -> list[float]:
    """The confidence model's inputs, as whisper.js `commandConfidence` computes them from `reading.features`."""
    f = reading["features"]
    return [math.log(max(f["spelled"], 1e-4)), min(0.0, f["margin"]), math.log(max(f["freeConfidence"], 1e-4)),
            math.log((f["readingWords"] + 1) / (f["freeWords"] + 1)), f["agreement"],
            min(0.0, f.get("support", f["margin"]))]


FEATURE_NAMES = ("spelled", "margin", "freeConfidence", "wordRatio", "agreement", "support")


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = FIT_L2) -> np.ndarray:
    """Weights (one per column, then the bias) of an L2-regularised logistic regression, by Newton's method."""
    x = np.hstack([x, np.ones((len(x), 1))])
    penalty = l2 * np.diag(np.r_[np.ones(x.shape[1] - 1), 1e-3])  # the bias barely: finite when all agree
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        step = np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]) + penalty, x.T @ (p - y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(np.hstack([x, np.ones((len(x), 1))]) @ w)))


def fit_report(items: list[dict], rows: list[dict], grammar) -> dict:
    """Coefficients over all clips with a reading; the gate sweep and reliability from cross-validated ones."""
    with_reading = [i for i, row in enumerate(rows) if row.get("command")]
    x = np.array([features(rows[i]["command"]) for i in with_reading])
    y = np.array([float(items[i]["truth"] is not None and is_right(items[i], _key(rows[i]["command"]["text"], grammar)))
                  for i in with_reading])
    sentences = sorted({items[i]["text"] for i in with_reading})
    fold = {text: k % FIT_FOLDS for k, text in enumerate(sentences)}
    folds = np.array([fold[items[i]["text"]] for i in with_reading])

    def held_out(columns: np.ndarray) -> np.ndarray:
        held = np.zeros(len(with_reading))
        for k in set(folds.tolist()):
            held[folds == k] = predict(fit_logistic(columns[folds != k], y[folds != k]), columns[folds == k])
        return held

    def sweep_of(held: np.ndarray) -> list[dict]:
        cross_validated = _rescored(rows, dict(zip(with_reading, held)).__getitem__)
        return [{"gate": gate} | _fit_figures(score(items, cross_validated, grammar, gate)) for gate in SWEEP_GATES]

    held = held_out(x)
    w = fit_logistic(x, y)
    sweep = sweep_of(held)
    # The same fit without each feature in turn: what that feature adds, on the same readings.
    ablations = {name: sweep_of(held_out(np.delete(x, k, axis=1)))
                 for k, name in enumerate(FEATURE_NAMES) if name in FIT_ABLATIONS}
    # The same readings under the confidence before it was calibrated (spelled × exp(½ · margin), gate 0.35). Only
    # the scoring differs: which of a free and a prompted reading was kept was decided by the calibrated one.
    before_gate = CONFIGS["spelled"]["commandMinConfidence"]
    before = score(items, _rescored(rows, lambda i: _spelled_confidence(rows[i]["command"])), grammar, before_gate)
    reliability = []
    for low, high in zip(RELIABILITY_BINS, RELIABILITY_BINS[1:]):
        inside = (held >= low) & ((held < high) if high < 1.0 else (held <= high))
        if inside.any():
            reliability.append({"predicted": [low, high], "readings": int(inside.sum()),
                                "mean_predicted": round(float(held[inside].mean()), 3),
                                "right": round(float(y[inside].mean()), 3)})
    return {"coefficients": {"bias": round(float(w[-1]), 2)} | {
                name: round(float(v), 2) for name, v in zip(FEATURE_NAMES, w[:-1])},
            "readings": len(with_reading), "right_readings": int(y.sum()),
            "cross_validated_sweep": sweep, "reliability": reliability,
            "cross_validated_sweep_without": ablations,
            "before": {"gate": before_gate} | _fit_figures(before)}


def _rescored(rows: list[dict], confidence) -> list[dict]:
    """`rows` with the confidence of each reading replaced by `confidence(row index)`."""
    return [row | {"command": row["command"] | {"confidence": confidence(i)}} if row.get("command") else row
            for i, row in enumerate(rows)]


def _fit_figures(scored: dict) -> dict:
    return {k: scored[k] for k in ("accuracy", "one_word_on_device", "wrong_action", "ood_accepted",
                                   "ood_false_accepts")}


def _spelled_confidence(reading: dict) -> float:
    f = reading["features"]
    return f["spelled"] * math.exp(0.5 * min(0.0, f["margin"]))


def decode(clip_paths: list[str], configs: dict[str, dict], grammar) -> dict[str, list[dict]]:
    """Decode raw 16 kHz float32 clips (files) with the browser's whisper.js under node, once per configuration of
    page settings, alternating clip by clip; each configuration's rows in clip order (see node/readings.mjs)."""
    from voxline import paths
    from voxline.intents.lexicon import decoding_lexicon

    request = {"modelDir": str(paths.model_dir("whisper-tiny-en-onnx")), "lexicon": decoding_lexicon(grammar, "en"),
               "clips": [{"path": str(p)} for p in clip_paths], "configs": configs}
    done = subprocess.run(["node", str(NODE_SCRIPT)], input=json.dumps(request), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        raise RuntimeError(f"the node decoder failed ({how}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def set_lines(set_path: Path, grammar, limit: int | None = None) -> list[tuple[str, SetItem | None]]:
    """The set's utterances, each with its labels: a `.jsonl` evaluation set (`sets/README.md`) brings its own, a
    text set (one utterance a line, `#` comments) none (the grammar labels it). `limit`: that many lines spread over
    the file."""
    if set_path.suffix == ".jsonl":
        return [(item.text, item) for item in limit_items(spoken_items(load_set(set_path)), limit)]
    texts = [line.strip() for line in set_path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [(text, None) for text in limit_items(texts, limit)]


def _item(text: str, labelled: SetItem | None, grammar) -> dict:
    if labelled is None:
        return {"text": text, "truth": _key(text, grammar)}
    truth = None if labelled.intent is None else _meaning(labelled.intent, labelled.slots)
    return {"text": text, "truth": truth, "labelled": labelled, "one_word": labelled.kind == "one-word"}


def run(set_path: Path, voices: list[str], noise_snr_db: float | None = None, fit: bool = False,
        config_names: list[str] | None = None, baseline_grammar=None, limit: int | None = None) -> dict:
    """Decode the set (each voice, clean and noisy) once per configuration (`config_names`: some of `CONFIGS`,
    default all; the current defaults, `grammar`, always) and score the device's decisions, or fit (`fit`).
    `baseline_grammar`: also decode every clip with that grammar's word graph and decide with it
    (`baseline-grammar`, the page's defaults); the expected intents still come from the current grammar."""
    from voxline.intents import builtin_grammar

    started = time.monotonic()
    grammar = builtin_grammar()
    lines = set_lines(set_path, grammar, limit)
    with tempfile.TemporaryDirectory() as tmp:
        items = []
        for i, (text, labelled) in enumerate(lines):
            for voice in voices:
                clip = _clip(text, voice, seed=i)
                copies = [("", clip)] if noise_snr_db is None else [
                    ("", clip), ("-noisy", test_audio.add_noise(test_audio.level(clip), noise_snr_db, seed=i))]
                for suffix, samples in copies:
                    clip_path = Path(tmp) / f"{i}-{voice}{suffix}.f32"
                    samples.astype(np.float32).tofile(clip_path)
                    items.append(_item(text, labelled, grammar) | {"voice": voice + suffix, "path": str(clip_path)})
        names = ["grammar"] if fit else ["grammar", *(n for n in config_names or CONFIGS if n != "grammar")]
        configs = {name: CONFIGS[name] for name in names}
        if fit:  # every feature measured, whichever the current model weighs
            configs["grammar"] = configs["grammar"] | {"measureSupport": True}
        results = decode([i["path"] for i in items], configs, grammar)
        if baseline_grammar is not None and not fit:
            results |= decode([i["path"] for i in items], {"baseline-grammar": {}}, baseline_grammar)
    report = {"benchmark": "readings", "set": str(set_path), "voices": voices, "noise_snr_db": noise_snr_db,
              "speech": "synthetic (espeak-ng, hibari): a proxy for real voices", "utterances": len(items)}
    if fit:
        return report | {"fit": fit_report(items, results["grammar"], grammar),
                         "wall_s": round(time.monotonic() - started, 1)}
    for name, rows in results.items():
        report[name] = score(items, rows, baseline_grammar if name == "baseline-grammar" else grammar,
                             CONFIGS.get(name, {}).get("commandMinConfidence", COMMAND_MIN_CONFIDENCE))
    for name in (n for n in results if n != "grammar"):
        report[f"accuracy_ratio_vs_{name}"] = round(report["grammar"]["accuracy"] / max(1e-9, report[name]["accuracy"]),
                                                    2)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def main(args) -> int:
    voices = [v for spec in args.voices or ["espeak-gb,espeak-us-f3,espeak-us-fast,hibari,hibari-fast"]
              for v in spec.split(",")]
    unknown = [v for v in voices if v not in VOICES]
    if unknown:
        raise SystemExit(f"unknown voice(s) {', '.join(unknown)}: choose from {', '.join(VOICES)}")
    names = [n for spec in args.configs or [] for n in spec.split(",")] or None
    unknown = [n for n in names or [] if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {', '.join(unknown)}: choose from {', '.join(CONFIGS)}")
    baseline = None
    if getattr(args, "baseline_skills", None):
        from voxline.intents import load_grammar

        baseline = load_grammar(args.baseline_skills.split(","))
    report = run(args.set or SETS / "tuning-en.txt", voices, args.noise_snr_db, args.fit, names, baseline,
                 args.limit)
    if args.fit:
        print(json.dumps(report, indent=1))
        return 0
    errors = {name: report[name].pop("errors") for name in [*CONFIGS, "baseline-grammar"] if name in report}
    print(json.dumps(report, indent=1))
    if args.errors:
        for name, rows in errors.items():
            for row in rows:
                print(json.dumps({"config": name, **row}))
    return 0
