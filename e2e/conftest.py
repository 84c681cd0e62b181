"""End-to-end fixtures: a real Voxline server on a loopback port, driven by Debian's Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxline.config import Settings
from e2e.harness import CHROMIUM, CHROMIUM_FLAGS, ServerThread, VoxlinePage

E2E_LLM = "smollm2-135m-instruct-ct2"  # the small model keeps the suite fast; benchmarks use the default


@pytest.fixture(scope="session")
def voxline_server():
    with ServerThread(Settings.from_env(llm_model=E2E_LLM)) as server:
        yield server


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_FLAGS}


@pytest.fixture
def browser_context_args(browser_context_args):
    return {**browser_context_args, "permissions": ["microphone"]}


@pytest.fixture
def open_voxline(browser_type, voxline_server):
    """Open the demo page with a given fake-microphone WAV; every page is closed at the end of the test."""
    opened: list[VoxlinePage] = []

    def _open(wav: Path | None, query: str = "", before_goto=None, listen: str = "when-up") -> VoxlinePage:
        opened.append(VoxlinePage(browser_type, voxline_server.url, wav, query, before_goto, listen))
        return opened[-1]

    yield _open
    for page in opened:
        page.close()


def settled_frames(payloads: list) -> list[dict]:
    """A page's WebSocket text frames as the server ends up taking them. A speculative `turn.start` counts where
    its `turn.confirm` was sent (when the turn became the user's), as a plain `turn.start` with `"confirmed":
    true`; a cancelled one becomes `{"type": "cancelled", ...its turn.start}`; one still open stays as sent."""
    messages = [json.loads(p) for p in payloads if isinstance(p, str)]
    open_ = {m["turn_id"]: m for m in messages if m["type"] == "turn.start" and m.get("speculative")}
    settled, out = set(), []
    for m in messages:
        if m["type"] == "turn.start" and m.get("speculative"):
            continue
        if m["type"] in ("turn.confirm", "turn.cancel") and m["turn_id"] in open_:
            start = {k: v for k, v in open_[m["turn_id"]].items() if k != "speculative"}
            settled.add(m["turn_id"])
            out.append({**start, "confirmed": True} if m["type"] == "turn.confirm" else {**start, "type": "cancelled"})
            continue
        out.append(m)
    out += [m for turn_id, m in open_.items() if turn_id not in settled]
    return out
