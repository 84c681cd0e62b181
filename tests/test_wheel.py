"""The Python package stands alone: a wheel built from the checkout, installed into a fresh venv in a temporary
directory, fetches the browser runtimes and serves the demo, the widget, the browser models and the runtimes from
there, with no path into the checkout.

One test, about a minute on two cores: building the wheel (~10 s, hatchling in pip's isolated build env),
installing it with constraints.txt (~35 s, wheels from pip's cache), `voxline models fetch` (~5 s: the models are
the existing cache's, linked; the runtimes are unpacked from their npm tarballs) and a server start (~10 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from voxline import paths
from voxline.cli import main
from voxline.config import REPO_ROOT
from voxline.server.runtimes import PYODIDE, RUNTIMES

BROWSER_MODEL = "silero-vad-v5-16k"
"""The browser model fetched through the installed server (the smallest)."""


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def scratch_cache(root: Path) -> Path:
    """A cache that reads the existing one's models but writes only under `root`.

    Each built model, each precompressed variant and each downloaded tarball is a link; the stamps are copies (a
    verification rewrites them) and the runtimes are not there at all: `voxline models fetch` unpacks them.
    """
    shared, cache = paths.cache_dir(), root / "cache"
    for folder in ("models", "compressed", "downloads"):
        (cache / folder).mkdir(parents=True)
        for entry in (shared / folder).glob("*"):
            if folder != "downloads" or entry.name in {p.tarball for p in RUNTIMES}:
                (cache / folder / entry.name).symlink_to(entry)
    shutil.copytree(shared / "stamps", cache / "stamps")
    return cache


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is part of the setup (the widget build)")
def test_an_installed_wheel_serves_everything_from_outside_the_checkout(tmp_path):
    started = time.monotonic()
    run(["npm", "run", "--silent", "build"], REPO_ROOT, timeout=120)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w",
         str(tmp_path / "wheels"), str(REPO_ROOT)], tmp_path)
    (wheel,) = (tmp_path / "wheels").glob("voxline-*.whl")
    # A venv without pip of its own (faster to make); this interpreter's pip installs into it.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python, voxline = venv / "bin" / "python", venv / "bin" / "voxline"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile",
         "--disable-pip-version-check", "-c", str(REPO_ROOT / "constraints.txt"), str(wheel)], tmp_path, timeout=600)
    installed = time.monotonic()

    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXLINE_") and k not in ("PYTHONPATH",
                                                                                            "VIRTUAL_ENV")}
    env.update(VOXLINE_CACHE=str(scratch_cache(tmp_path)), VOXLINE_LLM_MODEL="smollm2-135m-instruct-ct2",
               VOXLINE_INTENT_NEIGHBOURS="off")
    # Nothing from the checkout: the package, its page and widget are the venv's, and no import path leads back.
    where = json.loads(run([str(python), "-c", "import json, os, sys, voxline, voxline.config as c; print(json.dumps("
                            "[os.environ.get('PYTHONPATH'), voxline.__file__, str(c.WEB_DIR), str(c.WIDGET_DIR), "
                            "sys.path]))"], tmp_path, env))
    pythonpath, package, web, widget, sys_path = where
    assert pythonpath is None
    assert all(Path(p).is_relative_to(venv) for p in (package, web, widget)), where
    assert not any(Path(p).resolve().is_relative_to(REPO_ROOT) for p in sys_path if p), sys_path
    # A core install has no PortAudio binding; `voxline talk` says which extra brings it.
    assert run([str(python), "-c", "import importlib.util as u; print(u.find_spec('sounddevice'))"],
               tmp_path, env).strip() == "None"
    talk = subprocess.run([str(voxline), "talk", "--list-devices"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert talk.returncode != 0 and "pip install 'voxline[client]'" in talk.stderr, talk.stderr

    fetched = subprocess.run([str(voxline), "models", "fetch"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert fetched.returncode == 0, fetched.stderr
    assert all(f"{p.name} {p.version}: unpacked" in fetched.stderr for p in RUNTIMES), fetched.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as stderr:
        server = subprocess.Popen([str(voxline), "serve", "--port", str(port)], cwd=tmp_path, env=env,
                                  stdout=subprocess.DEVNULL, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, log.read_text()
            try:
                status, body = get(base + "/healthz")
            except OSError:
                status = None
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == 200, log.read_text()[-3000:]
        status, page = get(base + "/")
        assert status == 200 and page == (REPO_ROOT / "web" / "index.html").read_bytes()
        status, widget = get(base + "/widget.js")
        assert status == 200 and widget == (REPO_ROOT / "dist" / "widget.js").read_bytes()
        status, manifest = get(base + "/wasm_models/manifest.json")
        assert status == 200
        (model,) = [m for m in json.loads(manifest)["models"] if m["name"] == BROWSER_MODEL]
        assert model["files"]
        for file in model["files"]:
            status, body = get(base + file["url"])
            assert status == 200 and hashlib.sha256(body).hexdigest() == file["sha256"], file["name"]
        status, body = get(base + PYODIDE.url_prefix + "pyodide.mjs")
        assert status == 200 and hashlib.sha256(body).hexdigest() == PYODIDE.files["pyodide.mjs"]
    finally:
        server.terminate()
        server.wait(30)
    print(f"wheel built and installed in {installed - started:.0f} s, fetched and served in "
          f"{time.monotonic() - installed:.0f} s")


def test_talk_without_the_client_extra_says_which_extra_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # as in `pip install voxline` without extras
    assert main(["talk", "--list-devices"]) == 2
    assert "pip install 'voxline[client]'" in capsys.readouterr().err
