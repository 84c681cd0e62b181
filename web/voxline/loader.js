// Model and runtime loading: fetched once with progress, kept in Cache Storage, checked against the manifest's
// sha256 (the runtimes' digests are pinned in the server's voxline/server/runtimes.py, the models' in its manifest).
//
// The cache key is the URL plus the digest, so a new version is a new entry and never a stale hit; an entry whose
// bytes no longer match its digest is deleted and fetched again. Every failure surfaces as a ModelLoadError with a
// code the page shows in `voxline:error`, never as a hang. Workers use this module too (the intents worker loads
// Pyodide's wasm through it).

export const CACHE_NAME = 'voxline-models-v1';
/** The runtimes' wasm (onnxruntime-web, Pyodide) are kept apart from the models. */
export const RUNTIME_CACHE_NAME = 'voxline-runtimes-v1';

export class ModelLoadError extends Error {
  /** @param {'model_download_failed'|'model_corrupt'|'model_manifest_failed'|'runtime_download_failed'|'runtime_corrupt'} code */
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/**
 * What one page load fetched, file by file: for `voxline:ready` and the load benchmark.
 * `bytes` are the file's own (decoded) bytes; whether they crossed the network is `from`.
 */
export class LoadLedger {
  constructor() {
    /** @type {{name: string, bytes: number, from: 'cache'|'network', ms: number, cache?: 'http'|'storage'}[]} */
    this.files = [];
  }

  /**
   * @param {string} name @param {number} bytes @param {'cache'|'network'} from @param {number} ms
   * @param {'http'|'storage'} [cache] which cache a file found there came from: Cache Storage, or (a runtime's wasm
   *   on the server's own origin) the HTTP cache
   */
  add(name, bytes, from, ms, cache = from === 'cache' ? 'storage' : undefined) {
    this.files.push({ name, bytes, from, ms: Math.round(ms), ...(cache && { cache }) });
  }

  /** @returns {{network: number, cache: number}} bytes of files downloaded and of files found in a cache */
  totals() {
    const sum = (from) => this.files.filter((f) => f.from === from).reduce((s, f) => s + f.bytes, 0);
    return { network: sum('network'), cache: sum('cache') };
  }
}

/** @type {Record<'model'|'runtime', {cache: string, failed: string, corrupt: string, fix: string}>} */
const KINDS = {
  model: { cache: CACHE_NAME, failed: 'model_download_failed', corrupt: 'model_corrupt', fix: '`voxline models verify`' },
  runtime: { cache: RUNTIME_CACHE_NAME, failed: 'runtime_download_failed', corrupt: 'runtime_corrupt', fix: '`npm ci` (or `bash scripts/setup.sh`)' },
};

/**
 * @typedef {{name: string, url: string, sha256: string, size: number}} ModelFile
 * @typedef {{name: string, role: string, files: ModelFile[]}} ModelEntry
 */

/** @param {URL|string} base the server's base URL */
export async function fetchManifest(base) {
  const url = new URL('wasm_models/manifest.json', base);
  let response;
  try {
    response = await fetch(url, { cache: 'no-cache' });
  } catch (error) {
    throw new ModelLoadError('model_manifest_failed', `Could not reach the Voxline server at ${url.origin} (${error.message}). Check that it is running, then reload.`);
  }
  if (!response.ok) {
    throw new ModelLoadError('model_manifest_failed', `The model list at ${url} answered HTTP ${response.status}. Run \`voxline models fetch\` on the server, then reload.`);
  }
  return /** @type {{version: string, models: ModelEntry[]}} */ (await response.json());
}

export async function sha256Hex(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

async function openCache(name = CACHE_NAME) {
  try {
    return await caches.open(name);
  } catch {
    return null; // Cache Storage is unavailable (opaque origin, storage disabled): download every time
  }
}

/**
 * Read a response body, reporting bytes as they arrive.
 * @param {Response} response
 * @param {(bytes: number) => void} onBytes
 */
async function readWithProgress(response, onBytes) {
  const reader = response.body.getReader();
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received += value.length;
    onBytes(value.length);
  }
  const out = new Uint8Array(received);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/**
 * Load one file: from Cache Storage when its digest still matches, else from the network.
 * @param {ModelFile} file
 * @param {URL|string} base
 * @param {(bytes: number) => void} onBytes
 * @param {{kind?: 'model'|'runtime', ledger?: LoadLedger|null, compile?: boolean}} options a runtime is cached and
 *   reported apart; with `compile` a wasm that is downloaded is also compiled streaming as it arrives (`module`, only
 *   once its bytes are checked)
 * @returns {Promise<{bytes: Uint8Array, fromCache: boolean, module?: Promise<WebAssembly.Module|null>}>}
 */
export async function loadFile(file, base, onBytes = () => {}, { kind = 'model', ledger = null, compile = false } = {}) {
  const started = performance.now();
  const { cache: cacheName, failed, corrupt, fix } = KINDS[kind];
  const url = new URL(file.url, base);
  const key = cacheKey(url, file.sha256);
  const cache = await openCache(cacheName);
  const cached = await cache?.match(key);
  if (cached) {
    const bytes = new Uint8Array(await cached.arrayBuffer());
    if ((await sha256Hex(bytes)) === file.sha256) {
      onBytes(bytes.length);
      ledger?.add(file.name, bytes.length, 'cache', performance.now() - started);
      return { bytes, fromCache: true };
    }
    await cache.delete(key); // altered in the cache: never used, fetched again below
  }
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new ModelLoadError(failed, `Downloading ${file.name} failed (${error.message}). Check the connection to ${url.origin} and reload.`);
  }
  if (!response.ok) {
    throw new ModelLoadError(failed, `Downloading ${file.name} answered HTTP ${response.status}. Run ${fix} on the server, then reload.`);
  }
  // The browser keeps the compiled code of a streaming compile beside the HTTP cache's entry (see compileRuntimeFile).
  const module = compile ? WebAssembly.compileStreaming(response.clone()).catch(() => null) : undefined;
  const bytes = await readWithProgress(response, onBytes);
  const actual = await sha256Hex(bytes);
  if (actual !== file.sha256) {
    throw new ModelLoadError(corrupt, `${file.name} arrived altered (sha256 ${actual.slice(0, 12)}…, expected ${file.sha256.slice(0, 12)}…); it was not used or cached. Reload to download it again; if it persists, run ${fix} on the server.`);
  }
  try {
    await cache?.put(key, new Response(bytes, { headers: { 'content-type': contentType(file.name) } }));
  } catch {
    // A full quota only costs a download next time.
  }
  ledger?.add(file.name, bytes.length, 'network', performance.now() - started);
  return { bytes, fromCache: false, module };
}

/** The Cache Storage key of a file: its URL plus its digest, so a new version is a new entry. */
function cacheKey(url, sha256) {
  return `${url.href}${url.search ? '&' : '?'}sha256=${sha256}`;
}

/** A wasm is cached as `application/wasm`, which compiling it streaming from its cache entry needs. */
function contentType(name) {
  return name.endsWith('.wasm') ? 'application/wasm' : 'application/octet-stream';
}

/**
 * Load one runtime binary (a wasm) of the manifest's `runtimes`: checked and cached as a model is.
 * @param {{files: Record<string, {url: string, sha256: string}>}} runtime the manifest's entry for one package
 * @param {string} name the file, e.g. `ort-wasm-simd-threaded.wasm`
 * @param {URL|string} base
 * @param {LoadLedger|null} ledger
 */
export async function loadRuntimeFile(runtime, name, base, ledger = null) {
  const entry = runtime?.files?.[name];
  if (!entry) throw new ModelLoadError('model_manifest_failed', `The server's manifest lists no runtime file ${name}; update the server, then reload.`);
  return (await loadFile({ name, url: entry.url, sha256: entry.sha256, size: 0 }, base, () => {}, { kind: 'runtime', ledger })).bytes;
}

/**
 * Load every file of the given models, reporting overall progress in 0..1.
 * @param {ModelEntry[]} models
 * @param {URL|string} base
 * @param {(fraction: number, loaded: number, total: number) => void} onProgress
 * @returns {Promise<Record<string, Record<string, Uint8Array>>>} model name → file name → bytes
 */
export async function loadModels(models, base, onProgress = () => {}, ledger = null) {
  const total = models.flatMap((m) => m.files).reduce((sum, f) => sum + f.size, 0);
  let loaded = 0;
  const report = (n) => {
    loaded += n;
    onProgress(total ? Math.min(1, loaded / total) : 1, loaded, total);
  };
  const out = {};
  await Promise.all(models.map(async (model) => {
    out[model.name] = {};
    await Promise.all(model.files.map(async (file) => {
      out[model.name][file.name] = (await loadFile(file, base, report, { ledger })).bytes;
    }));
  }));
  onProgress(1, total, total);
  return out;
}

/**
 * A runtime's wasm compiled once for every worker of the page: a `WebAssembly.Module` posted to a worker is shared,
 * not copied, so the workers neither copy the bytes nor compile and optimise the same code each.
 *
 * Every module is compiled streaming from a response, and its bytes are checked against the pin meanwhile: a module
 * whose bytes differ is dropped before any worker gets it. Where the bytes come from, first that answers:
 *
 * 1. The HTTP cache, on a page of the server's own origin (`only-if-cached` never reaches the network, and is
 *    refused cross-origin): the browser keeps the code it compiled beside the HTTP cache's entry (Chromium does so
 *    for a streaming compile from an HTTP response, not from Cache Storage), so a returning visit neither compiles
 *    nor lazily compiles the runtime again (onnxruntime, on an on-disk profile: ready 1.05-1.11 → 0.76-0.82 s from
 *    the second return on). An off-the-record profile's HTTP cache (in memory) answers too but keeps no compiled
 *    code: there this is ~7 % slower than Cache Storage (README, "Page load", the fourth round).
 * 2. Cache Storage (`RUNTIME_CACHE_NAME`), as for the models: an altered entry is deleted and the file downloaded
 *    again. An entry cached without the wasm content type (an older page's) is rewritten once.
 * 3. The network: compiled as it arrives, then kept in Cache Storage (and in the HTTP cache, for 1).
 * @param {{files: Record<string, {url: string, sha256: string}>}} runtime the manifest's entry for one package
 * @param {string} name the file, e.g. `ort-wasm-simd-threaded.wasm`
 * @param {URL|string} base
 * @param {LoadLedger|null} ledger
 * @param {{onDownload?: () => void}} [options] `onDownload`: called when neither cache has the file and it is
 *   downloaded (so a caller that would wait for a cached runtime before other downloads need not wait for this one)
 * @returns {Promise<WebAssembly.Module>}
 */
export async function compileRuntimeFile(runtime, name, base, ledger = null, { onDownload = () => {} } = {}) {
  const entry = runtime?.files?.[name];
  if (!entry) throw new ModelLoadError('model_manifest_failed', `The server's manifest lists no runtime file ${name}; update the server, then reload.`);
  const started = performance.now();
  const url = new URL(entry.url, base);
  const fromHttpCache = await compileChecked(await fetchIfCached(url), entry.sha256);
  if (fromHttpCache) {
    ledger?.add(name, fromHttpCache.bytes.byteLength, 'cache', performance.now() - started, 'http');
    return fromHttpCache.module;
  }
  const key = cacheKey(url, entry.sha256);
  const cache = await openCache(RUNTIME_CACHE_NAME);
  const cached = await cache?.match(key);
  if (cached) {
    // An entry an older page cached as `application/octet-stream` cannot be compiled streaming: read, then re-kept.
    const streaming = cached.headers.get('content-type') === 'application/wasm';
    const checked = await compileChecked(cached, entry.sha256, streaming);
    if (checked) {
      if (!streaming) {
        await cache.put(key, new Response(checked.bytes, { headers: { 'content-type': contentType(name) } })).catch(() => {});
      }
      ledger?.add(name, checked.bytes.byteLength, 'cache', performance.now() - started);
      return checked.module;
    }
    await cache.delete(key); // altered: never used, fetched again below
  }
  onDownload();
  const downloaded = await loadFile({ name, url: entry.url, sha256: entry.sha256, size: 0 }, base, () => {},
    { kind: 'runtime', ledger, compile: true });
  return (await downloaded.module) ?? WebAssembly.compile(downloaded.bytes);
}

/**
 * For a runtime that takes no compiled module (it instantiates its wasm from bytes or a response itself): until its
 * one call of `WebAssembly[method]` (`instantiate` or `instantiateStreaming`), that function instantiates `module`
 * instead of what it is given (a stand-in), then is itself again. A call with a module (a runtime's threads, given
 * the module the first call returned) passes through.
 * @param {WebAssembly.Module} module
 * @param {'instantiate'|'instantiateStreaming'} method
 * @returns {() => void} puts the function back if it was never called
 */
export function instantiateOnce(module, method) {
  const original = WebAssembly[method];
  const restore = () => { WebAssembly[method] = original; };
  WebAssembly[method] = function (source, imports) {
    if (source instanceof WebAssembly.Module) return original.call(WebAssembly, source, imports);
    restore();
    return WebAssembly.instantiate(module, imports).then((instance) => ({ instance, module }));
  };
  return restore;
}

/**
 * `url` from the HTTP cache alone, or null: on another origin, when it is not cached, or when the browser refuses.
 * @param {URL} url
 * @returns {Promise<Response|null>}
 */
async function fetchIfCached(url) {
  if (url.origin !== self.location.origin) return null;
  try {
    const response = await fetch(url, { cache: 'only-if-cached', mode: 'same-origin' });
    return response.ok ? response : null;
  } catch {
    return null; // not cached (a network error, by the fetch standard)
  }
}

/**
 * Compile a wasm response (streaming when it can) while checking its bytes; null when they differ from `sha256`,
 * the module then dropped unused.
 * @param {Response|null} response
 * @param {string} sha256
 * @param {boolean} streaming
 * @returns {Promise<{module: WebAssembly.Module, bytes: ArrayBuffer}|null>}
 */
async function compileChecked(response, sha256, streaming = true) {
  if (!response) return null;
  const [module, bytes] = await Promise.all([
    streaming ? WebAssembly.compileStreaming(response.clone()).catch(() => null) : null, response.arrayBuffer()]);
  if ((await sha256Hex(bytes)) !== sha256) return null;
  return { module: module ?? await WebAssembly.compile(bytes), bytes };
}
