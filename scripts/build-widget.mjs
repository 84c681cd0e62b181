// `npm run build`: the widget bundles, for the server (dist/) and for the `voxline-widget` npm package.
//
//   dist/voxline-widget.mjs   ES module (the element, Voxline, EVENTS); the server serves it at /voxline-widget.mjs
//   dist/widget.js            one classic script (IIFE) for the one-line embed, at /widget.js; exports on
//                             window.VoxlineWidget
//   packages/voxline-widget/dist/   the same two files, for the package (`npm pack ./packages/voxline-widget`, whose
//                             prepack runs this script); its package.json, types and README are sources beside them
//
// Only the page-side modules are bundled. The workers, worklets, onnxruntime-web, Pyodide, models and the intent
// wheel are fetched from the Voxline server by URL at run time (they are far too big, and a worker cannot come from
// the bundle anyway), so the core's `new URL('./x.js', import.meta.url)` must keep pointing at the server's
// `voxline/` folder: the plugin below rewrites `import.meta.url` in those modules to the element's server base.
import { copyFile, mkdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const coreDir = path.join(root, 'web', 'voxline') + path.sep;
const coreUrlModule = path.join(root, 'web', 'widget', 'core-url.js');
const outdir = path.join(root, 'dist');
const packageDir = path.join(root, 'packages', 'voxline-widget');
const BUNDLES = ['voxline-widget.mjs', 'widget.js'];

const readJson = async (file) => JSON.parse(await readFile(file, 'utf8'));
const pkg = await readJson(path.join(packageDir, 'package.json'));
const project = await readJson(path.join(root, 'package.json'));
// The package is released with the project: one version for the server, the page and the widget.
if (pkg.version !== project.version) {
  throw new Error(`packages/voxline-widget/package.json has version ${pkg.version}, the project ${project.version}`);
}

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
await rm(path.join(outdir, 'package.json'), { force: true }); // the package manifest this folder held before
await Promise.all([
  esbuild.build({ ...common, entryPoints: [path.join(root, 'web', 'widget', 'voxline-widget.js')],
    format: 'esm', outfile: path.join(outdir, 'voxline-widget.mjs') }),
  esbuild.build({ ...common, entryPoints: [path.join(root, 'web', 'widget', 'script-tag.js')],
    format: 'iife', globalName: 'VoxlineWidget', outfile: path.join(outdir, 'widget.js') }),
]);

// The package's copy. Whatever else was in its dist/ goes, so a pack never ships a stale file.
const packageDist = path.join(packageDir, 'dist');
await rm(packageDist, { recursive: true, force: true });
await mkdir(packageDist);
await Promise.all(BUNDLES.map((name) => copyFile(path.join(outdir, name), path.join(packageDist, name))));
console.log(`built ${path.relative(root, outdir)}/{${BUNDLES}} and their copy in ${path.relative(root, packageDist)}/`
  + ` (voxline-widget ${pkg.version})`);
