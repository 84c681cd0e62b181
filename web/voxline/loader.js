// Model loading: fetched once with progress, kept in Cache Storage, checked against the manifest's sha256.
//
// The cache key is the URL plus the digest, so a new model version is a new entry and never a stale hit; an
// entry whose bytes no longer match its digest is deleted and fetched again. Every failure surfaces as a
// ModelLoadError with a code the page shows in `voxline:error`, never as a hang.

export const CACHE_NAME = 'voxline-models-v1';

export class ModelLoadError extends Error {
  /** @param {'model_download_failed'|'model_corrupt'|'model_manifest_failed'} code */
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

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

async function openCache() {
  try {
    return await caches.open(CACHE_NAME);
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
 * @returns {Promise<{bytes: Uint8Array, fromCache: boolean}>}
 */
export async function loadFile(file, base, onBytes) {
  const url = new URL(file.url, base);
  const key = `${url.href}?sha256=${file.sha256}`;
  const cache = await openCache();
  const cached = await cache?.match(key);
  if (cached) {
    const bytes = new Uint8Array(await cached.arrayBuffer());
    if ((await sha256Hex(bytes)) === file.sha256) {
      onBytes(bytes.length);
      return { bytes, fromCache: true };
    }
    await cache.delete(key);
  }
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new ModelLoadError('model_download_failed', `Downloading ${file.name} failed (${error.message}). Check the connection to ${url.origin} and reload.`);
  }
  if (!response.ok) {
    throw new ModelLoadError('model_download_failed', `Downloading ${file.name} answered HTTP ${response.status}. Run \`voxline models verify\` on the server, then reload.`);
  }
  const bytes = await readWithProgress(response, onBytes);
  const actual = await sha256Hex(bytes);
  if (actual !== file.sha256) {
    throw new ModelLoadError('model_corrupt', `${file.name} arrived altered (sha256 ${actual.slice(0, 12)}…, expected ${file.sha256.slice(0, 12)}…); it was not used or cached. Reload to download it again; if it persists, run \`voxline models verify\` on the server.`);
  }
  try {
    await cache?.put(key, new Response(bytes, { headers: { 'content-type': 'application/octet-stream' } }));
  } catch {
    // A full quota only costs a download next time.
  }
  return { bytes, fromCache: false };
}

/**
 * Load every file of the given models, reporting overall progress in 0..1.
 * @param {ModelEntry[]} models
 * @param {URL|string} base
 * @param {(fraction: number, loaded: number, total: number) => void} onProgress
 * @returns {Promise<Record<string, Record<string, Uint8Array>>>} model name → file name → bytes
 */
export async function loadModels(models, base, onProgress = () => {}) {
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
      out[model.name][file.name] = (await loadFile(file, base, report)).bytes;
    }));
  }));
  onProgress(1, total, total);
  return out;
}
