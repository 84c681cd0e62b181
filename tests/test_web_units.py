"""The browser modules' unit tests (node's test runner over web/tests), run as part of the suite."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

WEB_TESTS = Path(__file__).resolve().parents[1] / "web" / "tests"


def test_browser_unit_tests_pass():
    node = shutil.which("node")
    assert node, "node is required (the README's setup installs the project on Node 20)"
    result = subprocess.run([node, "--test", str(WEB_TESTS)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
