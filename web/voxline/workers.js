// Module workers served beside this file. A page on another origin (the embedded widget) may not start a worker
// from our origin directly, so it gets a same-origin blob that imports the real script (CORS permitting).

/** @param {string} file relative to this folder */
export function spawnWorker(file) {
  const url = new URL(file, import.meta.url);
  if (url.origin === location.origin) return new Worker(url, { type: 'module' });
  const blob = new Blob([`import ${JSON.stringify(url.href)};`], { type: 'text/javascript' });
  return new Worker(URL.createObjectURL(blob), { type: 'module' });
}
