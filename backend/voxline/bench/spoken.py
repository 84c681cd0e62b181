"""Play a set of spoken clips through the demo page once per configuration, alternating configurations.

Shared by the browser benchmarks: each configuration is a query string of `vx.*` settings; the same WAV is heard by
a fresh browser for each, and the configurations alternate round by round (A B A B), since shared machines drift.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

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

    from voxline.bench.browser import ServerThread, VoxlinePage
    from voxline.config import Settings

    audio, placed = test_audio.compose(clips, lead_s=lead_s, gap_s=gap_s)
    duration_s = len(audio) / test_audio.RATE
    runs: dict[str, list[list[dict]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp, ServerThread(Settings.from_env(llm_model=llm)) as server, \
            sync_playwright() as pw:
        wav = test_audio.write_wav(Path(tmp) / "clips.wav", audio)
        for _ in range(rounds):
            for name, query in configs.items():
                page = VoxlinePage(pw.chromium, server.url, wav, query)
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
