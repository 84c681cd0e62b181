// onnxruntime-web, loaded from the Voxline server beside this file, configured once per worker.
// Threads need cross-origin isolation (SharedArrayBuffer); without it the wasm runs single-threaded.
//
// The page fetches the runtime's wasm once (checked against its pinned sha256, kept in Cache Storage: loader.js)
// and hands the bytes to each worker, so no worker downloads it; the scripts come from the runtime's versioned
// URL folder (`/vendor/onnxruntime-web/<version>/`), which the browser caches for good.

/** Where the unversioned runtime is, for a page that passes no runtime (an older page, a test harness). */
const ORT_FALLBACK_BASE = new URL('../vendor/onnxruntime-web/', import.meta.url);
const ORT_MODULE = 'ort.wasm.min.mjs';

/** @type {Promise<any>|null} */
let loading = null;

/**
 * @param {number} threads wanted; capped to 1 when the worker is not cross-origin isolated
 * @param {{base: string, wasm: Uint8Array}|null} runtime the versioned URL folder and the checked wasm bytes
 */
export function loadOrt(threads, runtime = null) {
  const base = new URL(runtime?.base ?? ORT_FALLBACK_BASE);
  loading ??= import(new URL(ORT_MODULE, base).href).then((ort) => {
    ort.env.wasm.wasmPaths = base.href;
    if (runtime?.wasm) ort.env.wasm.wasmBinary = runtime.wasm;
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
