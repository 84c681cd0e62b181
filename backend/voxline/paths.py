"""Where Voxline keeps what it builds: one cache folder outside git."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "VOXLINE_CACHE"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "voxline"


def cache_dir() -> Path:
    """The root of the model cache (`$VOXLINE_CACHE`, else `~/.cache/voxline`)."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR).expanduser()


def downloads_dir() -> Path:
    """Registry packages exactly as downloaded (wheels, npm tarballs)."""
    return cache_dir() / "downloads"


def sources_dir() -> Path:
    """Unpacked registry packages, one folder per `dist-version`."""
    return cache_dir() / "sources"


def model_dir(name: str) -> Path:
    """The built artifacts of one model of the manifest."""
    return cache_dir() / "models" / name


def runtimes_dir() -> Path:
    """The browser runtimes' served files (onnxruntime-web, Pyodide), one folder per `package/version`."""
    return cache_dir() / "runtimes"
