"""Play a set of spoken clips through the demo page once per configuration, alternating configurations.

Shared by the browser benchmarks: each configuration is a query string of `vx.*` settings; the same WAV is heard by
a fresh browser for each, and the configurations alternate round by round (A B A B), since shared machines drift.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from voxline.bench import audio as test_audio


def render(texts: list[str], voice: str = "hibari") -> list[tuple[str, object]]:
    make = test_audio.hibari if voice == "hibari" else test_audio.espeak
    return [(text, make(text, seed=i) if voice == "hibari" else make(text)) for i, text in enumerate(texts)]


def run_configs(
    clips: list, configs: dict[str, str], rounds: int, *, llm: str, lead_s: float = 1.0, gap_s: float = 3.0,
    before_listen: Callable | None = None,
) -> tuple[list[test_audio.Placed], dict[str, list[list[dict]]]]:
    """Return where each clip sits in the WAV and, per configuration, the events of every round."""
    from playwright.sync_api import sync_playwright

    from voxline.config import Settings
    from e2e.harness import ServerThread, VoxlinePage

    audio, placed = test_audio.compose(clips, lead_s=lead_s, gap_s=gap_s)
    duration_s = len(audio) / test_audio.RATE
    runs: dict[str, list[list[dict]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp, ServerThread(Settings.from_env(llm_model=llm)) as server, \
            sync_playwright() as pw:
        wav = test_audio.write_wav(Path(tmp) / "clips.wav", audio)
        for _ in range(rounds):
            for name, query in configs.items():
                page = VoxlinePage(pw.chromium, server.url, wav, query, listen="at-once")  # at `ready`, as the README's runs
                try:
                    page.wait_until_heard(duration_s)
                    runs[name].append(page.events())
                finally:
                    page.close()
    return placed, runs


def match(events: list[dict], name: str, truth: test_audio.Placed, *, after: float = 0.5, within: float = 3.0,
          where: Callable[[dict], bool] = lambda e: True) -> dict | None:
    """The first `name` event heard between `after` s before the clip's end and `within` s after it."""
    for event in events:
        if event["name"] == name and where(event) and truth.end_s - after < event["audio_t"] < truth.end_s + within:
            return event
    return None


# --- Evaluation sets (voxline bench intents --set): several synthetic voices, noisy copies, cached renders. ---

RENDER_VERSION = 1
"""Part of every cached clip's key: bump it when rendering changes, so old clips are not reused."""
RENDER_CACHE_SUBDIR = "bench-audio"


@dataclass(frozen=True)
class Voice:
    """A synthetic speaker: espeak-ng (a voice name such as `en-gb-x-rp` or `en-us+f3`, words per minute) or
    hibari's "heart" voice (a sampling seed, a speed factor)."""

    name: str
    engine: str
    espeak_voice: str = ""
    espeak_wpm: int = 165
    hibari_seed: int = 0
    hibari_speed: float = 1.0


VOICES = {v.name: v for v in [
    Voice("espeak-us", "espeak", espeak_voice="en-us", espeak_wpm=165),
    Voice("espeak-gb", "espeak", espeak_voice="en-gb", espeak_wpm=165),
    Voice("espeak-us-f3-slow", "espeak", espeak_voice="en-us+f3", espeak_wpm=140),
    Voice("espeak-rp-fast", "espeak", espeak_voice="en-gb-x-rp", espeak_wpm=190),
    Voice("hibari-1", "hibari", hibari_seed=1, hibari_speed=1.0),
    Voice("hibari-2-slow", "hibari", hibari_seed=2, hibari_speed=0.9),
    Voice("hibari-3-fast", "hibari", hibari_seed=3, hibari_speed=1.15),
]}


def render_cache_dir() -> Path:
    """`$VOXLINE_CACHE/bench-audio` (the model cache's root), else a folder in the system's temp dir."""
    from voxline import paths

    root = paths.cache_dir() if os.environ.get(paths.CACHE_ENV) or paths.cache_dir().is_dir() else \
        Path(tempfile.gettempdir()) / "voxline"
    return root / RENDER_CACHE_SUBDIR


def render_voice(text: str, voice: Voice, cache: Path | None = None) -> np.ndarray:
    """`text` spoken by `voice` at RATE, trimmed and levelled to SPEECH_LEVEL_DBFS; cached as int16 on disk."""
    key = hashlib.sha256(json.dumps([RENDER_VERSION, text, asdict(voice) | {"name": ""}]).encode()).hexdigest()[:24]
    path = (cache or render_cache_dir()) / f"{key}.npy"
    if path.exists():
        return np.load(path).astype(np.float32) / 32767
    if voice.engine == "espeak":
        audio = test_audio.espeak(text, voice.espeak_voice, voice.espeak_wpm)
    elif voice.engine == "hibari":
        audio = test_audio.hibari(text, seed=voice.hibari_seed, speed=voice.hibari_speed)
    else:
        raise ValueError(f"voice {voice.name!r}: unknown engine {voice.engine!r}")
    if audio.size == 0:
        raise ValueError(f"voice {voice.name!r} rendered nothing audible for {text!r}")
    audio = test_audio.level(audio)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, (np.clip(audio, -1, 1) * 32767).astype(np.int16))
    tmp.replace(path)
    return audio


@dataclass(frozen=True)
class Config:
    """One configuration of a side-by-side run: page settings (a `&vx.NAME=value` query) and server settings."""

    name: str
    query: str = ""
    server: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Page:
    """One WAV heard by one fresh page: its clips laid out with their positions."""

    label: str
    wav: Path
    duration_s: float
    placed: list


def run_pages(
    pages: list[Page], configs: list[Config], rounds: int, *, llm: str | None,
    on_page: Callable[[str, Page, list[dict], list[str]], None] | None = None,
    before_page: Callable[[str, str, Page], None] | None = None,
) -> dict[str, list[tuple[Page, list[dict]]]]:
    """Every page heard by a fresh browser once per configuration and round, configurations alternating page by
    page (A B, then B A), each on its own server (a configuration may change server settings). Returns, per
    configuration, (page, events) in the order heard; `on_page` is called after each with its events and the
    page's console errors (a page whose engine failed to load answers nothing locally: the reader must know);
    `before_page` before each, with the configuration's server URL (to read its /metrics around the page)."""
    from contextlib import ExitStack

    from playwright.sync_api import sync_playwright

    from voxline.config import Settings
    from e2e.harness import ServerThread, VoxlinePage

    heard: dict[str, list[tuple[Page, list[dict]]]] = {c.name: [] for c in configs}
    with ExitStack() as stack:
        servers = {c.name: stack.enter_context(ServerThread(Settings.from_env(llm_model=llm, **c.server)))
                   for c in configs}
        pw = stack.enter_context(sync_playwright())
        turn = 0
        for _ in range(rounds):
            for page in pages:
                order = configs if turn % 2 == 0 else configs[::-1]
                turn += 1
                for config in order:
                    if before_page is not None:
                        before_page(config.name, servers[config.name].url, page)
                    browser_page = VoxlinePage(pw.chromium, servers[config.name].url, page.wav, config.query,
                                               listen="at-once")
                    try:
                        browser_page.wait_until_heard(page.duration_s)
                        events = browser_page.events()
                        problems = [line for line in browser_page.console if line.startswith(("error", "pageerror"))]
                    finally:
                        browser_page.close()
                    heard[config.name].append((page, events))
                    if on_page is not None:
                        on_page(config.name, page, events, problems)
    return heard
