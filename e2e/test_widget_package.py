"""The `voxline-widget` npm package as a site uses it: `npm pack`, the tarball installed offline into a scratch page
project, the page served from that project (another origin than the Voxline server) importing the element from its
own node_modules/voxline-widget, and, in real Chromium with a fake microphone, a spoken command heard as an intent.

Only the page and the package come from the site; the models, workers, wasm and Pyodide come from the Voxline server
the element's `base` attribute names, which is what a site that installs the package from npm must set.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from e2e.harness import RECORD_EVENTS, ServerThread, launch_chromium
from voxline.config import Settings

from e2e.conftest import E2E_LLM

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO / "packages" / "voxline-widget"
NPM_TIMEOUT_S = 180

MODULE_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8"><title>A shop built with npm</title>
  <script type="importmap">{{"imports": {{"voxline-widget": "{module}"}}}}</script>
</head>
<body>
  <h1>A shop that installed voxline-widget</h1>
  <voxline-assistant base="{voxline}/" server="{ws}" label="Ask the shop"></voxline-assistant>
  <script type="module">
    import {{ EVENTS, VoxlineAssistant }} from 'voxline-widget';
    // What a site does with the package: act on its intents, through the element and through EVENTS.
    window.__handled = [];
    window.__viaEvents = [];
    const el = document.querySelector('voxline-assistant');
    el.onIntent('media.pause', (detail) => window.__handled.push(detail.intent));
    document.addEventListener(EVENTS.intent, (event) => window.__viaEvents.push(event.detail.intent));
    window.__isElement = el instanceof VoxlineAssistant;
  </script>
</body>
</html>
"""
SCRIPT_TAG_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>A blog with one script tag</title></head>
<body>
  <h1>A blog that serves voxline-widget's widget.js itself</h1>
  <script src="/{script}" data-base="{voxline}/" data-server="{ws}"></script>
</body>
</html>
"""


def npm(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    npm_bin = shutil.which("npm")
    assert npm_bin, "npm is required (the README's setup installs the project on Node 20)"
    result = subprocess.run([npm_bin, *args], cwd=cwd, capture_output=True, text=True, timeout=NPM_TIMEOUT_S,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, f"npm {' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """`npm pack` in packages/voxline-widget (its prepack builds the bundles)."""
    out = tmp_path_factory.mktemp("pack")
    stdout = npm("pack", "--json", "--pack-destination", str(out), cwd=PACKAGE_DIR)
    # The build's own line comes first on stdout; the JSON report after it.
    report = json.loads(stdout[stdout.index("\n[") + 1:] if not stdout.startswith("[") else stdout)[0]
    assert report["name"] == "voxline-widget" and report["version"] == "0.1.0"
    return out / report["filename"]


@pytest.fixture(scope="module")
def site(tmp_path_factory, tarball) -> Path:
    """A scratch page project with the tarball installed: offline, from an empty npm cache (it has no dependencies)."""
    project = tmp_path_factory.mktemp("site")
    (project / "package.json").write_text(json.dumps({"name": "a-shop", "version": "1.0.0", "private": True}))
    npm("install", "--offline", "--no-audit", "--no-fund", str(tarball), cwd=project,
        env={"npm_config_cache": str(tmp_path_factory.mktemp("npm-cache"))})
    return project


@pytest.fixture(scope="module")
def site_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def voxline_server(site_port):
    """A Voxline server that admits the site's pages (`VOXLINE_ALLOWED_ORIGINS`), as an embedding site's must."""
    with ServerThread(Settings.from_env(llm_model=E2E_LLM, allowed_origins=f"http://localhost:{site_port}")) as server:
        yield server


class SiteServer:
    """The scratch project's folder over plain HTTP on loopback (`localhost`: another site than the Voxline server's
    `127.0.0.1`), recording every path asked for."""

    def __init__(self, folder: Path, port: int) -> None:
        self.requested: list[str] = []
        site = self

        class Handler(SimpleHTTPRequestHandler):
            extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                              ".js": "text/javascript"}

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                site.requested.append(self.path)
                super().do_GET()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=str(folder)))
        self.origin = f"http://localhost:{port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    """One command, spoken a moment after the microphone opens."""
    audio, placed = compose([("pause the music", hibari("pause the music", seed=1))], lead_s=1.0, gap_s=0.0,
                            tail_s=5.0)
    return write_wav(tmp_path_factory.mktemp("package") / "spoken.wav", audio), placed, len(audio) / RATE


def test_the_tarball_holds_the_bundles_types_and_readme_and_nothing_else(tarball):
    with tarfile.open(tarball) as tar:
        names = sorted(name.removeprefix("package/") for name in tar.getnames())
        manifest = json.load(tar.extractfile("package/package.json"))
    assert names == ["README.md", "dist/voxline-widget.mjs", "dist/widget.js", "package.json",
                     "types/voxline-widget.d.ts", "types/widget.d.ts"]
    assert not manifest.get("dependencies") and manifest["types"] == "./types/voxline-widget.d.ts"


def test_installed_package_embeds_on_another_origin_and_hears_a_command(browser_type, site, site_port,
                                                                        voxline_server, spoken):
    wav, placed, duration_s = spoken
    assert sorted(p.name for p in (site / "node_modules").iterdir() if not p.name.startswith(".")) == \
        ["voxline-widget"], "the package pulled in dependencies"
    # The ES module where Node resolves the bare name through the package's `exports`, as a bundler would.
    resolved = subprocess.run(["node", "--input-type=module", "-e",
                               "console.log(import.meta.resolve('voxline-widget'))"],
                              cwd=site, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    module = Path(resolved.removeprefix("file://")).relative_to(site.resolve())
    assert module == Path("node_modules/voxline-widget/dist/voxline-widget.mjs")
    ws = voxline_server.url.replace("http://", "ws://") + "/ws"
    (site / "module.html").write_text(MODULE_PAGE.format(module=f"/{module}", voxline=voxline_server.url, ws=ws))

    host = SiteServer(site, site_port)
    browser = launch_chromium(browser_type, wav)
    try:
        page = browser.new_context(permissions=["microphone"]).new_page()
        page.add_init_script(RECORD_EVENTS)
        console: list[str] = []
        page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda err: console.append(f"pageerror: {err}"))
        page.goto(f"{host.origin}/module.html")
        events = lambda name=None: [e for e in page.evaluate("window.__vx") if name in (None, e["name"])]  # noqa: E731

        page.wait_for_function("window.__vx.some(e => e.name === 'ready' || e.name === 'error')", timeout=120_000)
        assert [e["name"] for e in events() if e["name"] in ("ready", "error")] == ["ready"], (events(), console)
        assert page.evaluate("window.__isElement") is True
        # Local commands need the intent engine (Pyodide, from the Voxline server): then open the microphone.
        page.wait_for_function("document.querySelector('voxline-assistant').voxline?.intents?.ready === true",
                               timeout=120_000)
        page.evaluate("document.querySelector('voxline-assistant').start()")
        page.wait_for_function("window.__vx.some(e => e.name === 'intent')", timeout=(duration_s + 60) * 1000)
        intent = events("intent")[0]
        assert intent["intent"] == "media.pause", (events(), console)
        assert intent["source"] in ("local", "cache"), intent
        assert page.evaluate("window.__handled") == ["media.pause"]
        assert page.evaluate("window.__viaEvents") == ["media.pause"]
        assert not [line for line in console if line.startswith("pageerror")], console
        # The site served its page and the package's module; everything else came from the Voxline server.
        assert set(host.requested) - {"/favicon.ico"} == {"/module.html", f"/{module}"}, host.requested
    finally:
        browser.close()
        host.close()


def test_installed_script_tag_bundle_served_by_the_site_loads_from_the_server_it_names(browser_type, site, site_port,
                                                                                      voxline_server):
    script = Path("node_modules/voxline-widget/dist/widget.js")
    assert (site / script).is_file()
    ws = voxline_server.url.replace("http://", "ws://") + "/ws"
    (site / "script-tag.html").write_text(SCRIPT_TAG_PAGE.format(script=script, voxline=voxline_server.url, ws=ws))
    host = SiteServer(site, site_port)
    browser = launch_chromium(browser_type)
    try:
        page = browser.new_context(permissions=["microphone"]).new_page()
        page.add_init_script(RECORD_EVENTS)
        page.goto(f"{host.origin}/script-tag.html")
        page.wait_for_function("window.__vx.some(e => e.name === 'ready' || e.name === 'error')", timeout=120_000)
        events = page.evaluate("window.__vx")
        assert [e["name"] for e in events if e["name"] in ("ready", "error")] == ["ready"], events
        # The page had no element: the script added a floating one, and the package's global names the events.
        assert page.locator("voxline-assistant[floating]").count() == 1
        assert page.evaluate("VoxlineWidget.assistant.then((el) => el.base)") == f"{voxline_server.url}/"
        assert page.evaluate("VoxlineWidget.EVENTS.intent") == "voxline:intent"
        assert set(host.requested) - {"/favicon.ico"} == {"/script-tag.html", f"/{script}"}, host.requested
    finally:
        browser.close()
        host.close()
