"""`voxline bench asr`: on-device speech recognition in headless Chromium, utterance-sized window vs full 30 s.

Each configuration hears the same WAV (commands laid out with known end-of-speech positions) through Chromium's
fake microphone; latencies are read on the capture clock (`audio_t`), so they are exact end-of-speech → event
times. The two configurations alternate in one run (A B A B ...), because absolute times drift on shared machines.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from voxline.bench import audio as test_audio
from voxline.bench.wer import wer

COMMANDS = [
    "pause the music", "turn the volume down", "skip this song", "set a timer for ten minutes", "what time is it",
    "switch off the kitchen lights", "play some jazz", "volume to thirty percent", "turn on the lights",
    "go back to the previous track", "stop", "mute",
]
CONFIGS = {"utterance-window": "", "full-window-baseline": "&vx.fullWindow=1"}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95), "n": len(values)}


@dataclass
class Samples:
    final_ms: list[float] = field(default_factory=list)
    turn_end_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)
    rtf: list[float] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    hyps: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def _collect(events: list[dict], placed: list[test_audio.Placed], into: Samples) -> None:
    finals = [e for e in events if e["name"] == "transcript" and e["final"]]
    ends = [e for e in events if e["name"] == "speech-end"]
    for truth in placed:
        final = next((f for f in finals if truth.start_s - 0.5 < f["end_t"] < truth.end_s + 1.0), None)
        end = next((e for e in ends if truth.start_s - 0.5 < e["end_t"] < truth.end_s + 1.0), None)
        into.refs.append(truth.text)
        into.hyps.append(final["text"] if final else "")
        if final:
            into.final_ms.append(1000 * (final["audio_t"] - truth.end_s))
            into.decode_ms.append(final["timings"]["total_ms"])
            into.rtf.append(final["timings"]["total_ms"] / 1000 / (truth.end_s - truth.start_s))
        if end:
            into.turn_end_ms.append(1000 * (end["audio_t"] - truth.end_s))
            into.reasons.append(end["reason"])


def _load_times(browser_type, url: str, rounds: int) -> dict:
    from voxline.bench.browser import launch_chromium

    cold, warm = [], []
    for _ in range(rounds):
        browser = launch_chromium(browser_type)
        try:
            page = browser.new_context().new_page()
            page.add_init_script("document.addEventListener('voxline:ready', (e) => { window.__ready = e.detail; });")
            for into in (cold, warm):  # first load fills Cache Storage, the reload reads it
                page.goto(url + "/")
                page.wait_for_function("window.__ready !== undefined", timeout=120_000)
                into.append(page.evaluate("window.__ready.load_ms"))
        finally:
            browser.close()
    return {"cold_load_ms": summary(cold), "warm_load_ms": summary(warm)}


def run(rounds: int = 2, voice: str = "hibari", llm: str = "smollm2-135m-instruct-ct2") -> dict:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:  # the `test` extra
        raise SystemExit("voxline bench asr needs playwright: run `bash scripts/setup.sh`") from error
    from voxline.bench.browser import ServerThread, VoxlinePage
    from voxline.config import Settings

    render = test_audio.hibari if voice == "hibari" else test_audio.espeak
    clips = [(text, render(text)) for text in COMMANDS]
    audio, placed = test_audio.compose(clips, gap_s=3.0)
    duration_s = len(audio) / test_audio.RATE
    results = {name: Samples() for name in CONFIGS}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ServerThread(Settings.from_env(llm_model=llm)) as server, \
            sync_playwright() as pw:
        wav = test_audio.write_wav(Path(tmp) / "commands.wav", audio)
        loads = _load_times(pw.chromium, server.url, rounds)
        for _ in range(rounds):
            for name, query in CONFIGS.items():
                page = VoxlinePage(pw.chromium, server.url, wav, query)
                try:
                    page.wait_until_heard(duration_s)
                    _collect(page.events(), placed, results[name])
                finally:
                    page.close()
    report = {
        "benchmark": "asr",
        "voice": voice + (" (synthetic speech, a proxy for real voices)"),
        "utterances": len(placed) * rounds,
        "max_utterance_s": round(max(p.end_s - p.start_s for p in placed), 2),
        "rounds": rounds,
        **loads,
        "wall_s": round(time.monotonic() - started, 1),
    }
    for name, s in results.items():
        report[name] = {
            "eos_to_final_transcript_ms": summary(s.final_ms),
            "eos_to_turn_end_ms": summary(s.turn_end_ms),
            "decode_ms": summary(s.decode_ms),
            "rtf": summary(s.rtf),
            "wer": round(wer(s.refs, s.hyps), 4),
            "turn_end_reasons": {r: s.reasons.count(r) for r in sorted(set(s.reasons))},
            "missed": s.hyps.count(""),
        }
    base, ours = report["full-window-baseline"], report["utterance-window"]
    for key in ("eos_to_final_transcript_ms", "decode_ms"):
        if base[key]["p50"] and ours[key]["p50"]:
            report[f"ratio_{key}_p50"] = round(ours[key]["p50"] / base[key]["p50"], 3)
    return report


def main(args) -> int:
    print(json.dumps(run(rounds=args.rounds, voice=args.voice), indent=1))
    return 0
