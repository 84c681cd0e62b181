// The `voxline-widget` npm package (packages/voxline-widget/): its manifest, its hand-written types against the
// JavaScript they describe, and a TypeScript consumer compiled against those types. The packed tarball embedded in
// Chromium is e2e/test_widget_package.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EVENTS } from '../voxline/events.js';
import { PROTOCOL_VERSION } from '../voxline/link.js';
import { DEFAULTS } from '../voxline/settings.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const packageDir = path.join(root, 'packages', 'voxline-widget');
const read = (...parts) => readFileSync(path.join(...parts), 'utf8');
const manifest = JSON.parse(read(packageDir, 'package.json'));
const types = read(packageDir, 'types', 'voxline-widget.d.ts');

/** The body of `interface name {...}` or `name: Readonly<{...}>` in the types (none of them nests braces). */
function block(opening) {
  const start = types.indexOf(opening);
  assert.notEqual(start, -1, `the types have no ${opening}`);
  return types.slice(start + opening.length, types.indexOf('}', start + opening.length));
}

/** `key: value;` pairs of a block, quotes taken off; comments skipped. */
function members(body) {
  const pairs = [...body.replace(/\/\*\*[\s\S]*?\*\//g, '').matchAll(/^\s*'?([\w:-]+)'?\??:\s*([^;]+);/gm)];
  return Object.fromEntries(pairs.map(([, key, value]) => [key, value.trim().replace(/^'(.*)'$/, '$1')]));
}

test('the types name exactly the events of events.js, each with its detail', () => {
  assert.deepEqual(members(block('export declare const EVENTS: Readonly<{')), { ...EVENTS });
  const eventMap = members(block('export interface VoxlineEventMap {'));
  assert.deepEqual(Object.keys(eventMap).sort(), Object.values(EVENTS).sort());
  for (const [name, type] of Object.entries(eventMap)) {
    const detail = type.match(/^CustomEvent<(\w+)>$/)?.[1];
    assert.ok(detail, `${name}: ${type}`);
    assert.match(types, new RegExp(`export interface ${detail} extends VoxlineEventBase \\{`), name);
  }
});

test('VoxlineSettings has every setting of settings.js, with its type', () => {
  const declared = members(block('export interface VoxlineSettings {'));
  assert.deepEqual(Object.keys(declared).sort(), Object.keys(DEFAULTS).sort());
  for (const [name, value] of Object.entries(DEFAULTS)) {
    if (value === null) assert.match(declared[name], /^\w+ \| null$/, name); // an object setting, off by default
    else assert.equal(declared[name], typeof value, name);
  }
});

test('the package is the project version, depends on nothing, and names the protocol it speaks', () => {
  const project = JSON.parse(read(root, 'package.json'));
  assert.equal(manifest.name, 'voxline-widget');
  assert.equal(manifest.version, project.version);
  assert.equal(project.private, true, 'the root package is never published');
  assert.equal(manifest.private, undefined);
  for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'bundleDependencies']) {
    assert.equal(manifest[field], undefined, `${field}: the bundles carry everything`);
  }
  assert.equal(manifest.voxline.protocol, PROTOCOL_VERSION);
  const [minor] = project.version.match(/^\d+\.\d+/);
  assert.equal(manifest.voxline.server, `>=${minor}.0 <${minor.replace(/\d+$/, (n) => Number(n) + 1)}.0`);
  const readme = read(packageDir, 'README.md');
  const row = `| ${minor}.x | ${minor}.x | version ${PROTOCOL_VERSION} (`;
  assert.ok(readme.includes(row), `the README's table of servers has ${row}`);
  for (const name of Object.values(EVENTS)) assert.ok(readme.includes(`\`${name}\``), `the README explains ${name}`);
});

test('exports, types and files point at the built bundles and the types, all of them packed', () => {
  const build = read(root, 'scripts', 'build-widget.mjs');
  const bundles = JSON.parse(build.match(/const BUNDLES = (\[[^\]]*\]);/)[1].replaceAll("'", '"'));
  const targets = [manifest.main, manifest.module, manifest.types];
  for (const entry of Object.values(manifest.exports)) {
    targets.push(...(typeof entry === 'string' ? [entry] : Object.values(entry)));
  }
  const packed = new Set([...manifest.files, 'package.json']);
  for (const target of targets) assert.ok(packed.has(target.replace(/^\.\//, '')), `${target} is not in files`);
  assert.deepEqual(manifest.files.filter((f) => f.startsWith('dist/')).sort(), bundles.map((b) => `dist/${b}`).sort());
  for (const file of manifest.files.filter((f) => !f.startsWith('dist/'))) read(packageDir, file); // sources exist
  assert.equal(manifest.exports['.'].types, manifest.types);
  assert.equal(manifest.exports['.'].default, './dist/voxline-widget.mjs');
  assert.equal(manifest.exports['./widget.js'].default, './dist/widget.js');
});

test('a TypeScript consumer compiles against the types as installed (tsc --noEmit)', () => {
  let tsc;
  try {
    tsc = createRequire(path.join(root, 'package.json')).resolve('typescript/bin/tsc');
  } catch {
    assert.fail('typescript is missing from node_modules: it is a pinned devDependency, run `npm ci` (setup.sh does)');
  }
  const project = mkdtempSync(path.join(tmpdir(), 'voxline-widget-types-'));
  try {
    mkdirSync(path.join(project, 'node_modules'));
    // Resolved through the package's own `exports`, as after `npm install voxline-widget`.
    symlinkSync(packageDir, path.join(project, 'node_modules', 'voxline-widget'), 'dir');
    cpSync(path.join(root, 'web', 'tests', 'types', 'consumer.ts'), path.join(project, 'consumer.ts'));
    writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { target: 'es2022', module: 'esnext', moduleResolution: 'bundler', lib: ['es2022', 'dom'],
        strict: true, noEmit: true, types: [], skipLibCheck: false },
      files: ['consumer.ts'],
    }));
    try {
      execFileSync(process.execPath, [tsc, '-p', project], { cwd: project, encoding: 'utf8', timeout: 90000 });
    } catch (error) {
      assert.fail(`tsc refused the consumer:\n${error.stdout}${error.stderr}`);
    }
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
