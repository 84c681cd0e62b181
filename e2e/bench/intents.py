"""`voxline bench intents`: zero-round-trip intent latency, end of speech → `voxline:intent`, per source; and, with
`--set FILE`, accuracy on a held-out evaluation set (`run_set`, below).

Without `--set`, each configuration hears the commands twice in one page: the first pass resolves them with the
grammar engine (`local`), the second from the IndexedDB cache (`cache`). The baseline configuration ends every
turn after 800 ms of silence (pipecat's default `stop_secs`), without smart-turn and without early dispatch. Also
measured: match time of the engine in CPython and in Pyodide, and the cache lookup.
"""

from __future__ import annotations

import json
import time
import timeit
from dataclasses import dataclass
from pathlib import Path

from voxline.bench.evalset import (  # noqa: F401 (the set's format and scoring, re-exported for the benches)
    DEFAULT_SET, KINDS, QUERY_FILLER_WORDS, SetFormatError, SetItem, limit_items, load_set, slots_match, spoken_items,
)
from voxline.bench import audio as test_audio
from voxline.bench.stats import rate, ratio, summary
from e2e.bench.spoken import VOICES, Config, Page, match, render, render_voice, run_configs, run_pages

COMMANDS = [
    "pause the music", "turn the volume down", "skip this song", "set a timer for ten minutes", "what time is it",
    "switch off the kitchen lights", "play some jazz", "volume to thirty percent", "turn on the lights",
    "resume the music", "next track", "turn it up",
]
CONFIGS = {
    "voxline": "",
    "fixed-800ms-baseline": "&vx.hangoverSecs=0.8&vx.turnCompleteProb=2&vx.pauseIntentMinConfidence=2",
}
ENGINE_START_S = 14.0  # lead silence: Pyodide starts while the fake microphone plays it


def cpython_match_ms() -> dict:
    from voxline.intents import builtin_grammar, recognize

    grammar = builtin_grammar()
    times = []
    for text in COMMANDS + ["what is the tallest mountain in the world"]:
        times += [1000 * t for t in timeit.repeat(lambda: recognize(text, grammar), number=1, repeat=20)]
    return summary(times)


def run(rounds: int = 1, llm: str = "smollm2-135m-instruct-ct2") -> dict:
    started = time.monotonic()
    clips = render(COMMANDS + COMMANDS)
    placed, runs = run_configs(clips, CONFIGS, rounds, llm=llm, lead_s=ENGINE_START_S)
    half = len(COMMANDS)
    report = {"benchmark": "intents", "voice": "hibari (synthetic speech: a proxy for real voices)",
              "commands": half, "passes_per_page": 2, "rounds": rounds}
    for name, pages in runs.items():
        by_source: dict[str, list[float]] = {}
        missed = wrong_source = 0
        for events in pages:
            for i, truth in enumerate(placed):
                intent = match(events, "intent", truth, after=1.5)
                if intent is None:
                    missed += 1
                    continue
                by_source.setdefault(intent["source"], []).append(1000 * (intent["audio_t"] - truth.end_s))
                wrong_source += intent["source"] != ("local" if i < half else "cache")
        report[name] = {"eos_to_intent_ms": {s: summary(v) for s, v in sorted(by_source.items())},
                        "all_sources_ms": summary([x for v in by_source.values() for x in v]),
                        "missed": missed, "unexpected_source": wrong_source}
    ours, base = report["voxline"]["all_sources_ms"], report["fixed-800ms-baseline"]["all_sources_ms"]
    report["ratio_vs_baseline"] = {"p50": ratio(ours, base), "p95": ratio(ours, base, "p95")}
    report["match_ms_cpython"] = cpython_match_ms()
    report.update(_browser_match_times(llm))
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def _browser_match_times(llm: str) -> dict:
    """Engine match time inside Pyodide (worker-side) and the cache lookup, measured in the page."""
    from playwright.sync_api import sync_playwright

    from voxline.config import Settings
    from e2e.harness import ServerThread, launch_chromium

    script = """async (texts) => {
      const { IntentResolver } = await import('/voxline/intents.js');
      const resolver = await IntentResolver.create({ cacheName: 'bench-' + Math.random() });
      while (!resolver.ready) {
        if (resolver.failure) throw new Error(resolver.failure.message);
        await new Promise((r) => setTimeout(r, 100));
      }
      const worker = [], roundTrip = [], peek = [];
      for (let i = 0; i < 5; i++) for (const text of texts) {
        const t = performance.now();
        const result = await resolver.recognize(text);
        roundTrip.push(performance.now() - t);
        worker.push(result.ms);
        if (result.match) await resolver.remember(text, result.match, 'local');
      }
      for (let i = 0; i < 200; i++) for (const text of texts) {
        const t = performance.now();
        resolver.peek(text);
        peek.push(performance.now() - t);
      }
      return { worker, roundTrip, peek };
    }"""
    with ServerThread(Settings.from_env(llm_model=llm)) as server, sync_playwright() as pw:
        browser = launch_chromium(pw.chromium)
        try:
            page = browser.new_page()
            page.goto(server.url + "/healthz")
            out = page.evaluate(script, COMMANDS)
        finally:
            browser.close()
    return {"match_ms_pyodide_worker": summary(out["worker"]), "match_ms_pyodide_round_trip": summary(out["roundTrip"]),
            "cache_peek_ms": summary(out["peek"])}




# --- `--set FILE`: accuracy, out-of-domain false accepts, sources and latency on a held-out set. ---
# The set's format is described in voxline/bench/sets/README.md. Synthetic voices: a proxy for real speakers.

SOURCES = ("cache", "local", "server", "none")
ON_DEVICE_SOURCES = ("cache", "local")
SET_CONFIGS = [
    Config("voxline"),
    # Today's design: the free decode's word confidence decides, and the server has no intent classifier (only its
    # grammar, then the LLM chats). The page setting and the server field are named here and nowhere else.
    Config("baseline", query="&vx.grammarDecode=0", server={"intent_classifier": "off"}),
]
DEFAULT_SET_VOICES = ("espeak-gb", "espeak-us-f3-slow", "hibari-1")
DEFAULT_NOISE_SNR_DB = 10.0
NOISE_KIND = "pink"
PAGE_UTTERANCES = 24  # one Chromium run stays around two minutes
SET_GAP_S = 2.75  # silence after each utterance: the turn ends, the server answers, before the next one starts
SET_TAIL_S = 3.0
SET_SEED = 13
PROBLEM_CHARS = 200  # console errors and voxline:error events are reported by their first characters, counted
MAX_PROBLEMS_REPORTED = 10
@dataclass(frozen=True)
class Spoken:
    """One item as heard in one page: where its speech sits and until when an answer counts as its own."""

    item: SetItem
    voice: str
    condition: str
    """`clean` or `noisy`."""
    first_pass: bool
    """False for the second hearing of a command in the same page (the learned cache is measured there)."""
    start_s: float
    end_s: float
    until_s: float


def turn_ends(events: list[dict]) -> list[float]:
    """For each event, where the speech of the turn it belongs to ended (capture clock), so that a late answer is
    credited to the utterance that asked for it, not to the one being spoken when it arrives (on a loaded machine
    an answer can come after the next utterance has begun).

    A final transcript carries its turn's `end_t`; an intent or a reply belongs to the last final transcript before
    it, except an early intent (`early`, dispatched while the turn is still open), which belongs to the next
    `speech-end`. Events without such a neighbour fall back to their own `audio_t`.
    """
    ends: list[float] = []
    last_final: float | None = None
    for index, event in enumerate(events):
        end = event["audio_t"]
        if event["name"] == "transcript" and event.get("final") and "end_t" in event:
            end = last_final = event["end_t"]
        elif event["name"] == "speech-end" and "end_t" in event:
            end = event["end_t"]
        elif event["name"] == "intent" and event.get("early"):
            end = next((e["end_t"] for e in events[index + 1:] if e["name"] == "speech-end" and "end_t" in e),
                       event["audio_t"])
        elif event["name"] in ("intent", "reply", "transcript") and last_final is not None:
            end = last_final
        ends.append(end)
    return ends


def score(spoken: Spoken, events: list[dict], ends: list[float] | None = None) -> dict:
    """The outcome of one utterance from the page's events: the first `voxline:intent` of a turn whose speech ended
    between the start of this utterance and the start of the next is what the device acted on. `ends`: the
    events' `turn_ends` (computed when not given)."""
    item = spoken.item
    ends = turn_ends(events) if ends is None else ends
    own = [e for e, end in zip(events, ends) if spoken.start_s <= end < spoken.until_s]
    intent = next((e for e in own if e["name"] == "intent"), None)
    finals = [e for e in own if e["name"] == "transcript" and e.get("final") and e.get("source") != "server"]
    server_finals = [e for e in own if e["name"] == "transcript" and e.get("source") == "server"]
    replied = any(e["name"] == "reply" and (e.get("text") or "").strip() for e in own)  # pages emit empty finals
    got = intent["intent"] if intent else None
    got_slots = dict(intent.get("slots") or {}) if intent else {}
    intent_ok = item.accepts(got)
    return {
        "text": item.text, "kind": item.kind, "voice": spoken.voice, "condition": spoken.condition,
        "pass": "first" if spoken.first_pass else "second",
        "expected": item.intent, "expected_slots": item.slots, "got": got, "got_slots": got_slots,
        "source": intent.get("source", "none") if intent else "none",
        "eos_to_intent_ms": round(1000 * (intent["audio_t"] - spoken.end_s), 1) if intent else None,
        "early": bool(intent and intent.get("early")),
        # the words the command was read from: an early act's pause decode, or the command reading of the final
        "acted_on": intent.get("text") if intent else None,
        "acted_confidence": intent.get("confidence") if intent else None,
        "stages": _stages(spoken, finals[0] if finals else None, intent),
        "heard": " | ".join(e["text"] for e in finals) or None,
        "server_heard": " | ".join(e["text"] for e in server_finals) or None, "replied": replied,
        "intent_ok": intent_ok, "slots_ok": intent_ok and (got is None or slots_match(item.slots, got_slots)),
    }


STAGES = ("eos_to_vad_end_ms", "eos_to_decode_asked_ms", "eos_to_decode_answered_ms", "answer_to_intent_ms",
          "asr_queued_ms", "asr_encode_ms", "asr_decode_ms", "asr_command_ms", "asr_decoder_runs", "asr_drafts_kept")
"""Where the time of a command went, per utterance (see `_stages`)."""


def _stages(spoken: Spoken, final: dict | None, intent: dict | None) -> dict:
    """The stages of the device's own final transcript of an utterance, from the end of speech in the audio: where
    the voice detector put the end of speech (`eos_to_vad_end_ms`, negative when before it), when the page asked
    for the decode (at the pause: the detector's lag and the listening worker's) and got its answer, from there to
    the intent (cache, grammar engine), and the recogniser's own times: waiting behind another decode
    (`asr_queued_ms`), the encoder, the free decode and the command reading's search, and the free decode's decoder
    runs and the tokens a partial drafted for it that it kept (whisper.js, "Drafts")."""
    if not final:
        return {}
    timings = final.get("timings") or {}
    asked, answered = timings.get("requested_t"), timings.get("answered_t")
    out = {"eos_to_vad_end_ms": 1000 * (final["end_t"] - spoken.end_s) if "end_t" in final else None,
           "eos_to_decode_asked_ms": 1000 * (asked - spoken.end_s) if asked is not None else None,
           "eos_to_decode_answered_ms": 1000 * (answered - spoken.end_s) if answered is not None else None,
           "answer_to_intent_ms": 1000 * (intent["audio_t"] - answered) if intent and answered is not None else None,
           "asr_queued_ms": timings.get("queued_ms"), "asr_encode_ms": timings.get("encode_ms"),
           "asr_decode_ms": timings.get("decode_ms"), "asr_command_ms": timings.get("command_ms"),
           "asr_decoder_runs": timings.get("decoder_runs"), "asr_drafts_kept": timings.get("drafts_kept")}
    return {k: round(v, 1) for k, v in out.items() if v is not None}


def stage_figures(outcomes: list[dict]) -> dict:
    """P50/P95 of every stage over the commands acted on rightly (see `_stages`), and how many acted early."""
    right = [o for o in outcomes if o["kind"] != "ood" and o["intent_ok"] and o["got"]]
    out = {stage: summary([o["stages"][stage] for o in right if stage in o.get("stages", {})]) for stage in STAGES}
    return out | {"early_share": rate(sum(o.get("early", False) for o in right), len(right))}


def figures(outcomes: list[dict]) -> dict:
    """Accuracy, false accepts, on-device share, sources and latency per source over some outcomes."""
    commands = [o for o in outcomes if o["kind"] == "command"]
    one_word = [o for o in outcomes if o["kind"] == "one-word"]
    ood = [o for o in outcomes if o["kind"] == "ood"]
    asked = commands + one_word
    latency: dict[str, list[float]] = {}
    for o in asked:
        if o["eos_to_intent_ms"] is not None and o["intent_ok"]:
            latency.setdefault(o["source"], []).append(o["eos_to_intent_ms"])
    false_accepts = sum(o["got"] is not None for o in ood)
    return {
        "commands": {"n": len(commands), "intent_accuracy": rate(sum(o["intent_ok"] for o in commands), len(commands)),
                     "intent_slots_accuracy": rate(sum(o["slots_ok"] for o in commands), len(commands))},
        "one_word": {"n": len(one_word), "intent_accuracy": rate(sum(o["intent_ok"] for o in one_word), len(one_word)),
                     "on_device": rate(sum(o["source"] in ON_DEVICE_SOURCES for o in one_word), len(one_word)),
                     "on_device_and_right": rate(sum(o["source"] in ON_DEVICE_SOURCES and o["intent_ok"]
                                                      for o in one_word), len(one_word))},
        "ood": {"n": len(ood), "false_accepts": false_accepts, "false_accept_rate": rate(false_accepts, len(ood))},
        "sources": {s: sum(o["source"] == s for o in asked) for s in SOURCES},
        "eos_to_intent_ms": {s: summary(latency[s]) for s in SOURCES if s in latency},
        "stages": stage_figures(asked),
    }


def set_report(outcomes_by_config: dict[str, list[dict]]) -> dict:
    """Per configuration: figures over the first hearing, per condition, per voice and condition, and over the
    second hearing (the learned cache) when there was one; then ratios of local latency against the baseline."""
    report: dict = {}
    for name, outcomes in outcomes_by_config.items():
        first = [o for o in outcomes if o["pass"] == "first"]
        second = [o for o in outcomes if o["pass"] == "second"]
        entry = figures(first)
        entry["by_condition"] = {c: figures([o for o in first if o["condition"] == c])
                                 for c in sorted({o["condition"] for o in first})}
        entry["by_voice"] = {f"{v}/{c}": _short(figures([o for o in first if (o["voice"], o["condition"]) == (v, c)]))
                             for v, c in sorted({(o["voice"], o["condition"]) for o in first})}
        if second:
            entry["second_hearing"] = figures(second)
        report[name] = entry
    names = list(outcomes_by_config)
    if len(names) == 2:
        ours, base = (report[n]["eos_to_intent_ms"].get("local", {}) for n in names)
        report["local_latency_ratio"] = {"of": f"{names[0]} / {names[1]}", "p50": ratio(ours, base),
                                         "p95": ratio(ours, base, "p95")}
    return report


def _short(f: dict) -> dict:
    return {"commands_intent": f["commands"]["intent_accuracy"],
            "commands_intent_slots": f["commands"]["intent_slots_accuracy"],
            "one_word_on_device": f["one_word"]["on_device"], "ood_false_accepts": f["ood"]["false_accepts"],
            "n": f["commands"]["n"] + f["one_word"]["n"] + f["ood"]["n"]}


def error_lines(outcomes: list[dict]) -> list[str]:
    """One plain line per wrong outcome: config, voice/condition, what was said, expected, got, source, heard."""
    lines = []
    for o in outcomes:
        if o["slots_ok"]:
            continue
        want = f"{o['expected']} {json.dumps(o['expected_slots'])}" if o["expected"] else "nothing (out of domain)"
        got = f"{o['got']} {json.dumps(o['got_slots'])}" if o["got"] else "nothing"
        lines.append(f"{o['config']}\t{o['voice']}/{o['condition']}\t{o['pass']}\t{o['text']!r}\texpected {want}\t"
                     f"got {got}\tsource {o['source']}\theard {o['heard']!r}"
                     + (f"\tacted on {o['acted_on']!r}{' (early)' if o['early'] else ''}" if o.get("acted_on") else "")
                     + (f"\tserver heard {o['server_heard']!r}" if o.get("server_heard") else "")
                     + ("\t(chat reply)" if o["replied"] else ""))
    return lines


def build_pages(items: list[SetItem], voices: list[str], noise_snr_db: float | None, folder: Path,
                second_hearing: bool = False) -> tuple[list[Page], dict[tuple[str, int], Spoken]]:
    """Render every item in every voice (and a noisy copy of each page when `noise_snr_db` is set) into page WAVs
    of PAGE_UTTERANCES utterances in a seeded order. Returns the pages and, per (page label, clip index), what
    was spoken there."""
    import random

    order = list(items)
    random.Random(SET_SEED).shuffle(order)
    chunks = [order[i:i + PAGE_UTTERANCES] for i in range(0, len(order), PAGE_UTTERANCES)]
    conditions = ["clean"] + (["noisy"] if noise_snr_db is not None else [])
    pages, spoken = [], {}
    for voice_name in voices:
        voice = VOICES[voice_name]
        for number, chunk in enumerate(chunks):
            heard = [(item, True) for item in chunk]
            if second_hearing:
                heard += [(item, False) for item in chunk if item.kind != "ood"]
            clips = [(item.text, render_voice(item.text, voice)) for item, _ in heard]
            clean, placed = test_audio.compose(clips, lead_s=ENGINE_START_S, gap_s=SET_GAP_S, tail_s=SET_TAIL_S,
                                               seed=number)
            for condition in conditions:
                label = f"{voice_name}/{condition}/{number}"
                samples = clean if condition == "clean" else test_audio.add_noise(
                    clean, noise_snr_db, NOISE_KIND, seed=SET_SEED + number)
                wav = test_audio.write_wav(folder / f"{label.replace('/', '-')}.wav", samples)
                pages.append(Page(label, wav, len(samples) / test_audio.RATE, placed))
                for index, ((item, first), where) in enumerate(zip(heard, placed)):
                    until = placed[index + 1].start_s if index + 1 < len(placed) else where.end_s + SET_GAP_S
                    spoken[(label, index)] = Spoken(item, voice_name, condition, first, where.start_s, where.end_s,
                                                    until)
    return pages, spoken


def missing_baseline_settings(configs: list[Config] = SET_CONFIGS) -> list[str]:
    """The baseline's page and server settings this checkout does not have yet (they are then left out)."""
    from dataclasses import fields

    from voxline.config import Settings

    missing = []
    known = {f.name for f in fields(Settings)}
    page_settings = (Settings().web_dir / "voxline" / "settings.js").read_text(encoding="utf-8")
    for config in configs:
        missing += [f"server:{k}" for k in config.server if k not in known]
        for part in filter(None, config.query.split("&")):
            name = part.split("=")[0].removeprefix("vx.")
            if f"{name}:" not in page_settings:
                missing.append(f"page:{name}")
    return missing


def _configs_available(missing: list[str], configs: list[Config] = SET_CONFIGS) -> list[Config]:
    out = []
    for c in configs:
        server = {k: v for k, v in c.server.items() if f"server:{k}" not in missing}
        query = "".join(f"&{p}" for p in filter(None, c.query.split("&"))
                        if f"page:{p.split('=')[0].removeprefix('vx.')}" not in missing)
        out.append(Config(c.name, query, server))
    return out


def run_set(path: Path, *, voices: list[str], noise_snr_db: float | None, rounds: int = 1, llm: str | None = None,
            limit: int | None = None, second_hearing: bool = False, progress=None,
            baseline_query: str | None = None, baseline_server: dict | None = None) -> tuple[dict, list[dict]]:
    """Play the set through the demo page in Chromium for each configuration; return the report and every outcome.
    `baseline_query`: page settings (`&vx.NAME=value...`) of the baseline instead of `SET_CONFIGS`' (then both
    configurations share one server), to measure one change beside the design before it."""
    import tempfile

    from voxline.config import Settings

    unknown = [v for v in voices if v not in VOICES]
    if unknown:
        raise ValueError(f"unknown voice(s) {', '.join(unknown)}; have {', '.join(VOICES)}")
    if rounds < 1:
        raise ValueError("--rounds must be at least 1")
    started = time.monotonic()
    items = limit_items(spoken_items(load_set(path)), limit)
    chosen = SET_CONFIGS if baseline_query is None and not baseline_server else [
        Config("voxline"), Config("baseline", query=baseline_query or "", server=dict(baseline_server or {}))]
    missing = missing_baseline_settings(chosen)
    configs = _configs_available(missing, chosen)
    outcomes: dict[str, list[dict]] = {c.name: [] for c in configs}
    problems: dict[str, dict[str, int]] = {c.name: {} for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        pages, spoken = build_pages(items, voices, noise_snr_db, Path(tmp), second_hearing)

        def on_page(config: str, page: Page, events: list[dict], console_errors: list[str]) -> None:
            ends = turn_ends(events)
            for index in range(len(page.placed)):
                outcomes[config].append(score(spoken[(page.label, index)], events, ends) | {"config": config})
            seen = problems[config]
            for line in console_errors + [f"voxline:error {e.get('code')}: {e.get('message')}"
                                          for e in events if e["name"] == "error"]:
                seen[line[:PROBLEM_CHARS]] = seen.get(line[:PROBLEM_CHARS], 0) + 1
            if progress is not None:
                progress(f"{config} {page.label}: {len(page.placed)} utterances heard")

        run_pages(pages, configs, rounds, llm=llm, on_page=on_page)
    report = {
        "benchmark": "intents --set", "set": str(path), "items": len(items),
        "kinds": {k: sum(i.kind == k for i in items) for k in KINDS},
        "voices": list(voices), "noise": (f"{NOISE_KIND} noise at {noise_snr_db:g} dB SNR (speech levelled to "
                                          f"{test_audio.SPEECH_LEVEL_DBFS:g} dBFS RMS), through the gaps too"
                                          if noise_snr_db is not None else None),
        "speech": "synthetic voices (espeak-ng, hibari): a proxy for real speakers",
        "rounds": rounds, "llm": llm or Settings().llm_model, "pages": len(pages),
        "configs": {c.name: {"page_query": c.query, "server": c.server} for c in configs},
        "baseline_settings_missing": missing,
        "page_problems": {name: dict(sorted(seen.items(), key=lambda kv: -kv[1])[:MAX_PROBLEMS_REPORTED])
                          for name, seen in problems.items()},
    } | set_report(outcomes)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report, [o for name in outcomes for o in outcomes[name]]


def server_settings(pairs: list[str]) -> dict[str, str]:
    """`--baseline-server NAME=VALUE` pairs, as `Settings` field values (coerced the way `VOXLINE_*` are)."""
    from dataclasses import fields

    from voxline.config import Settings

    names = {f.name for f in fields(Settings)}
    out = {}
    for pair in pairs:
        name, _, raw = pair.partition("=")
        if name not in names or not raw:
            raise SystemExit(f"--baseline-server {pair!r}: expected NAME=VALUE with NAME a server setting")
        out[name] = getattr(Settings.from_env({f"VOXLINE_{name.upper()}": raw}), name)
    return out


def main(args) -> int:
    if getattr(args, "set", None) is None:
        print(json.dumps(run(rounds=args.rounds), indent=1))
        return 0
    import sys

    voices = [v for part in args.voices for v in part.split(",") if v] if args.voices else list(DEFAULT_SET_VOICES)
    try:
        report, outcomes = run_set(args.set, voices=voices, noise_snr_db=args.noise_snr_db, rounds=args.rounds,
                                   llm=args.llm, limit=args.limit, second_hearing=args.second_hearing,
                                   progress=lambda line: print(line, file=sys.stderr, flush=True),
                                   baseline_query=args.baseline_query,
                                   baseline_server=server_settings(args.baseline_server or []))
    except (SetFormatError, ValueError, FileNotFoundError) as error:
        print(f"voxline bench intents: {error}", file=sys.stderr)
        return 2
    errors = error_lines(outcomes)
    print(json.dumps(report, indent=1))
    print(f"\n{len(errors)} wrong of {len(outcomes)} (config, voice/condition, hearing, said, expected, got, source, "
          "heard):", file=sys.stderr)
    print("\n".join(errors), file=sys.stderr)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report | {"outcomes": outcomes}, indent=1) + "\n")
        Path(args.json_out).with_suffix(".errors.txt").write_text("\n".join(errors) + "\n")
    return 0
