"""The demo page in real Chromium: cross-origin isolated (wasm threads) and able to read the model manifest."""

from __future__ import annotations


def test_demo_page_is_isolated_and_lists_the_browser_models(page, voxline_server):
    page.goto(voxline_server.url + "/")
    page.wait_for_selector("html[data-voxline-manifest=loaded]", timeout=15_000)
    assert page.evaluate("self.crossOriginIsolated") is True
    assert page.evaluate("typeof SharedArrayBuffer") == "function"
    items = page.locator("#models li").all_inner_texts()
    assert any(text.startswith("whisper-tiny-en-onnx") for text in items)
    assert any(text.startswith("silero-vad-v5") for text in items)


def test_onnxruntime_web_loads_a_browser_model(page, voxline_server):
    """onnxruntime-web from our own server, threaded wasm, runs Silero VAD on one frame of silence."""
    page.goto(voxline_server.url + "/")
    page.wait_for_selector("html[data-voxline-manifest=loaded]", timeout=15_000)
    result = page.evaluate("""async () => {
        const ort = await import('/vendor/onnxruntime-web/ort.wasm.min.mjs');
        ort.env.wasm.wasmPaths = '/vendor/onnxruntime-web/';
        ort.env.wasm.numThreads = 2;
        const session = await ort.InferenceSession.create('/wasm_models/silero-vad-v5/silero_vad_v5.onnx');
        const out = await session.run({
            input: new ort.Tensor('float32', new Float32Array(512), [1, 512]),
            state: new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]),
            sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []),
        });
        return {inputs: session.inputNames, p: out.output.data[0]};
    }""")
    assert result["inputs"] == ["input", "state", "sr"]
    assert 0.0 <= result["p"] < 0.5
