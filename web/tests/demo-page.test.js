// The demo page (web/index.html) preloads exactly the modules demo.js imports: one missing costs a round trip per
// import level on every visit, one too many a download the page never uses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

test('index.html preloads every module of demo.js and nothing else', async () => {
  const result = await esbuild.build({
    entryPoints: [path.join(root, 'web', 'demo.js')], bundle: true, write: false, metafile: true, format: 'esm',
    logLevel: 'silent', absWorkingDir: root,
  });
  const imported = Object.keys(result.metafile.inputs).map((file) => path.relative('web', file))
    .filter((file) => file !== 'demo.js').sort();
  const html = readFileSync(path.join(root, 'web', 'index.html'), 'utf8');
  const preloaded = [...html.matchAll(/<link rel="modulepreload" href="([^"]+)">/g)].map((m) => m[1]).sort();
  assert.ok(imported.length > 10, `esbuild found only ${imported.length} modules`);
  assert.deepEqual(preloaded, imported);
});
