"""Package the intent engine and the compiled built-in grammar as a pure-Python wheel for Pyodide.

The wheel holds ``voxline/intents/*.py`` (the engine, without this build module), ``voxline/errors.py`` (the
exception tree the engine's error belongs to), a stub ``voxline/__init__.py`` (the real one belongs to the
server distribution and may import what the browser lacks), and ``voxline/intents/skills/builtin.json``: the
skill pack compiled from YAML here, so the browser never needs PyYAML. It is written with the standard library
only, and deterministically: fixed timestamps and permissions, sorted entries, so the same sources give the same
bytes (and the same URL hash, for caching).

Run as ``python -m voxline.intents.wheel OUT_DIR`` to print the path of the built wheel.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path

import voxline
from voxline.intents import grammar

DISTRIBUTION = "voxline-intents"
REQUIRES_PYTHON = ">=3.10"
"""The engine uses ``X | Y`` unions at run time; Pyodide ships 3.11 or later."""

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o644 << 16
_PACKAGE_DIR = Path(__file__).parent
_EXCLUDED_MODULES = frozenset({"wheel.py"})
_STUB_INIT = '"""Voxline, browser build: only the intent engine (`voxline.intents`)."""\n\n__version__ = {version!r}\n'


def build_wheel(out_dir: str | Path, skill_paths: list[Path] | None = None) -> Path:
    """Build the engine wheel into `out_dir` (created if needed) and return its path. The grammar it carries is
    compiled from `skill_paths` (default: the built-in pack); the engine in Pyodide loads it as its built-in one."""
    version = voxline.__version__
    dist_info = f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"
    compiled = grammar.compile_yaml(skill_paths or grammar.builtin_skill_paths())
    files: dict[str, bytes] = {
        "voxline/__init__.py": _STUB_INIT.format(version=version).encode(),
        "voxline/errors.py": (Path(voxline.__file__).parent / "errors.py").read_bytes(),
        "voxline/intents/skills/builtin.json": (grammar.canonical_json(compiled) + "\n").encode("utf-8"),
    }
    for module in sorted(_PACKAGE_DIR.glob("*.py")):
        if module.name not in _EXCLUDED_MODULES:
            files[f"voxline/intents/{module.name}"] = module.read_bytes()
    files[f"{dist_info}/METADATA"] = _metadata(version, grammar.grammar_version(compiled)).encode()
    files[f"{dist_info}/WHEEL"] = _wheel_file().encode()
    files[f"{dist_info}/top_level.txt"] = b"voxline\n"
    record_path = f"{dist_info}/RECORD"
    files[record_path] = _record(files, record_path).encode()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wheel_path = out / f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path, "w") as archive:
        for name in sorted(files, key=lambda n: (n == record_path, n)):
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.external_attr = _FILE_MODE
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    return wheel_path


def _metadata(version: str, grammar_version: str) -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {DISTRIBUTION}\n"
        f"Version: {version}\n"
        "Summary: Voxline's intent engine (pure Python) with the compiled built-in skill pack\n"
        "License: MIT\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
        f"Keywords: grammar-{grammar_version}\n"
    )


def _wheel_file() -> str:
    return "Wheel-Version: 1.0\nGenerator: voxline.intents.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record(files: dict[str, bytes], record_path: str) -> str:
    lines = []
    for name in sorted(files):
        if name == record_path:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(files[name])}")
    lines.append(f"{record_path},,")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: build into the folder given (default: the current one) and print the wheel's path."""
    args = sys.argv[1:] if argv is None else argv
    print(build_wheel(args[0] if args else "."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
