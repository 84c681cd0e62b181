"""`voxline bench intents`: zero-round-trip intent latency, end of speech → `voxline:intent`, per source.

Each configuration hears the commands twice in one page: the first pass resolves them with the grammar engine
(`local`), the second from the IndexedDB cache (`cache`). The baseline configuration ends every turn after 800 ms
of silence (pipecat's default `stop_secs`), without smart-turn and without early dispatch. Also measured: match
time of the engine in CPython and in Pyodide, and the cache lookup.
"""

from __future__ import annotations

import json
import time
import timeit

from voxline.bench.spoken import match, render, run_configs
from voxline.bench.stats import ratio, summary

COMMANDS = [
    "pause the music", "turn the volume down", "skip this song", "set a timer for ten minutes", "what time is it",
    "switch off the kitchen lights", "play some jazz", "volume to thirty percent", "turn on the lights",
    "resume the music", "next track", "turn it up",
]
CONFIGS = {
    "voxline": "",
    "fixed-800ms-baseline": "&vx.hangoverSecs=0.8&vx.turnCompleteProb=2&vx.earlyIntentMinConfidence=2",
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

    from voxline.bench.browser import ServerThread, launch_chromium
    from voxline.config import Settings

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


def main(args) -> int:
    print(json.dumps(run(rounds=args.rounds), indent=1))
    return 0
