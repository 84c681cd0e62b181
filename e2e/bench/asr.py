"""`voxline bench asr`: on-device speech recognition in headless Chromium, utterance-sized window vs full 30 s.

Each configuration hears the same WAV (commands with known end-of-speech positions) through Chromium's fake
microphone; latencies are read on the capture clock (`audio_t`), so they are exact end-of-speech → event times.
"""

from __future__ import annotations

import json
import time

from voxline.bench.stats import ratio, summary
from voxline.bench.wer import wer
from e2e.bench.spoken import match, render, run_configs

COMMANDS = [
    "pause the music", "turn the volume down", "skip this song", "set a timer for ten minutes", "what time is it",
    "switch off the kitchen lights", "play some jazz", "volume to thirty percent", "turn on the lights",
    "go back to the previous track", "stop", "mute",
]
CONFIGS = {"utterance-window": "", "full-window-baseline": "&vx.fullWindow=1"}


def _load_times(url: str, rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    from e2e.harness import launch_chromium, wait_for_js

    cold, warm = [], []
    with sync_playwright() as pw:
        for _ in range(rounds):
            browser = launch_chromium(pw.chromium)
            try:
                page = browser.new_context().new_page()
                page.add_init_script("document.addEventListener('voxline:ready', (e) => { window.__ready = e.detail; });")
                for into in (cold, warm):  # the first load fills Cache Storage, the reload reads it
                    page.goto(url + "/")
                    wait_for_js(page, "window.__ready !== undefined", 120)
                    into.append(page.evaluate("window.__ready.load_ms"))
            finally:
                browser.close()
    return {"cold_load_ms": summary(cold), "warm_load_ms": summary(warm)}


def run(rounds: int = 2, voice: str = "hibari", llm: str = "smollm2-135m-instruct-ct2") -> dict:
    from voxline.config import Settings
    from e2e.harness import ServerThread

    started = time.monotonic()
    with ServerThread(Settings.from_env(llm_model=llm)) as server:
        loads = _load_times(server.url, rounds)
    clips = render(COMMANDS, voice)
    placed, runs = run_configs(clips, CONFIGS, rounds, llm=llm)
    report = {
        "benchmark": "asr", "voice": f"{voice} (synthetic speech: a proxy for real voices)",
        "utterances_per_config": len(placed) * rounds,
        "max_utterance_s": round(max(p.end_s - p.start_s for p in placed), 2), **loads,
    }
    for name, pages in runs.items():
        final_ms, end_ms, decode_ms, rtf, refs, hyps, reasons = [], [], [], [], [], [], []
        for events in pages:
            for truth in placed:
                final = match(events, "transcript", truth, where=lambda e: e["final"])
                end = match(events, "speech-end", truth)
                refs.append(truth.text)
                hyps.append(final["text"] if final else "")
                if final:
                    final_ms.append(1000 * (final["audio_t"] - truth.end_s))
                    decode_ms.append(final["timings"]["total_ms"])
                    rtf.append(final["timings"]["total_ms"] / 1000 / (truth.end_s - truth.start_s))
                if end:
                    end_ms.append(1000 * (end["audio_t"] - truth.end_s))
                    reasons.append(end["reason"])
        report[name] = {
            "eos_to_final_transcript_ms": summary(final_ms), "eos_to_turn_end_ms": summary(end_ms),
            "decode_ms": summary(decode_ms), "rtf": summary(rtf), "wer": round(wer(refs, hyps), 4),
            "turn_end_reasons": {r: reasons.count(r) for r in sorted(set(reasons))}, "missed": hyps.count(""),
        }
    ours, base = report["utterance-window"], report["full-window-baseline"]
    report["ratio_vs_baseline"] = {k: ratio(ours[k], base[k]) for k in ("eos_to_final_transcript_ms", "decode_ms")}
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def main(args) -> int:
    print(json.dumps(run(rounds=args.rounds, voice=args.voice), indent=1))
    return 0
