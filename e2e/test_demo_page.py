"""The demo page in real Chromium: cross-origin isolated (wasm threads), models loaded, progress shown."""

from __future__ import annotations

from voxline.bench.audio import RATE, compose, hibari, write_wav
from e2e.harness import wait_for_js

RECORD_TIMINGS = "document.addEventListener('voxline:timings', (e) => window.__vx.push({name: 'timings', ...e.detail}));"


def test_page_is_isolated_and_fires_ready_without_the_microphone(page, voxline_server):
    page.add_init_script("document.addEventListener('voxline:ready', (e) => { window.__ready = e.detail; });")
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__ready !== undefined", 60)
    assert page.evaluate("self.crossOriginIsolated") is True
    ready = page.evaluate("window.__ready")
    assert ready["isolated"] is True and ready["threads"] == 2
    assert ready["load_ms"] > 0
    # Each worker started its runtime once onnxruntime's wasm was compiled, then created its sessions, before `ready`
    phases = ready["phases"]
    for worker in ("vad", "asr"):
        (runtime_from, runtime_to), (session_from, session_to) = (phases["timeline"][worker][stage]
                                                                  for stage in ("runtime", "session"))
        assert phases["ort_ms"] - 1 <= runtime_from <= runtime_to <= session_from + 1 <= session_to + 1, phases
        assert session_to <= ready["load_ms"] + 1, phases
    names = {m["name"] for m in ready["models"]}
    assert names == {"whisper-tiny-en-onnx", "silero-vad-v5-16k"}  # what listening needs; smart-turn comes after
    assert all(m["bytes"] > 1_000_000 for m in ready["models"])
    assert page.locator("#state").inner_text() == "Ready"
    assert page.locator("#progress").is_hidden()
    assert page.evaluate("window.voxline.turnDetection") is True  # smart-turn, loaded after `ready`
    assert page.evaluate("window.voxline.turnDetectionState") == "up"


def test_models_are_kept_in_cache_storage_and_checked(page, voxline_server):
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "document.getElementById('state').dataset.state === 'idle'", 60)
    wait_for_js(page, "window.voxline.turnDetectionState === 'up'", 60)  # smart-turn's model comes after `ready`
    keys = page.evaluate("""async () => {
        const cache = await caches.open('voxline-models-v1');
        return (await cache.keys()).map((r) => r.url);
    }""")
    assert any("encoder.int8.onnx?sha256=" in k for k in keys)
    assert len(keys) == 5


def _tamper(route):
    response = route.fetch()
    body = bytearray(response.body())
    body[1000] ^= 0xFF
    route.fulfill(response=response, body=bytes(body))


def test_a_corrupt_model_download_is_refused_with_a_way_out(page, voxline_server):
    page.add_init_script("document.addEventListener('voxline:error', (e) => { window.__error = e.detail; });")
    page.route("**/wasm_models/silero-vad-v5-16k/*", _tamper)
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__error !== undefined", 60)
    error = page.evaluate("window.__error")
    assert error["code"] == "model_corrupt"
    assert "silero_vad_v5_16k.onnx" in error["message"] and "Reload" in error["message"]
    assert page.locator("#state").get_attribute("data-state") == "error"
    keys = page.evaluate("async () => (await (await caches.open('voxline-models-v1')).keys()).map((r) => r.url)")
    assert not any("silero" in k for k in keys), "an altered file must never be cached"


def test_a_failed_download_says_so(page, voxline_server):
    page.add_init_script("document.addEventListener('voxline:error', (e) => { window.__error = e.detail; });")
    page.route("**/wasm_models/whisper-tiny-en-onnx/encoder.int8.onnx?*", lambda route: route.abort())
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__error !== undefined", 60)
    assert page.evaluate("window.__error.code") == "model_download_failed"


def test_a_turn_model_that_cannot_load_leaves_turns_to_the_hangover_and_speech_ready(page, voxline_server):
    # smart-turn loads after `ready`: without it the page still listens, and says what it does instead.
    page.add_init_script("document.addEventListener('voxline:error', (e) => { window.__error = e.detail; });")
    page.add_init_script("document.addEventListener('voxline:ready', (e) => { window.__ready = e.detail; });")
    page.route("**/wasm_models/smart-turn-v3.2/*", lambda route: route.abort())
    page.goto(voxline_server.url + "/")
    wait_for_js(page, "window.__error !== undefined", 60)
    error = page.evaluate("window.__error")
    assert error["code"] == "turn_detection_failed" and "silence" in error["message"], error
    assert page.evaluate("window.__ready !== undefined")
    assert page.evaluate("window.voxline.turnDetection") is False
    assert page.evaluate("window.voxline.turnDetectionState") == "off"
    assert page.locator("#state").get_attribute("data-state") != "error"


RECORD_CSP_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push({directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample});
});
"""


def test_the_page_works_under_its_content_security_policy_and_reports_what_breaks_it(page, voxline_server):
    page.add_init_script(RECORD_CSP_VIOLATIONS)
    response = page.goto(voxline_server.url + "/")
    assert "'wasm-unsafe-eval'" in response.headers["content-security-policy"]
    # Everything the page starts: speech models in workers (onnxruntime-web wasm threads), the intent engine
    # (Pyodide in a worker), the WebSocket to the server.
    wait_for_js(page, "window.voxline?.ready && window.voxline.intents?.ready && window.voxline.backendConnected", 120)
    assert page.evaluate("window.__csp") == []
    # What the policy forbids is blocked and reported: inline script, another origin's image.
    page.evaluate("""() => {
        document.body.append(Object.assign(document.createElement('script'), {textContent: 'window.__inline = 1'}));
        document.body.append(Object.assign(new Image(), {src: 'https://example.invalid/pixel.png'}));
    }""")
    wait_for_js(page, "window.__csp.length >= 2", 10)
    directives = {v["directive"] for v in page.evaluate("window.__csp")}
    assert directives == {"script-src-elem", "img-src"}
    assert page.evaluate("window.__inline") is None


def test_a_spoken_command_gets_one_timings_event_and_a_waterfall(open_voxline, tmp_path):
    audio, (command,) = compose([("pause the music", hibari("pause the music"))], tail_s=3.0)
    wav = write_wav(tmp_path / "command.wav", audio)
    vx = open_voxline(wav, before_goto=lambda page: page.add_init_script(RECORD_TIMINGS))
    vx.wait_until_heard(len(audio) / RATE)
    (intent,) = vx.events("intent")
    assert intent["intent"] == "media.pause" and intent["source"] in ("local", "cache"), vx.timeline()
    (timings,) = vx.events("timings")
    stages = timings["stages"]
    assert timings["source"] == intent["source"] and "server_turn_id" not in timings and "timings" not in timings
    assert stages["intent"] == intent["audio_t"]
    assert abs(stages["speech_end"] - command.end_s) < 0.3, (stages, command)
    # In order on the capture clock; a command heard complete in a partial transcript acts before the turn ends.
    order = ["speech_end", "turn_end", "transcript"] if timings.get("early") else ["speech_end", "turn_end", "transcript", "intent"]
    times = [stages[name] for name in order]
    assert times == sorted(times), timings
    assert stages["intent"] >= command.start_s
    row = vx.page.locator("#timings > li").first
    assert "turn 1" in row.inner_text() and row.locator("rect").count() >= 3
    assert row.locator("rect.server").count() == 0
