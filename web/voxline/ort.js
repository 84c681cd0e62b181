// onnxruntime-web, loaded from the Voxline server beside this file, configured once per worker.
// Threads need cross-origin isolation (SharedArrayBuffer); without it the wasm runs single-threaded.
//
// The page fetches the runtime's wasm once (checked against its pinned sha256, kept in Cache Storage: loader.js),
// compiles it once and hands the module to each worker, so no worker downloads, copies or compiles it; the scripts
// come from the runtime's versioned URL folder (`/vendor/onnxruntime-web/<version>/`), which the browser caches for
// good.

import { instantiateOnce } from './loader.js';

/** Where the unversioned runtime is, for a page that passes no runtime (an older page, a test harness). */
const ORT_FALLBACK_BASE = new URL('../vendor/onnxruntime-web/', import.meta.url);
const ORT_MODULE = 'ort.wasm.min.mjs';

/** @type {Promise<any>|null} */
let loading = null;

/**
 * @param {number} threads wanted; capped to 1 when the worker is not cross-origin isolated
 * @param {{base: string, module?: WebAssembly.Module, wasm?: Uint8Array}|null} runtime the versioned URL folder and
 *   the checked wasm, compiled (`module`, see instantiateOnce) or as bytes
 */
export function loadOrt(threads, runtime = null) {
  const base = new URL(runtime?.base ?? ORT_FALLBACK_BASE);
  loading ??= import(new URL(ORT_MODULE, base).href).then((ort) => {
    ort.env.wasm.wasmPaths = base.href;
    if (runtime?.module) {
      // onnxruntime-web takes its wasm as bytes (`env.wasm.wasmBinary`) and no compiled module: it instantiates
      // with `WebAssembly.instantiate(bytes, imports)`, and its threads with the module that gives.
      instantiateOnce(runtime.module, 'instantiate');
      ort.env.wasm.wasmBinary = new Uint8Array(8); // a stand-in: instantiateOnce gives the module instead
    } else if (runtime?.wasm) {
      ort.env.wasm.wasmBinary = runtime.wasm;
    }
    ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.max(1, threads) : 1;
    ort.env.logLevel = 'error';
    return ort;
  });
  return loading;
}

/**
 * The smallest model there is (y = Identity(x), 74 bytes, written with onnx's helper): creating a session of it makes
 * onnxruntime instantiate its wasm, start its threads and set up its runtime, the bulk of a worker's start-up.
 */
const START_MODEL = Uint8Array.from(
  atob('CAgSB3ZveGxpbmU6NwoQCgF4EgF5IghJZGVudGl0eRIBd1oPCgF4EgoKCAgBEgQKAggBYg8KAXkSCgoICAESBAoCCAFCBAoAEBE='),
  (c) => c.charCodeAt(0));

/** @type {Promise<any>|null} */
let starting = null;

/** A moment as epoch ms (`performance.timeOrigin` + now), comparable across the page and its workers. */
export const epochNow = () => performance.timeOrigin + performance.now();

/** When this worker's runtime started starting, and when it was up (epoch ms; see `startOrt`). */
export const runtimeSpan = { from: 0, to: 0 };

/**
 * Load onnxruntime-web and start its runtime now (`loadOrt`, then a session of START_MODEL), so that a worker does
 * it while the page is still reading the models; a model's session then costs only its own graph. Once per worker.
 * @param {number} threads @param {{base: string, wasm: Uint8Array}|null} runtime as for loadOrt
 */
export function startOrt(threads, runtime = null) {
  runtimeSpan.from ||= epochNow();
  starting ??= loadOrt(threads, runtime).then(async (ort) => {
    // Nothing to optimize in it: the optimizer off, so that none of its code is compiled for nothing.
    await (await createSession(ort, START_MODEL, { optimized: 'identity' })).release();
    runtimeSpan.to = epochNow();
    return ort;
  });
  return starting;
}

/**
 * @param {any} ort @param {Uint8Array} bytes
 * @param {{optimized?: string|null}} [model] `optimized`: the level onnxruntime's optimizer already ran at when the
 *   server built the model (the model manifest's `graph_optimization`, voxline/convert/optimize.py). Such a session
 *   starts with the optimizer off, which spares about half of its start-up here; any other model is optimized here
 *   (`all`).
 */
export function createSession(ort, bytes, { optimized = null } = {}) {
  return ort.InferenceSession.create(bytes, {
    executionProviders: ['wasm'],
    graphOptimizationLevel: optimized ? 'disabled' : 'all',
  });
}
