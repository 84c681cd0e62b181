"""Fixtures shared by the backend tests: built models come from the cache that `voxline models fetch` fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxline import paths


@pytest.fixture(scope="session")
def model_dir():
    """Return the built folder of a manifest model; fail (never skip) when it has not been built."""

    def _get(name: str) -> Path:
        folder = paths.model_dir(name)
        if not folder.is_dir() or not any(folder.iterdir()):
            pytest.fail(f"model {name!r} is not built in {folder}: run `voxline models fetch`")
        return folder

    return _get


class FakeSoundDevice:
    """Stands in for the `sounddevice` module on machines without audio devices: one output device whose stream
    calls back from its own thread at the real rate, as PortAudio does, and records what it was given."""

    class PortAudioError(Exception):
        pass

    BLOCK_FRAMES = 240  # 10 ms at 24 kHz

    def __init__(self) -> None:
        self.played = bytearray()

    def query_devices(self, device=None, kind=None):
        return {"index": 0, "name": "fake speaker", "default_samplerate": 24000.0,
                "max_input_channels": 0, "max_output_channels": 1}

    def RawOutputStream(self, samplerate, channels, dtype, device, callback):  # noqa: N802 (sounddevice's name)
        import threading
        import time

        fake = self

        class Stream:
            def __init__(self) -> None:
                self.running = False
                self.thread = threading.Thread(target=self.run, daemon=True)

            def start(self) -> None:
                self.running = True
                self.thread.start()

            def run(self) -> None:
                while self.running:
                    out = bytearray(fake.BLOCK_FRAMES * 2)
                    callback(out, fake.BLOCK_FRAMES, None, None)
                    fake.played += out
                    time.sleep(fake.BLOCK_FRAMES / samplerate)

            def stop(self) -> None:
                self.running = False
                self.thread.join()

            def close(self) -> None:
                pass

        return Stream()


@pytest.fixture
def fake_sounddevice(monkeypatch):
    """`voxline.client_audio` sees one fake output device."""
    fake = FakeSoundDevice()
    monkeypatch.setattr("voxline.client_audio._sounddevice", lambda: fake)
    return fake


@pytest.fixture
def run_async():
    """Run a coroutine to completion in its own thread and loop: pytest-playwright's sync API keeps an event loop
    running in the main thread once an e2e test has used it, and `asyncio.run` refuses to nest in it."""
    import asyncio
    import concurrent.futures

    def _run(coroutine):
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coroutine).result()

    return _run
