// One Silero VAD file in a fresh onnxruntime-web runtime (node, one thread, as in the page's listening worker): how
// long creating its session takes (the runtime's own start, a session of a one-node model, timed apart), the median
// of 300 frame runs, and the sum of the speech probabilities it gave (equal sums: the same numbers, frame by frame).
// Run it once per file and level, alternating, for a comparison:
//
//   node scripts/vad-session-ab.mjs FILE LEVEL [--with-rate]
//
// LEVEL is onnxruntime's `graphOptimizationLevel` (`all` for the published graph as the page created it before,
// `disabled` for silero-vad-v5-16k, optimized when built); `--with-rate` feeds the published graph's `sr` input.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ORT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', 'onnxruntime-web', 'dist',
  'ort.wasm.min.mjs');
/** web/voxline/ort.js's START_MODEL (y = Identity(x)). */
const START_MODEL = Buffer.from('CAgSB3ZveGxpbmU6NwoQCgF4EgF5IghJZGVudGl0eRIBd1oPCgF4EgoKCAgBEgQKAggBYg8KAXkSCgoICAESBAoCCAFCBAoAEBE=', 'base64');
const FRAMES = 300;

const [file, level, rateFlag] = process.argv.slice(2);
if (!file || !level) {
  console.error('usage: node scripts/vad-session-ab.mjs FILE LEVEL [--with-rate]');
  process.exit(2);
}
const ort = await import(ORT);
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
await ort.InferenceSession.create(START_MODEL, { graphOptimizationLevel: 'disabled' });
let started = performance.now();
const session = await ort.InferenceSession.create(readFileSync(file), { graphOptimizationLevel: level });
const createMs = performance.now() - started;
let state = new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]);
const rate = rateFlag === '--with-rate' ? { sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []) } : {};
let seed = 1;
const noise = () => ((seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5);
const times = [];
let sum = 0;
for (let i = 0; i < FRAMES; i++) {
  const frame = Float32Array.from({ length: 576 }, () => noise() * (i % 40 < 20 ? 0.6 : 0.02));
  started = performance.now();
  const out = await session.run({ input: new ort.Tensor('float32', frame, [1, 576]), state, ...rate });
  times.push(performance.now() - started);
  state = out.stateN;
  sum += out.output.data[0];
}
times.sort((a, b) => a - b);
console.log(JSON.stringify({ file: path.basename(file), level, create_ms: +createMs.toFixed(1),
  run_p50_ms: +times[FRAMES >> 1].toFixed(3), probability_sum: sum }));
