"""Caching headers and encodings of what the page loads (voxline/server/assets.py, runtimes.py)."""

from __future__ import annotations

import gzip
import hashlib

import brotli
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

from voxline import paths
from voxline.config import REPO_ROOT, Settings
from voxline.server import assets
from voxline.server.app import create_app
from voxline.server.assets import IMMUTABLE, REVALIDATE, Asset, AssetSender
from voxline.server.runtimes import ONNXRUNTIME_WEB, PYODIDE, RUNTIMES, load_runtime_files

ORT_WASM = ONNXRUNTIME_WEB.url_prefix + "ort-wasm-simd-threaded.wasm"


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings.from_env(llm_model="smollm2-135m-instruct-ct2"))) as c:
        yield c


def get(client, url: str, encoding: str = "br, gzip", **headers):
    """A GET whose body is kept as sent (not decoded), so sizes and encodings are what crossed the wire."""
    with client.stream("GET", url, headers={"accept-encoding": encoding, **headers}) as response:
        return response, b"".join(response.iter_raw())


def decoded(response, body: bytes) -> bytes:
    encoding = response.headers.get("content-encoding")
    return brotli.decompress(body) if encoding == "br" else gzip.decompress(body) if encoding == "gzip" else body


@pytest.mark.parametrize("package", RUNTIMES, ids=lambda p: p.name)
def test_runtime_pins_match_the_installed_packages(package):
    # npm's copy (package-lock.json), which the widget build and the node tests use, is the one the pins describe.
    files = load_runtime_files(REPO_ROOT / "node_modules", (package,))[package.name]
    assert {name: f.problem for name, f in files.items() if f.problem} == {}


def test_a_versioned_runtime_is_immutable_and_compressed(client):
    response, body = get(client, ORT_WASM)
    assert response.status_code == 200
    assert response.headers["cache-control"] == IMMUTABLE
    assert response.headers["content-encoding"] == "br" and response.headers["vary"] == "Accept-Encoding"
    assert response.headers["content-type"] == "application/wasm"
    assert int(response.headers["content-length"]) == len(body) < 4_000_000  # 14.2 MB as sent before
    assert hashlib.sha256(decoded(response, body)).hexdigest() == ONNXRUNTIME_WEB.files["ort-wasm-simd-threaded.wasm"]


@pytest.mark.parametrize(("accept", "expected"), [("gzip", "gzip"), ("br;q=0, gzip", "gzip"), ("identity", None),
                                                  ("", None), ("deflate, br", "br")])
def test_the_encoding_follows_accept_encoding(client, accept, expected):
    response, body = get(client, PYODIDE.url_prefix + "pyodide.asm.mjs", accept)
    assert response.headers.get("content-encoding") == expected
    assert hashlib.sha256(decoded(response, body)).hexdigest() == PYODIDE.files["pyodide.asm.mjs"]
    etag = response.headers["etag"]
    assert etag.endswith({"br": '.br"', "gzip": '.gz"', None: '"'}[expected])  # one ETag per representation


def test_a_revalidation_costs_headers_only(client):
    first, _ = get(client, "/voxline/loader.js")
    assert first.headers["cache-control"] == REVALIDATE and first.headers["content-encoding"] == "br"
    again, body = get(client, "/voxline/loader.js", **{"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and body == b""
    assert again.headers["etag"] == first.headers["etag"] and again.headers["cache-control"] == REVALIDATE
    # The identity ETag names the same content: a browser that cached it uncompressed gets a 304 too.
    plain, _ = get(client, "/voxline/loader.js", "identity")
    assert get(client, "/voxline/loader.js", **{"if-none-match": plain.headers["etag"]})[0].status_code == 304


def test_a_model_url_naming_its_digest_is_immutable_and_any_other_revalidated(client):
    manifest = client.get("/wasm_models/manifest.json").json()
    assert manifest["runtimes"]["onnxruntime-web"]["base"] == ONNXRUNTIME_WEB.url_prefix
    vad = next(m for m in manifest["models"] if m["role"] == "browser-vad")
    (entry,) = vad["files"]
    response, body = get(client, entry["url"])
    assert response.headers["cache-control"] == IMMUTABLE
    assert hashlib.sha256(decoded(response, body)).hexdigest() == entry["sha256"]
    stale, _ = get(client, entry["url"].split("?")[0] + "?sha256=" + "0" * 64)
    assert stale.headers["cache-control"] == REVALIDATE


def test_the_unversioned_runtime_urls_are_revalidated(client):
    response, _ = get(client, "/vendor/onnxruntime-web/ort.wasm.min.mjs")
    assert response.status_code == 200 and response.headers["cache-control"] == REVALIDATE
    assert get(client, ONNXRUNTIME_WEB.url_prefix + "ort.all.mjs")[0].status_code == 404  # only the pinned files


def test_head_sends_headers_only(client):
    response = client.head(ORT_WASM, headers={"accept-encoding": "br"})
    assert response.status_code == 200 and response.content == b""
    assert int(response.headers["content-length"]) > 1_000_000 and response.headers["content-encoding"] == "br"


def test_an_altered_runtime_file_is_not_served_and_the_error_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    folder = tmp_path / "runtimes" / "onnxruntime-web" / ONNXRUNTIME_WEB.version
    folder.mkdir(parents=True)
    for name in ONNXRUNTIME_WEB.files:
        (folder / name).write_bytes(b"not the pinned bytes")
    files = load_runtime_files(packages=(ONNXRUNTIME_WEB,))["onnxruntime-web"]
    wasm = files["ort-wasm-simd-threaded.wasm"]
    assert wasm.data is None and "differs from its pin" in wasm.problem and "voxline models fetch" in wasm.problem


def _app(asset: Asset, sender: AssetSender) -> TestClient:
    async def serve(request: Request):
        return await sender.respond(request, asset, immutable=True)

    return TestClient(Starlette(routes=[Route("/a", serve)]))


def test_an_altered_precompressed_file_is_never_sent(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    data = bytes(range(256)) * (assets.INLINE_MAX_BYTES // 256 + 1)  # big enough to use the files on disk
    asset = Asset.of(data, "application/octet-stream")
    assets.build_variants(asset, brotli_quality=1)
    altered = assets.variant_path(asset.sha256, "br")
    altered.write_bytes(brotli.compress(b"something else"))
    sender = AssetSender()
    try:
        response, body = get(_app(asset, sender), "/a", "br")
        assert response.headers.get("content-encoding") is None and body == data  # the identity bytes instead
        assert not altered.exists() or hashlib.sha256(brotli.decompress(altered.read_bytes())).hexdigest() == \
            asset.sha256  # deleted (and maybe rebuilt right by the background builder)
        response, body = get(_app(asset, sender), "/a", "gzip")
        assert response.headers["content-encoding"] == "gzip" and gzip.decompress(body) == data
    finally:
        sender.close()


def test_a_variant_the_server_built_in_a_hurry_gives_way_to_the_built_one(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    data = bytes(range(256)) * (assets.INLINE_MAX_BYTES // 256 + 1)  # big enough to use the files on disk
    asset = Asset.of(data, "application/octet-stream")
    sender = AssetSender()
    response, _ = get(_app(asset, sender), "/a", "br")  # missing: the identity bytes now, built in the background
    assert response.headers.get("content-encoding") is None
    sender._builder.shutdown(wait=True)  # the background build, done
    provisional, final = (assets.variant_path(asset.sha256, "br", provisional=p) for p in (True, False))
    assert provisional.exists() and not final.exists()
    sender = AssetSender()  # a server started now sends the provisional variant
    try:
        response, body = get(_app(asset, sender), "/a", "br")
        assert response.headers["content-encoding"] == "br" and brotli.decompress(body) == data
    finally:
        sender.close()
    # `voxline models fetch` builds the variants proper and drops the provisional ones.
    assert assets.precompress([("a", asset)], log_line=lambda line: None) == 2
    assert final.exists() and not provisional.exists()
    assert not assets.variant_path(asset.sha256, "gzip", provisional=True).exists()
    assert assets.precompress([("a", asset)], log_line=lambda line: None) == 0


def test_precompress_skips_what_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    asset = Asset.of(b"voxline " * 1000, "text/javascript")
    assert assets.precompress([("a", asset)], log_line=lambda line: None) == 2
    assert assets.precompress([("a", asset)], log_line=lambda line: None) == 0


@pytest.mark.parametrize("url", ["/wasm_models/manifest.json", "/intents/manifest.json"])
def test_the_manifests_are_revalidated_by_etag(client, url):
    first = client.get(url)
    assert first.headers["cache-control"] == REVALIDATE and first.json()
    again = client.get(url, headers={"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
