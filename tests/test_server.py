"""`voxline serve`: isolation headers, health, browser model files, refusal to start without models."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from voxline import paths
from voxline.config import Settings
from voxline.errors import ModelMissing
from voxline.server.app import create_app

ISOLATION = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "cross-origin-resource-policy": "cross-origin",
}


@pytest.fixture(scope="module")
def client():
    settings = Settings.from_env(llm_model="smollm2-135m-instruct-ct2")
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.mark.parametrize("url", ["/", "/healthz", "/wasm_models/manifest.json",
                                 "/vendor/onnxruntime-web/ort.wasm.min.mjs"])
def test_every_response_is_cross_origin_isolated(client, url):
    response = client.get(url)
    assert response.status_code == 200
    for name, value in ISOLATION.items():
        assert response.headers[name] == value


def test_the_demo_page_has_a_content_security_policy_that_allows_its_wasm_and_workers(client):
    policy = dict(d.strip().split(" ", 1) for d in client.get("/").headers["content-security-policy"].split(";"))
    assert policy["script-src"] == "'self' 'wasm-unsafe-eval'" and "unsafe-inline" not in str(policy)
    assert policy["worker-src"] == "'self' blob:" and policy["connect-src"] == "'self'"
    assert policy["object-src"] == policy["base-uri"] == "'none'" and policy["frame-ancestors"] == "'none'"
    for url in ("/demo.js", "/vendor/onnxruntime-web/ort-wasm-simd-threaded.wasm", "/healthz"):
        response = client.get(url)
        assert "content-security-policy" not in response.headers  # workers keep their own (none)
        assert response.headers["x-content-type-options"] == "nosniff"


def test_the_token_endpoint_is_served_and_mints_nothing_without_public_keys(client):
    response = client.post("/token?key=shop", headers={"origin": "https://shop.example"})
    assert response.status_code == 404 and response.json()["code"] == "unknown_key"


def test_module_scripts_and_wasm_have_browser_types(client):
    assert client.get("/vendor/onnxruntime-web/ort.wasm.min.mjs").headers["content-type"].startswith("text/javascript")
    wasm = client.get("/vendor/onnxruntime-web/ort-wasm-simd-threaded.wasm")
    assert wasm.headers["content-type"] == "application/wasm"


MODELS = {"whisper-tiny-en-onnx", "silero-vad-v5-16k", "smart-turn-v3.2", "smollm2-135m-instruct-ct2", "whisper-base-ct2",
          "hibari-heart"}


def test_healthz_is_green_and_tells_anyone_only_status_and_flags(client):
    body = client.get("/healthz").json()
    assert set(body) == {"status", "models"} and body["status"] == "ok"
    names = {m["name"]: m for m in body["models"]}
    assert MODELS <= names.keys()
    for model in names.values():
        assert set(model) == {"name", "verified", "loaded"} and model["verified"] is True
    assert str(os.getpid()) not in client.get("/healthz").text


def test_healthz_details_are_an_operators_setting():
    settings = Settings.from_env(llm_model="smollm2-135m-instruct-ct2", health_details=True)
    with TestClient(create_app(settings)) as detailed:
        body = detailed.get("/healthz").json()
    assert body["pid"] == os.getpid() and body["version"]
    for model in body["models"]:
        assert model["verified"] is True and all(len(d) == 64 for d in model["artifacts"].values())


@pytest.mark.parametrize("url", ["/vendor/pyodide/console.html", "/vendor/pyodide/console-v2.html",
                                 "/vendor/pyodide/package.json", "/vendor/onnxruntime-web/ort.all.mjs",
                                 "/vendor/onnxruntime-web/ort.node.min.js", "/tests/link.test.js",
                                 "/tests/", "/voxline/../tests/ring.test.js"])
def test_what_no_page_loads_is_not_served(client, url):
    assert client.get(url).status_code == 404


@pytest.mark.parametrize("url", ["/vendor/pyodide/pyodide.mjs", "/vendor/pyodide/pyodide.asm.wasm",
                                 "/vendor/pyodide/python_stdlib.zip", "/vendor/pyodide/pyodide-lock.json",
                                 "/vendor/onnxruntime-web/ort-wasm-simd-threaded.mjs", "/voxline/link.js",
                                 "/widget/assistant.js"])
def test_what_the_page_loads_is_served(client, url):
    assert client.get(url).status_code == 200


def test_browser_model_files_match_their_manifest_digest(client):
    manifest = client.get("/wasm_models/manifest.json").json()
    roles = {m["role"] for m in manifest["models"]}
    assert roles == {"browser-asr", "browser-vad", "browser-turn"}
    vad = next(m for m in manifest["models"] if m["role"] == "browser-vad")
    (entry,) = vad["files"]
    body = client.get(entry["url"]).content
    assert len(body) == entry["size"]
    assert hashlib.sha256(body).hexdigest() == entry["sha256"]


@pytest.mark.parametrize("url", ["/wasm_models/whisper-base-ct2/model.bin",
                                 "/wasm_models/silero-vad-v5-16k/../../stamps/silero-vad-v5-16k.json",
                                 "/wasm_models/silero-vad-v5-16k/other.onnx",
                                 "/wasm_models/silero-vad-v5/silero_vad_v5.onnx"])  # a source, not for the browser
def test_only_pinned_browser_files_are_served(client, url):
    assert client.get(url).status_code == 404


def test_startup_refuses_without_models_and_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    with pytest.raises(ModelMissing, match="voxline models fetch"):
        create_app(Settings.from_env())


def test_cli_serve_without_models_exits_with_a_message(tmp_path):
    env = {**os.environ, paths.CACHE_ENV: str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "voxline.cli", "serve", "--port", "0"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "voxline models fetch" in result.stderr
    assert "Traceback" not in result.stderr


def test_settings_read_environment_then_flags():
    settings = Settings.from_env({"VOXLINE_PORT": "9001", "VOXLINE_LLM_MODEL": "x"}, llm_model="y")
    assert settings.port == 9001
    assert settings.llm_model == "y"
    with pytest.raises(ValueError, match="VOXLINE_PORT"):
        Settings.from_env({"VOXLINE_PORT": "eighty"})
