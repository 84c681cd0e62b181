// `npm run build`: the widget bundles in dist/, which is itself the `voxline-widget` npm package.
//
//   dist/voxline-widget.mjs   ES module (the element, Voxline, EVENTS)
//   dist/widget.js            one classic script (IIFE) for the one-line embed; exports on window.VoxlineWidget
//   dist/package.json         the package manifest (`npm pack ./dist`)
//
// Only the page-side modules are bundled. The workers, worklets, onnxruntime-web, Pyodide, models and the intent
// wheel are fetched from the Voxline server by URL at run time (they are far too big, and a worker cannot come from
// the bundle anyway), so the core's `new URL('./x.js', import.meta.url)` must keep pointing at the server's
// `voxline/` folder: the plugin below rewrites `import.meta.url` in those modules to the element's server base.
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const coreDir = path.join(root, 'web', 'voxline') + path.sep;
const coreUrlModule = path.join(root, 'web', 'widget', 'core-url.js');
const outdir = path.join(root, 'dist');
const pkg = JSON.parse(await readFile(path.join(root, 'package.json'), 'utf8'));

/** @type {esbuild.Plugin} */
const coreModuleUrl = {
  name: 'voxline-core-module-url',
  setup(build) {
    build.onLoad({ filter: /\.js$/ }, async (args) => {
      if (!args.path.startsWith(coreDir)) return undefined;
      const source = await readFile(args.path, 'utf8');
      if (!source.includes('import.meta.url')) return undefined;
      const contents = `import { coreModuleUrl as __voxlineCoreUrl } from ${JSON.stringify(coreUrlModule)};\n`
        + source.replaceAll('import.meta.url', '__voxlineCoreUrl');
      return { contents, loader: 'js', resolveDir: path.dirname(args.path) };
    });
  },
};

const common = {
  bundle: true,
  minify: true,
  legalComments: 'none',
  // Private class fields, static blocks and `??=` need no lowering here; WebCodecs and AudioWorklet already do.
  target: ['chrome111', 'edge111', 'firefox113', 'safari16.4'],
  plugins: [coreModuleUrl],
  banner: { js: `/* voxline-widget ${pkg.version} (MIT) */` },
  logLevel: 'warning',
};

await mkdir(outdir, { recursive: true });
await Promise.all([
  esbuild.build({ ...common, entryPoints: [path.join(root, 'web', 'widget', 'voxline-widget.js')],
    format: 'esm', outfile: path.join(outdir, 'voxline-widget.mjs') }),
  esbuild.build({ ...common, entryPoints: [path.join(root, 'web', 'widget', 'script-tag.js')],
    format: 'iife', globalName: 'VoxlineWidget', outfile: path.join(outdir, 'widget.js') }),
]);

const manifest = {
  name: 'voxline-widget',
  version: pkg.version,
  description: 'The Voxline voice assistant as one custom element, <voxline-assistant> (talks to a Voxline server)',
  license: pkg.license,
  type: 'module',
  main: './voxline-widget.mjs',
  module: './voxline-widget.mjs',
  exports: { '.': './voxline-widget.mjs', './widget.js': './widget.js' },
  files: ['voxline-widget.mjs', 'widget.js'],
  sideEffects: true,
};
await writeFile(path.join(outdir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
console.log(`built ${path.relative(root, outdir)}/voxline-widget.mjs and widget.js (voxline-widget ${pkg.version})`);
