// onnxruntime-web, loaded from the Voxline server beside this file, configured once per worker.
// Threads need cross-origin isolation (SharedArrayBuffer); without it the wasm runs single-threaded.

const ORT_URL = new URL('../vendor/onnxruntime-web/ort.wasm.min.mjs', import.meta.url);

/** @type {Promise<any>|null} */
let loading = null;

/** @param {number} threads wanted; capped to 1 when the worker is not cross-origin isolated */
export function loadOrt(threads) {
  loading ??= import(ORT_URL.href).then((ort) => {
    ort.env.wasm.wasmPaths = new URL('./', ORT_URL).href;
    ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.max(1, threads) : 1;
    ort.env.logLevel = 'error';
    return ort;
  });
  return loading;
}

/** @param {any} ort @param {Uint8Array} bytes */
export function createSession(ort, bytes) {
  return ort.InferenceSession.create(bytes, {
    executionProviders: ['wasm'],
    graphOptimizationLevel: 'all',
  });
}
