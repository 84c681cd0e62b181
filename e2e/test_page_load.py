"""What a visit downloads, in real Chromium through a byte-counting proxy, and how altered runtimes are refused.

A returning visit (the same profile, Chromium closed and started again) must send no model or runtime bytes: the
models and Pyodide's standard library come from Cache Storage, the runtimes' wasm from the HTTP cache (where
Chromium keeps the code it compiled) on the server's own origin, all checked against their sha256; the runtimes'
scripts come from the HTTP cache (immutable, versioned URLs), and what is revalidated costs a 304.
"""

from __future__ import annotations

from e2e.bench.load_page import DEMO_VOXLINE, persistent_context, visit
from e2e.bench.proxy import CountingProxy
from e2e.harness import wait_for_js

RETURNING_VISIT_MAX_BYTES = 1_000_000
"""Issue 18's bar for a returning visit (headers of the revalidated scripts, the manifests, the WebSocket)."""
BIG_FILES = ("/wasm_models/", "/vendor/", "/intents/voxline_intents")
"""Paths of the models, the runtimes and the intent wheel: never sent again to a returning visitor."""


def test_a_returning_visit_sends_no_model_or_runtime_bytes(playwright, voxline_server, tmp_path):
    with CountingProxy() as proxy:
        visits = []
        for _ in range(2):  # Chromium started, then closed and started again on the same profile
            context = persistent_context(playwright, tmp_path, proxy)
            try:
                visits.append(visit(context, proxy, voxline_server.url + "/", DEMO_VOXLINE))
            finally:
                context.close()
        first, returning = visits
    assert first["errors"] == [] and returning["errors"] == []
    sent_first = {r["url"].split("?")[0]: r for r in first["resources"]}
    wasm = next(r for url, r in sent_first.items() if url.endswith("ort-wasm-simd-threaded.wasm"))
    assert wasm["encoding"] == "br" and wasm["bytes"] < 4_000_000  # 14.2 MB uncompressed
    assert sum(url.endswith("ort-wasm-simd-threaded.wasm") for url in sent_first) == 1  # once, for both workers
    assert first["ready_reports"]["bytes"]["network"] > 40_000_000

    resent = [r for r in returning["resources"] if r["status"] == 200 and any(p in r["url"] for p in BIG_FILES)
              and not r["url"].endswith("manifest.json")]
    assert resent == []
    assert returning["bytes"] < RETURNING_VISIT_MAX_BYTES, returning["resources"]
    assert returning["ready_reports"]["bytes"] == {"network": 0, "cache": first["ready_reports"]["bytes"]["network"]}
    # The runtimes' wasm was compiled from the on-disk HTTP cache's entry, beside which the browser keeps its code
    stores = {f["name"]: f.get("cache") for f in returning["ready_reports"]["files"]}
    assert stores == {"ort-wasm-simd-threaded.wasm": "http", "encoder.int8.onnx": "storage",
                      "decoder.int8.onnx": "storage", "tokens.json": "storage", "silero_vad_v5_16k.onnx": "storage"}
    engine = {f["name"]: (f["from"], f.get("cache")) for f in returning["engine_files"]}
    assert engine == {"pyodide.asm.wasm": ("cache", "http"), "python_stdlib.zip": ("cache", "storage")}
    assert {f["name"]: f["from"] for f in first["engine_files"]} == {"pyodide.asm.wasm": "network",
                                                                      "python_stdlib.zip": "network"}


def _tamper(route):
    response = route.fetch()
    body = bytearray(response.body())
    body[5000] ^= 0xFF
    route.fulfill(response=response, body=bytes(body))


RECORD_ERROR = "document.addEventListener('voxline:error', (e) => { (window.__errors ??= []).push(e.detail); });"
RUNTIME_CACHE_KEYS = "async () => (await (await caches.open('voxline-runtimes-v1')).keys()).map((r) => r.url)"


def test_an_altered_onnxruntime_download_is_refused_with_a_way_out(page, voxline_server):
    page.add_init_script(RECORD_ERROR)
    page.route("**/vendor/onnxruntime-web/*/ort-wasm-simd-threaded.wasm", _tamper)
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__errors?.length > 0", 60)
    (error,) = page.evaluate("window.__errors")
    assert error["code"] == "runtime_corrupt"
    assert "ort-wasm-simd-threaded.wasm" in error["message"] and "Reload" in error["message"]
    assert page.locator("#state").get_attribute("data-state") == "error"
    assert not any("ort-wasm" in k for k in page.evaluate(RUNTIME_CACHE_KEYS)), "an altered file must never be cached"


def test_an_altered_pyodide_download_is_refused_and_speech_still_loads(page, voxline_server):
    page.add_init_script(RECORD_ERROR)
    page.route("**/vendor/pyodide/*/pyodide.asm.wasm", _tamper)
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__errors?.length > 0", 90)
    (error,) = page.evaluate("window.__errors")
    assert error["code"] == "runtime_corrupt" and "pyodide.asm.wasm" in error["message"]
    assert page.evaluate("window.voxline.ready !== undefined")  # the speech models loaded all the same
    assert not any("pyodide.asm.wasm" in k for k in page.evaluate(RUNTIME_CACHE_KEYS))


RECORD_READY = "document.addEventListener('voxline:ready', (e) => { window.__ready = e.detail; });"


def _rewrite_cached_ort_wasm(page, voxline_server, rewrite: str):
    """Load the page, then let `rewrite`, the body of `async (cache, key, response) => ...`, replace onnxruntime's
    cached wasm; returns what it returns.

    Routing a request turns Chromium's HTTP cache off for the page, so the page cannot take onnxruntime's wasm from
    there (its first choice, see `compileRuntimeFile`) and goes to the Cache Storage entry under test."""
    page.route("**/vendor/onnxruntime-web/**", lambda route: route.continue_())
    page.add_init_script(RECORD_ERROR)
    page.add_init_script(RECORD_READY)
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__ready !== undefined", 60)
    return page.evaluate(f"""async () => {{
        const cache = await caches.open('voxline-runtimes-v1');
        const key = (await cache.keys()).find((r) => r.url.includes('ort-wasm-simd-threaded.wasm'));
        return (async (cache, key, response) => {{ {rewrite} }})(cache, key, await cache.match(key));
    }}""")


def _ort_wasm_after_reload(page) -> dict:
    """Reload the page; what `voxline:ready` then says of onnxruntime's wasm (checked: no error was reported)."""
    page.reload()
    wait_for_js(page, "window.__ready !== undefined", 60)
    assert page.evaluate("window.__errors ?? []") == []
    wasm = next(f for f in page.evaluate("window.__ready.files") if f["name"] == "ort-wasm-simd-threaded.wasm")
    assert wasm.get("cache") != "http"  # the HTTP cache is off here (see _rewrite_cached_ort_wasm)
    return wasm


def test_an_altered_cached_runtime_is_never_used(page, voxline_server):
    altered = _rewrite_cached_ort_wasm(page, voxline_server, """
        const bytes = new Uint8Array(await response.arrayBuffer());
        bytes[5000] ^= 0xFF;
        await cache.put(key, new Response(bytes));
        return key.url;""")
    assert _ort_wasm_after_reload(page)["from"] == "network"  # the altered copy was dropped, not run
    intact = page.evaluate("""async (key) => {
        const bytes = await (await (await caches.open('voxline-runtimes-v1')).match(key)).arrayBuffer();
        const digest = await crypto.subtle.digest('SHA-256', bytes);
        return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
    }""", altered)
    assert altered.split("sha256=")[-1] == intact


def test_a_runtime_cached_by_an_older_page_is_kept_and_compiled_from_its_entry(page, voxline_server):
    # An older page cached the wasm as `application/octet-stream`; compiling it streaming needs `application/wasm`.
    key = _rewrite_cached_ort_wasm(page, voxline_server, """
        if (response.headers.get('content-type') !== 'application/wasm') return null;
        const bytes = await response.arrayBuffer();
        await cache.put(key, new Response(bytes, {headers: {'content-type': 'application/octet-stream'}}));
        return key.url;""")
    assert key is not None, "the runtime is cached as application/wasm"
    assert _ort_wasm_after_reload(page)["from"] == "cache"  # intact: used, not downloaded again
    kept = page.evaluate("""async (key) => (await (await caches.open('voxline-runtimes-v1')).match(key))
        .headers.get('content-type')""", key)
    assert kept == "application/wasm"
