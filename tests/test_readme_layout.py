"""The README's layout table matches the tree: every path it names exists, every file it names in a folder's row is
in that folder, and every top-level folder of the checkout has a row."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout_rows() -> dict[str, str]:
    """Path → description, from the table under `## Layout`."""
    section = ROOT.joinpath("README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_every_path_in_the_table_exists():
    rows = layout_rows()
    assert len(rows) >= 8, rows
    assert [path for path in rows if not (ROOT / path).exists()] == []


def test_the_modules_a_package_row_names_are_in_that_package():
    missing = []
    for path, description in layout_rows().items():
        if not (ROOT / path).is_dir() or "__init__.py" not in {p.name for p in (ROOT / path).iterdir()}:
            continue
        for name in re.findall(r"`([\w/]+\.py)`", description):
            if not (ROOT / path / name).exists():
                missing.append(f"{path}{name}")
    assert missing == []


def test_every_top_level_folder_has_a_row():
    tracked = subprocess.run(["git", "ls-tree", "--name-only", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    folders = {name for name in tracked if (ROOT / name).is_dir() and not name.startswith(".")}
    named = {path.split("/")[0] for path in layout_rows()}
    assert folders - named == set()
