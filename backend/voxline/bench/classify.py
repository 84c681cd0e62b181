"""`voxline bench classify`: the server's intent classifier (voxline/server/intent_classifier.py) on text.

For each LLM named, over a development list of paraphrased commands and a list of out-of-domain utterances (both
written here, for tuning; the held-out evaluation set of `voxline bench intents` is never read), it runs the
server's decision as a turn does (the grammar first, then the classifier when the grammar misses) beside the
`off` baseline (the grammar alone) and prints JSON: accuracy of intent and slots, out-of-domain false accepts,
and the cost per utterance (P50/P95 ms) of each; `--rows` adds every verdict with the model's probability of its
command, which is what the acceptance threshold is calibrated on. Each LLM's figures come twice from the same
verdicts: with the intent neighbours' second opinion (the server's default) and `without_neighbours` (the design
before it: a command accepted only because the neighbour agreed counts as refused).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

from voxline.stats import percentile
from voxline.intents import Grammar, builtin_grammar, recognize
from voxline.server.intent_classifier import grounded, parse_command

SWEEP_THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

# Paraphrases of the default intents, written for development (with what they mean). Most are worded so that
# the grammar misses them: they are what the classifier is for.
DEV_PARAPHRASES: tuple[tuple[str, str, dict], ...] = (
    ("could you stop the song for a little while", "media.pause", {}),
    ("hang on, freeze the music", "media.pause", {}),
    ("hold the song right there", "media.pause", {}),
    ("let's have the music back", "media.resume", {}),
    ("carry on with the song", "media.resume", {}),
    ("get the music going again", "media.resume", {}),
    ("enough music, stop it completely", "media.stop", {}),
    ("I don't want any more music", "media.stop", {}),
    ("end the playback now please", "media.stop", {}),
    ("I don't like this one, skip it", "media.next", {}),
    ("move on to the following track", "media.next", {}),
    ("give me a different song", "media.next", {}),
    ("go back one track please", "media.previous", {}),
    ("play the one before this", "media.previous", {}),
    ("I want the song that was playing before", "media.previous", {}),
    ("I can barely hear anything, pump up the volume", "media.volume_up", {}),
    ("it's hard to hear, make it louder", "media.volume_up", {}),
    ("could you raise the sound a little", "media.volume_up", {}),
    ("bring the volume up please", "media.volume_up", {}),
    ("that is way too noisy, turn it down", "media.volume_down", {}),
    ("my ears hurt, lower it", "media.volume_down", {}),
    ("can you bring the sound down a notch", "media.volume_down", {}),
    ("put the volume at fifty", "media.volume_set", {"level": 50}),
    ("I'd like the volume on twenty", "media.volume_set", {"level": 20}),
    ("change the sound level to 70 percent", "media.volume_set", {"level": 70}),
    ("silence the speaker", "media.mute", {}),
    ("no sound for now please", "media.mute", {}),
    ("turn off all sound", "media.mute", {}),
    ("let me hear the sound again", "media.unmute", {}),
    ("switch the audio back on", "media.unmute", {}),
    ("wake me up in twenty minutes", "timer.set", {"seconds": 1200}),
    ("I need a reminder in five minutes for the eggs, set a timer", "timer.set", {"seconds": 300}),
    ("could you time ten minutes for me", "timer.set", {"seconds": 600}),
    ("start counting down forty five seconds", "timer.set", {"seconds": 45}),
    ("put on a timer of two hours", "timer.set", {"seconds": 7200}),
    ("I don't need that timer any longer", "timer.cancel", {}),
    ("scrap my countdown", "timer.cancel", {}),
    ("stop the countdown, I'm done cooking", "timer.cancel", {}),
    ("do you happen to know what time it is", "clock.time", {}),
    ("what's the hour", "clock.time", {}),
    ("how late is it right now, please tell me", "clock.time", {}),
    ("it's too dark in the kitchen, turn the lights on", "lights.on", {"area": "kitchen"}),
    ("give me some light in the bedroom", "lights.on", {"area": "bedroom"}),
    ("brighten up the office please", "lights.on", {"area": "office"}),
    ("I'm going to bed, lights off", "lights.off", {}),
    ("darken the living room", "lights.off", {"area": "living_room"}),
    ("switch the garage lamp off please", "lights.off", {"area": "garage"}),
    ("okay that's enough talking", "assistant.stop", {}),
    ("please stop, I got it", "assistant.stop", {}),
    ("play some relaxing jazz for me", "media.play", {"query": "relaxing jazz"}),
    ("I feel like listening to music", "media.play", {}),
    ("let's have some tunes", "media.play", {}),
)

# Utterances that are no command: questions, chat, and near misses about the same things.
OUT_OF_DOMAIN: tuple[str, ...] = (
    "what is a timer",
    "I play the piano",
    "the music was too loud yesterday",
    "do you like music",
    "how do I set a timer on my oven",
    "who invented the light bulb",
    "what's the loudest animal on earth",
    "tell me a joke about lights",
    "why do songs get stuck in my head",
    "what time does the bakery open",
    "my timer broke last week",
    "is it bad to listen to loud music",
    "what is the capital of France",
    "how are you today",
    "what's your name",
    "I'm feeling a bit tired",
    "can you recommend a good book",
    "what's the weather going to be tomorrow",
    "how many minutes are in a day",
    "who sings the song yesterday",
    "the lights in my office flicker, why",
    "what does mute mean",
    "my neighbour plays music all night",
    "I turned the volume down earlier",
    "explain how a dimmer switch works",
    "is it healthy to sleep with the lights on",
    "what's the difference between a song and a track",
    "how long should I boil an egg",
    "tell me something interesting",
    "what year is it",
    "do you have feelings",
    "the kitchen is a mess",
    "I stopped the music an hour ago",
    "what's the time difference between London and Tokyo",
    "how do headphones work",
    "thanks, that was helpful",
    "good morning",
    "what should I cook tonight",
    "who won the football last night",
    "translate hello into Spanish",
    "how far away is the moon",
    "what is the best volume for sleeping",
    "can music help plants grow",
    "did you hear that noise",
    "I'm listening to a podcast",
    "the next train leaves at five",
    "where is the nearest pharmacy",
    "how do you spell necessary",
    "write me a poem about the sea",
    "remind me what we talked about",
    "what's two plus two",
    "is the timer app free",
    "why is the sky blue",
    "I like it quiet in the evening",
    "lights are expensive to run",
    "play is important for children",
    "what's on tv tonight",
    "what does previous mean",
    "pause is a word with five letters",
    "I had a long day at work",
)


def evaluate(classify, grammar: Grammar, *, use_classifier: bool) -> dict:
    """Run the server's decision over both lists; `classify(text)` → Classification (or None when off)."""
    rows = []
    for text, intent, slots in DEV_PARAPHRASES:
        rows.append(_decide(classify, grammar, text, use_classifier) | {"text": text, "want": [intent, slots]})
    for text in OUT_OF_DOMAIN:
        rows.append(_decide(classify, grammar, text, use_classifier) | {"text": text, "want": None})
    return _figures(rows) | {"rows": rows}


def _figures(rows: list[dict]) -> dict:
    paraphrases = rows[:len(DEV_PARAPHRASES)]
    ood = rows[len(DEV_PARAPHRASES):]
    intent_ok = sum(r["got"] is not None and r["got"][0] == r["want"][0] for r in paraphrases)
    both_ok = sum(r["got"] == r["want"] for r in paraphrases)
    false_accepts = [r["text"] for r in ood if r["got"] is not None]
    ms = [r["ms"] for r in rows]
    return {
        "paraphrases": len(paraphrases),
        "intent_accuracy": round(intent_ok / len(paraphrases), 3),
        "intent_slots_accuracy": round(both_ok / len(paraphrases), 3),
        "grammar_hits": sum(r["by"] == "grammar" for r in paraphrases),
        "out_of_domain": len(ood),
        "false_accept_rate": round(len(false_accepts) / len(ood), 3),
        "false_accepts": false_accepts,
        "ms_p50": round(percentile(ms, 0.5), 1),
        "ms_p95": round(percentile(ms, 0.95), 1),
        "wrong": [{"text": r["text"], "want": r["want"], "got": r["got"], "command": r.get("command"),
                   "prob": r.get("prob"), "reason": r.get("reason")} for r in paraphrases if r["got"] != r["want"]],
    }


def without_neighbours(rows: list[dict]) -> dict:
    """The figures had the neighbours not been asked: what only their agreement accepted is refused."""
    return _figures([r | {"got": None, "by": "none"} if r.get("reason") == "agreed" else r for r in rows])


def _decide(classify, grammar: Grammar, text: str, use_classifier: bool, lang: str = "en") -> dict:
    started = time.perf_counter()
    match = recognize(text, grammar, lang)
    if match is not None:
        return {"got": [match.intent, dict(match.slots)], "by": "grammar",
                "ms": (time.perf_counter() - started) * 1000.0}
    if not use_classifier:
        return {"got": None, "by": "none", "ms": (time.perf_counter() - started) * 1000.0}
    verdict = classify(text, lang)
    ms = (time.perf_counter() - started) * 1000.0
    got = [verdict.match.intent, dict(verdict.match.slots)] if verdict.match is not None else None
    # What it would have said at any threshold (parsed and grounded), for calibrating `min_command_prob`.
    reading = parse_command(verdict.command, grammar)
    if reading is not None and not grounded(reading, text, grammar, lang):
        reading = None
    near = verdict.neighbour
    return {"got": got, "by": "classifier" if got else "none", "ms": ms, "command": verdict.command,
            "prob": round(verdict.command_prob, 4), "reason": verdict.reason,
            "neighbour": [near.intent, round(near.similarity, 3)] if near is not None else None,
            "reading": [reading.intent, dict(reading.slots)] if reading is not None else None}


def sweep(rows: list[dict], thresholds: Sequence[float]) -> list[dict]:
    """Intent+slots accuracy and false accepts of the whole decision (grammar, then classifier) had the threshold
    been each of `thresholds`, from one run's recorded readings and probabilities."""
    out = []
    for threshold in thresholds:
        right = paraphrases = accepted_ood = ood = 0
        for row in rows:
            got = row["got"] if row["by"] == "grammar" else (
                row.get("reading") if row.get("prob", 0.0) >= threshold else None)
            if row["want"] is None:
                ood += 1
                accepted_ood += got is not None
            else:
                paraphrases += 1
                right += got == row["want"]
        out.append({"min_command_prob": threshold, "intent_slots_accuracy": round(right / paraphrases, 3),
                    "false_accept_rate": round(accepted_ood / ood, 3)})
    return out


def set_figures(items: list, decisions: list[dict]) -> dict:
    """Accuracy on an evaluation set (`voxline.bench.evalset`) of one configuration's decisions, each
    ``{"got": [intent, slots] | None, "by": "grammar" | "classifier" | "none", "ms"}``, in the items' order."""
    from voxline.bench.evalset import slots_match

    counts: dict[str, int] = {}
    by_source: dict[str, int] = {}
    errors = []
    for item, decision in zip(items, decisions, strict=True):
        got = decision["got"]
        counts[item.kind] = counts.get(item.kind, 0) + 1
        if item.intent is None:
            right = got is None
        else:
            right = got is not None and item.accepts(got[0]) and slots_match(item.slots, got[1])
            by_source[decision["by"]] = by_source.get(decision["by"], 0) + 1
        counts[f"{item.kind} right"] = counts.get(f"{item.kind} right", 0) + right
        counts["acted wrongly"] = counts.get("acted wrongly", 0) + (got is not None and not right)
        if not right:
            errors.append(f"{item.kind}: {item.text!r} wanted {item.intent} {item.slots}, got {got} ({decision['by']})")
    ms = [d["ms"] for d in decisions]

    def share(kind: str) -> float:
        return round(counts.get(f"{kind} right", 0) / max(1, counts.get(kind, 0)), 3)

    return {"commands": counts.get("command", 0), "intent_slots_accuracy": share("command"),
            "one_word": counts.get("one-word", 0), "one_word_accuracy": share("one-word"),
            "out_of_domain": counts.get("ood", 0),
            "false_accept_rate": round(1 - share("ood"), 3) if counts.get("ood") else 0.0,
            "acted_wrongly": counts.get("acted wrongly", 0), "commands_by_source": by_source,
            "ms_p50": round(percentile(ms, 0.5), 2), "ms_p95": round(percentile(ms, 0.95), 2), "errors": errors}


def run_set(path, grammars: dict[str, Grammar], classifiers: dict[str, dict[str, object]]) -> dict:
    """`--set FILE`: each grammar alone, and each grammar followed by each of its classifiers (`classifiers`:
    grammar name → LLM name → classify; the server's decision), over the set's written text, item by item,
    configurations alternating."""
    from voxline.bench.evalset import load_set

    items = load_set(path)
    configs = {name: (grammar, None) for name, grammar in grammars.items()}
    for grammar_name, by_llm in classifiers.items():
        for name, classify in by_llm.items():
            configs[f"{grammar_name}+{name}"] = (grammars[grammar_name], classify)
    decisions: dict[str, list[dict]] = {name: [] for name in configs}
    for item in items:
        for name, (grammar, classify) in configs.items():
            decisions[name].append(_decide(classify, grammar, item.text, classify is not None, item.lang))
    return {"set": str(path), **{name: set_figures(items, rows) for name, rows in decisions.items()}}


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    from voxline.server.intent_classifier import ClassifierConfig

    if not isinstance(args, argparse.Namespace):
        parser = argparse.ArgumentParser(prog="voxline bench classify", description=__doc__.splitlines()[0])
        parser.add_argument("--llm", action="append")
        parser.add_argument("--threads", type=int, default=1)
        parser.add_argument("--min-command-prob", type=float, default=None)
        parser.add_argument("--rows", action="store_true")
        parser.add_argument("--set", type=str, default=None)
        parser.add_argument("--baseline-skills", default=None)
        parser.add_argument("--errors", action="store_true")
        args = parser.parse_args(args)
    if getattr(args, "set", None):
        return _main_set(args)
    config = ClassifierConfig() if args.min_command_prob is None else ClassifierConfig(
        min_command_prob=args.min_command_prob)
    grammar = builtin_grammar()
    names = args.llm or ["qwen2.5-0.5b-instruct-ct2", "smollm2-135m-instruct-ct2"]
    report: dict = {"machine": f"{os.cpu_count()} CPUs, LLM threads {args.threads}", "min_command_prob":
                    config.min_command_prob, "off": evaluate(None, grammar, use_classifier=False)}
    for name in names:
        report[name] = evaluate(_classifier(name, args, grammar), grammar, use_classifier=True)
        report[name]["without_neighbours"] = without_neighbours(report[name]["rows"])
        report[name]["threshold_sweep"] = sweep(report[name]["rows"], SWEEP_THRESHOLDS)
    for result in report.values():
        if isinstance(result, dict) and not args.rows:
            result.pop("rows")
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


def _main_set(args: argparse.Namespace) -> int:
    from voxline.intents import load_grammar

    grammars = {"grammar": builtin_grammar()}
    if args.baseline_skills:
        grammars["baseline-grammar"] = load_grammar(args.baseline_skills.split(","))
    classifiers = {g: {name: _classifier(name, args, grammar) for name in args.llm or []}
                   for g, grammar in grammars.items()}
    report = run_set(args.set, grammars, classifiers)
    for figures in report.values():
        if isinstance(figures, dict) and not args.errors:
            figures.pop("errors")
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


def _classifier(name: str, args: argparse.Namespace, grammar: Grammar):
    from voxline.llm import LLM
    from voxline.paths import model_dir
    from voxline.server.intent_classifier import NEIGHBOURS_MODEL, ClassifierConfig, LLMClassifier

    config = ClassifierConfig() if args.min_command_prob is None else ClassifierConfig(
        min_command_prob=args.min_command_prob)
    classifier = LLMClassifier(LLM(model_dir(name), threads=args.threads), grammar, config)
    classifier.build_neighbours(model_dir(NEIGHBOURS_MODEL))
    classifier.warm_up()  # the static prompt prefilled, as the server does at start
    return classifier.classify
