"""False cut-offs (`voxline bench cutoffs`): how often the page ends a turn, or acts on a command, inside an
utterance that has a short pause in it; today's page settings beside a baseline, in one run, on the demo page.

Two kinds of speech, both with the pauses people make in the middle of a sentence:

- **synthetic**: each line of `sets/pauses-en.txt` spoken phrase by phrase by synthetic voices, the phrases joined
  by silence drawn from PAUSES_S (150-500 ms);
- **recorded**: single-sentence prompts of Asterisk's US English core sounds (one human speaker; 8 kHz telephone
  audio, CC BY-SA 3.0), from Debian's packages pinned by sha256 (RECORDED_PACKAGES), unpacked into the cache and
  never into git. Their pauses are the speaker's own ("Please enter a new extension, followed by pound.").

An utterance is **cut** when a `voxline:speech-end` says its speech ended (`end_t`) more than CUT_MARGIN_S before the
utterance's end (the turn was declared over inside it), or when an intent was acted on before it ended. Beside it,
the price of waiting: the utterance's end → the turn declared over (`speech-end`'s `audio_t`, the capture clock).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxline.bench import SETS
from voxline.bench import audio as test_audio
from voxline.bench.stats import rate, ratio, summary
from e2e.bench.intents import limit_items
from e2e.bench.spoken import VOICES, Config, Page, render_cache_dir, render_voice, run_pages

DEFAULT_SET = SETS / "pauses-en.txt"
DEFAULT_VOICES = ("espeak-gb", "hibari-1")
PAUSES_S = (0.15, 0.25, 0.35, 0.5)
"""Silences between the phrases of a synthetic utterance, one drawn per pause (seeded)."""
CUT_MARGIN_S = 0.3
"""A turn whose speech ended this much before the utterance's end was cut inside it (the last word, at least, was
still to come); smaller differences are where the detector and the energy trim place the same end."""
PAGE_UTTERANCES = 24
GAP_S = 2.75
"""Silence after each utterance: the turn ends and the server answers before the next one starts."""
SEED = 17
RECORDED_COUNT = 48


@dataclass(frozen=True)
class DebianPackage:
    name: str
    version: str
    sha256: str


RECORDED_PACKAGES = (
    DebianPackage("asterisk-core-sounds-en-wav", "1.6.1-1",
                  "2be3ea287d83299d143815fa804f11179a75b7affd4a758b98b55f5afc18a35d"),
    # the transcripts (core-sounds-en.txt.gz)
    DebianPackage("asterisk-core-sounds-en", "1.6.1-1",
                  "973e797d28e37fa6ca3c0a9d6fa717e77cf1268ae916bf09fd3503113cdffa50"),
)
RECORDED_SOUNDS = "usr/share/asterisk/sounds/en_US_f_Allison"
RECORDED_TRANSCRIPTS = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"


@dataclass(frozen=True)
class Utterance:
    text: str
    kind: str
    """`synthetic` or `recorded`."""
    voice: str
    audio: np.ndarray
    pauses_s: tuple[float, ...] = ()
    """The silences placed between its phrases (synthetic only)."""


def load_pause_set(path: Path) -> list[list[str]]:
    """Each line's phrases (split at `|`); blank lines and `#` comments are skipped."""
    lines = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        phrases = [p.strip() for p in line.split("|")]
        if len(phrases) < 2 or not all(phrases):
            raise ValueError(f"{path}:{number}: expected phrases separated by '|', got {raw!r}")
        lines.append(phrases)
    return lines


def synthetic_utterances(lines: list[list[str]], voices: list[str]) -> list[Utterance]:
    out = []
    for v, voice_name in enumerate(voices):
        voice = VOICES[voice_name]
        for n, phrases in enumerate(lines):
            rng = random.Random(SEED * 1000 + v * 100 + n)
            pauses = tuple(rng.choice(PAUSES_S) for _ in phrases[1:])
            parts = [render_voice(phrases[0], voice)]
            for pause, phrase in zip(pauses, phrases[1:]):
                parts += [np.zeros(int(pause * test_audio.RATE), np.float32), render_voice(phrase, voice)]
            out.append(Utterance(" ".join(phrases), "synthetic", voice_name, np.concatenate(parts), pauses))
    return out


def recorded_folder(cache: Path | None = None) -> Path:
    """The unpacked recorded prompts, downloaded with `apt-get download` and checked by sha256 the first time."""
    folder = (cache or render_cache_dir()) / ("asterisk-core-sounds-" + RECORDED_PACKAGES[0].version)
    if (folder / ".verified").exists():
        return folder
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = Path(tmp) / "unpacked"
        for package in RECORDED_PACKAGES:
            spec = f"{package.name}={package.version}"
            done = subprocess.run(["apt-get", "download", spec], cwd=tmp, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"could not download Debian package {spec} for the recorded speech "
                                   f"({done.stderr.strip()[-300:]}); run `apt-get update` and try again")
            deb = next(Path(tmp).glob(f"{package.name}_*.deb"))
            digest = hashlib.sha256(deb.read_bytes()).hexdigest()
            if digest != package.sha256:
                raise RuntimeError(f"{deb.name}: sha256 {digest}, expected {package.sha256}; refusing it")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staged = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        shutil.move(str(unpacked / RECORDED_SOUNDS), staged / "sounds")
        shutil.move(str(unpacked / RECORDED_TRANSCRIPTS), staged / "transcripts.txt.gz")
        (staged / ".verified").write_text(json.dumps([p.__dict__ for p in RECORDED_PACKAGES]) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staged.rename(folder)
    return folder


def single_sentences(transcripts: str) -> list[tuple[str, str]]:
    """(sound name, text) of every prompt that is one sentence of 4-16 words with no sound effect or note."""
    out = []
    for line in transcripts.splitlines():
        if line.startswith(";") or ":" not in line:
            continue
        name, text = (part.strip() for part in line.split(":", 1))
        if "/" in name or re.search(r"[\[\]()\"]", text):
            continue
        body = text.strip(".").strip()
        if re.search(r"[.?!]\s", body) or not 4 <= len(body.split()) <= 16:
            continue
        out.append((name, body))
    return sorted(out)


def upsample(samples: np.ndarray, rate: int) -> np.ndarray:
    """`samples` at `rate` to RATE (a whole multiple) through a windowed-sinc low-pass at the old Nyquist."""
    factor = test_audio.RATE // rate
    if factor * rate != test_audio.RATE:
        raise ValueError(f"{rate} Hz does not divide {test_audio.RATE} Hz")
    stuffed = np.zeros(len(samples) * factor, np.float32)
    stuffed[::factor] = samples
    n = np.arange(-16 * factor, 16 * factor + 1)
    taps = np.sinc(n / factor) * np.hanning(len(n))
    return np.convolve(stuffed, taps.astype(np.float32), mode="same")


def recorded_utterances(count: int = RECORDED_COUNT, cache: Path | None = None) -> list[Utterance]:
    """`count` single-sentence prompts spread evenly over the sorted list (every one when count is larger)."""
    import wave

    folder = recorded_folder(cache)
    prompts = [(name, text) for name, text in single_sentences(
        gzip.decompress((folder / "transcripts.txt.gz").read_bytes()).decode("utf-8", "replace"))
        if (folder / "sounds" / f"{name}.wav").exists()]
    prompts = limit_items(prompts, count)
    out = []
    for name, text in prompts:
        with wave.open(str(folder / "sounds" / f"{name}.wav")) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
            rate = w.getframerate()
        out.append(Utterance(text, "recorded", "asterisk-allison",
                             test_audio.level(test_audio.trim(upsample(pcm, rate)))))
    return out


def build_pages(utterances: list[Utterance], folder: Path) -> tuple[list[Page], dict[tuple[str, int], dict]]:
    order = list(utterances)
    random.Random(SEED).shuffle(order)
    pages, where = [], {}
    for number in range(0, len(order), PAGE_UTTERANCES):
        chunk = order[number:number + PAGE_UTTERANCES]
        samples, placed = test_audio.compose([(u.text, u.audio) for u in chunk], lead_s=3.0, gap_s=GAP_S,
                                             tail_s=3.0, seed=number)
        label = f"page-{number // PAGE_UTTERANCES}"
        wav = test_audio.write_wav(folder / f"{label}.wav", samples)
        pages.append(Page(label, wav, len(samples) / test_audio.RATE, placed))
        for index, (utterance, at) in enumerate(zip(chunk, placed)):
            until = placed[index + 1].start_s if index + 1 < len(placed) else at.end_s + GAP_S
            where[(label, index)] = {"utterance": utterance, "start_s": at.start_s, "end_s": at.end_s,
                                     "until_s": until}
    return pages, where


def score(utterance: Utterance, start_s: float, end_s: float, until_s: float, events: list[dict]) -> dict:
    """One utterance's outcome from the page's events heard between its start and the next utterance's."""
    own = [e for e in events if start_s <= e["audio_t"] < until_s]
    ends = [e for e in own if e["name"] == "speech-end" and "end_t" in e]
    inside = [e for e in ends if e["end_t"] < end_s - CUT_MARGIN_S]
    over = next((e for e in reversed(ends) if e["end_t"] >= end_s - CUT_MARGIN_S), None)
    acted_inside = [e for e in own if e["name"] == "intent" and e["audio_t"] < end_s]
    return {
        "text": utterance.text, "kind": utterance.kind, "voice": utterance.voice,
        "longest_pause_s": max(utterance.pauses_s, default=None),
        "cut": bool(inside or acted_inside), "turn_ended_inside": bool(inside), "acted_inside": bool(acted_inside),
        "cuts": [{"after_s": round(e["end_t"] - start_s, 2), "reason": e.get("reason"),
                  "turn_prob": e.get("turn_prob")} for e in inside],
        "acted_on": [{"text": e.get("text"), "intent": e.get("intent"), "source": e.get("source")}
                     for e in acted_inside],
        "turns": sum(e["name"] == "speech-start" for e in own),
        "eos_to_turn_over_ms": round(1000 * (over["audio_t"] - end_s), 1) if over else None,
        "turn_over_reason": over.get("reason") if over else None,
        # smart-turn's last answer before the turn was over, and how long its run took (diagnostics)
        "turn_prob": over.get("turn_prob") if over else None,
        "turn_check_ms": over.get("turn_check_ms") if over else None,
        "heard": " | ".join(e["text"] for e in own if e["name"] == "transcript" and e.get("final")
                            and e.get("source") != "server") or None,
    }


def _rate(outcomes: list[dict], key: str) -> float | None:
    return rate(sum(o[key] for o in outcomes), len(outcomes))


def figures(outcomes: list[dict]) -> dict:
    latency = [o["eos_to_turn_over_ms"] for o in outcomes if o["eos_to_turn_over_ms"] is not None]
    reasons: dict[str, int] = {}
    for o in outcomes:
        reasons[str(o["turn_over_reason"])] = reasons.get(str(o["turn_over_reason"]), 0) + 1
    by_pause = {f"{int(p * 1000)}ms": [o for o in outcomes if o["longest_pause_s"] == p] for p in PAUSES_S}
    return {
        "utterances": len(outcomes), "cut_rate": _rate(outcomes, "cut"),
        "turn_ended_inside_rate": _rate(outcomes, "turn_ended_inside"),
        "acted_inside_rate": _rate(outcomes, "acted_inside"),
        "cut_rate_by_kind": {k: _rate([o for o in outcomes if o["kind"] == k], "cut")
                             for k in ("synthetic", "recorded")},
        "cut_rate_by_longest_pause": {k: _rate(v, "cut") for k, v in by_pause.items() if v},
        "eos_to_turn_over_ms": summary(latency), "turn_over_reasons": reasons,
    }


def report(outcomes_by_config: dict[str, list[dict]]) -> dict:
    out = {"configs": {name: figures(o) for name, o in outcomes_by_config.items()}}
    if "voxline" in out["configs"] and "baseline" in out["configs"]:
        ours, base = (out["configs"][n]["eos_to_turn_over_ms"] for n in ("voxline", "baseline"))
        out["ratios_vs_baseline"] = {"eos_to_turn_over_p50": ratio(ours, base, "p50"),
                                     "eos_to_turn_over_p95": ratio(ours, base, "p95")}
    return out


def cut_lines(outcomes: list[dict]) -> list[str]:
    lines = []
    for o in outcomes:
        if not o["cut"]:
            continue
        where = "; ".join(f"ended {c['after_s']} s in ({c['reason']}, P(complete) {c['turn_prob']})"
                          for c in o["cuts"])
        acted = "; ".join(f"acted on {a['text']!r} ({a['source']})" for a in o["acted_on"])
        lines.append(f"{o['config']}\t{o['kind']}/{o['voice']}\t{o['text']!r}\t{where or acted}"
                     + (f"\t{acted}" if where and acted else "") + f"\theard {o['heard']!r}")
    return lines


def run(path: Path | None, *, voices: list[str], recorded: int, baseline_query: str | None, limit: int | None,
        llm: str | None, progress=None) -> tuple[dict, list[dict]]:
    unknown = [v for v in voices if v not in VOICES]
    if unknown:
        raise ValueError(f"unknown voice(s) {', '.join(unknown)}; have {', '.join(VOICES)}")
    started = time.monotonic()
    path = path or DEFAULT_SET
    lines = load_pause_set(path)
    if limit is not None:
        lines = limit_items(lines, limit)
        recorded = min(recorded, limit)
    utterances = synthetic_utterances(lines, voices) + (recorded_utterances(recorded) if recorded else [])
    configs = [Config("voxline")] + ([Config("baseline", query=baseline_query)] if baseline_query is not None else [])
    outcomes: dict[str, list[dict]] = {c.name: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        pages, where = build_pages(utterances, Path(tmp))

        def on_page(config: str, page: Page, events: list[dict], problems: list[str]) -> None:
            for index in range(len(page.placed)):
                w = where[(page.label, index)]
                outcomes[config].append(score(w["utterance"], w["start_s"], w["end_s"], w["until_s"], events)
                                        | {"config": config})
            if progress is not None:
                cuts = sum(o["cut"] for o in outcomes[config][-len(page.placed):])
                progress(f"{config} {page.label}: {len(page.placed)} utterances, {cuts} cut"
                         + (f"; page problems: {problems[:3]}" if problems else ""))

        run_pages(pages, configs, 1, llm=llm, on_page=on_page)
    out = {
        "benchmark": "cutoffs", "set": str(path), "voices": voices, "recorded": recorded,
        "speech": "synthetic voices with placed pauses, and recorded prompts of one human speaker (8 kHz telephone "
                  "audio, Asterisk core sounds)",
        "cut": f"a turn ended more than {CUT_MARGIN_S} s before the utterance's end, or an intent acted on before it",
        "configs_query": {c.name: c.query for c in configs},
    } | report(outcomes)
    out["wall_s"] = round(time.monotonic() - started, 1)
    return out, [o for name in outcomes for o in outcomes[name]]


def main(args) -> int:
    voices = [v for part in args.voices for v in part.split(",") if v] if args.voices else list(DEFAULT_VOICES)
    try:
        result, outcomes = run(args.set, voices=voices, recorded=args.recorded, baseline_query=args.baseline_query,
                               limit=args.limit, llm=args.llm,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (ValueError, RuntimeError, FileNotFoundError) as error:
        print(f"voxline bench cutoffs: {error}", file=sys.stderr)
        return 2
    lines = cut_lines(outcomes)
    print(json.dumps(result, indent=1))
    print(f"\n{len(lines)} cut of {len(outcomes)} (config, kind/voice, said, where):", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result | {"outcomes": outcomes}, indent=1) + "\n")
    return 0
