"""Which way the package's imports go, read statically (ast) from the source: every import counts, also those inside
functions, so a lazy import cannot hide a dependency that goes the wrong way."""

from __future__ import annotations

import ast
from pathlib import Path

import voxline

PACKAGE = Path(voxline.__file__).parent
SESSION_MAX_LINES = 350


def modules(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def imported(path: Path, source: str | None = None) -> set[str]:
    """Every module `path` imports, absolute (relative imports resolved against its package)."""
    package = ["voxline", *path.relative_to(PACKAGE).parent.parts]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def offenders(paths: list[Path], forbidden: str) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        bad = sorted(n for n in imported(path) if n == forbidden or n.startswith(forbidden + "."))
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    return found


def test_the_reader_sees_relative_and_lazy_imports():
    source = "from ..bench import stats\nfrom . import protocol\ndef f():\n    import playwright.sync_api\n"
    names = imported(PACKAGE / "server" / "example.py", source)  # only its place in the package matters
    assert {"voxline.bench.stats", "voxline.server.protocol", "playwright.sync_api"} <= names


def test_the_server_does_not_import_the_benchmarks():
    assert modules("server") and offenders(modules("server"), "voxline.bench") == {}


def test_percentile_is_shared_from_a_neutral_module():
    neutral = [PACKAGE / "stats.py"]
    assert offenders(neutral, "voxline.bench") == offenders(neutral, "voxline.server") == {}
    assert "voxline.stats.percentile" in imported(PACKAGE / "server" / "metrics.py")
    assert "voxline.stats.percentile" in imported(PACKAGE / "bench" / "stats.py")


def test_the_ray_engine_takes_the_composition_root_from_engines_not_the_session():
    ray = modules("ray")
    assert ray and offenders(ray, "voxline.server.session") == {}
    assert any("voxline.server.engines.Engines" in imported(path) for path in ray)


def test_nothing_in_the_package_imports_playwright():
    assert offenders(modules(), "playwright") == {}


def test_session_py_is_the_state_machine_only():
    lines = (PACKAGE / "server" / "session.py").read_text().count("\n")
    assert lines < SESSION_MAX_LINES, f"server/session.py has {lines} lines: move what is not the state machine out"
