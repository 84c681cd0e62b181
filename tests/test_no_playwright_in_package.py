"""Nothing in the shipped package imports Playwright: the e2e harness and the browser benchmarks live in e2e/."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "backend" / "voxline"


def playwright_imports(source: str) -> list[int]:
    """The lines that import playwright or one of its modules, anywhere: at the top, in a function, in a branch."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] == "playwright" for name in names):
            lines.append(node.lineno)
    return lines


def test_no_module_of_the_package_imports_playwright():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 20, f"no package under {PACKAGE}"
    found = {str(path.relative_to(PACKAGE.parent)): lines for path in modules
             if (lines := playwright_imports(path.read_text(encoding="utf-8")))}
    assert found == {}


def test_imports_inside_functions_and_of_submodules_are_found():
    source = "import os\n\n\ndef run():\n    from playwright.sync_api import sync_playwright\n    import playwright\n"
    assert playwright_imports(source) == [5, 6]


def test_names_that_only_start_like_playwright_are_not_it():
    source = "import playwright_stealth\nfrom playwrights import page\nfrom . import playwright\n"
    assert playwright_imports(source) == []
