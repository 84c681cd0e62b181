"""End-to-end fixtures: a real Voxline server on a loopback port, driven by Debian's Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxline.bench.browser import CHROMIUM, CHROMIUM_FLAGS, ServerThread, VoxlinePage
from voxline.config import Settings

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

    def _open(wav: Path | None, query: str = "", before_goto=None) -> VoxlinePage:
        opened.append(VoxlinePage(browser_type, voxline_server.url, wav, query, before_goto))
        return opened[-1]

    yield _open
    for page in opened:
        page.close()
