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
