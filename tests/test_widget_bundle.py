"""The widget bundles: `npm run build` output, and the routes that serve it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from voxline.config import REPO_ROOT
from voxline.server.widget import widget_routes


def test_bundles_are_served_as_javascript_and_revalidated(tmp_path):
    (tmp_path / "widget.js").write_text("/* iife */")
    (tmp_path / "voxline-widget.mjs").write_text("export {};")
    client = TestClient(Starlette(routes=widget_routes(tmp_path)))
    for url, body in (("/widget.js", "/* iife */"), ("/voxline-widget.mjs", "export {};")):
        response = client.get(url)
        assert response.status_code == 200
        assert response.text == body
        assert response.headers["content-type"].startswith("text/javascript")
        assert response.headers["cache-control"] == "no-cache"


def test_a_missing_build_says_how_to_make_it(tmp_path):
    response = TestClient(Starlette(routes=widget_routes(tmp_path))).get("/widget.js")
    assert response.status_code == 404
    assert "npm run build" in response.text


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is part of the setup")
def test_build_keeps_workers_and_worklets_out_of_the_bundle(tmp_path):
    result = subprocess.run(["npm", "run", "--silent", "build"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    script = (REPO_ROOT / "dist" / "widget.js").read_text()
    module = (REPO_ROOT / "dist" / "voxline-widget.mjs").read_text()
    assert script.startswith("/* voxline-widget ") and "var VoxlineWidget=" in script
    for bundle in (script, module):
        # Fetched from the server by URL at run time, relative to the server's voxline/ folder.
        for file in ("./vad-worker.js", "./asr-worker.js", "./intents-worker.js", "./capture-worklet.js",
                     "./player-worklet.js"):
            assert f'"{file}"' in bundle
        assert "voxline/voxline.js" in bundle
        assert "class Whisper" not in bundle and "loadPyodide" not in bundle  # worker code stays out
    assert "import.meta" not in script  # a classic script has none
