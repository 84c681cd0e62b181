// Where the Voxline core modules (web/voxline/) live on the server, for the bundled widget.
//
// The core finds its workers, worklets and vendored libraries with `new URL('./x.js', import.meta.url)`. Once
// bundled, `import.meta.url` would be the bundle's own URL (ESM) or nothing at all (the classic script), so the
// build (scripts/build-widget.mjs) rewrites `import.meta.url` in those modules to `coreModuleUrl` below, and the
// element points it at the server it talks to before it starts Voxline. Unbundled, nothing reads it.

/** A URL inside the server's `voxline/` folder; relative lookups from it land on the files esbuild left out. */
export let coreModuleUrl = '';

/** @param {string|URL} base the Voxline server's base URL (where `/voxline/`, `/vendor/`, `/wasm_models/` are) */
export function useServerBase(base) {
  coreModuleUrl = new URL('voxline/voxline.js', base).href;
}
