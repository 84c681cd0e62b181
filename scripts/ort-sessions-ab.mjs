// Two builds of the browser's Whisper side by side in onnxruntime-web (node, one thread): how long creating the two
// sessions takes in a fresh runtime (as in a page's worker: its wasm functions compiled on first call), how long a
// 2 s encoder run and 12 decoder steps take (the runtime's own start, a session of a one-node model, timed apart), and whether both builds compute the same numbers.
//
//   node scripts/ort-sessions-ab.mjs BASELINE_DIR CANDIDATE_DIR [--rounds N] [--baseline-level all]
//        [--candidate-level disabled]
//
// A folder holds encoder.int8.onnx and decoder.int8.onnx (e.g. an older `voxline models fetch` cache's
// models/whisper-tiny-en-onnx). The levels are onnxruntime's `graphOptimizationLevel`: the page uses `disabled` for a
// model the server's build optimized already (manifest `graph_optimization`), `all` otherwise. Prints one JSON object.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(import.meta.url);
const ORT = path.join(path.dirname(here), '..', 'node_modules', 'onnxruntime-web', 'dist', 'ort.wasm.min.mjs');
const SOT = [50257, 50362]; // <|startoftranscript|> <|notimestamps|> of tiny.en
const STEPS = 12;
const REPEATS = 15;

/** web/voxline/ort.js's START_MODEL (y = Identity(x)): its session starts the runtime, timed apart from the models. */
const START_MODEL = Buffer.from('CAgSB3ZveGxpbmU6NwoQCgF4EgF5IghJZGVudGl0eRIBd1oPCgF4EgoKCAgBEgQKAggBYg8KAXkSCgoICAESBAoCCAFCBAoAEBE=', 'base64');

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const samples = Float32Array.from({ length: 32000 }, (_, i) => Math.sin(i / 10) * 0.1 + ((i * 7919) % 101 - 50) / 3000);

/** One build in this (fresh) process: creation times, run medians, and the numbers it computed. */
async function child(dir, level) {
  const ort = await import(ORT);
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  const create = async (bytes) => {
    const started = performance.now();
    const session = await ort.InferenceSession.create(bytes, { graphOptimizationLevel: level });
    return [session, performance.now() - started];
  };
  const [, runtimeMs] = await create(START_MODEL);
  const [encoder, encoderMs] = await create(readFileSync(path.join(dir, 'encoder.int8.onnx')));
  const [decoder, decoderMs] = await create(readFileSync(path.join(dir, 'decoder.int8.onnx')));
  const feed = { samples: new ort.Tensor('float32', samples, [1, samples.length]) };
  // A build with the silent tail's inputs (whisper.js, "The encoder's silent tail"), run as Whisper's own encoder.
  if (encoder.inputNames.includes('tail_k')) {
    const empty = new ort.Tensor('float32', new Float32Array(0), [4, 1, 6, 0, 64]);
    Object.assign(feed, { gain_normalise: new ort.Tensor('float32', Float32Array.of(0), [1]),
      level_offset: new ort.Tensor('float32', Float32Array.of(0), [1]),
      tail_k: empty, tail_v: empty, tail_cross_k: empty, tail_cross_v: empty });
  }
  const encoderRuns = [];
  let cross;
  for (let i = 0; i < REPEATS; i++) {
    const started = performance.now();
    cross = await encoder.run(feed, ['cross_k', 'cross_v']);
    encoderRuns.push(performance.now() - started);
  }
  const decode = async () => {
    let past = new ort.Tensor('float32', new Float32Array(0), [4, 1, 6, 0, 64]);
    let pastV = past, tokens = SOT, logits = [];
    for (let step = 0; step < STEPS; step++) {
      const feeds = { tokens: new ort.Tensor('int64', BigInt64Array.from(tokens.map(BigInt)), [1, tokens.length]),
        past_k: past, past_v: pastV, cross_k: cross.cross_k, cross_v: cross.cross_v };
      // A build from before drafted tokens has no `logits_from` (its logits are the last position's anyway).
      if (decoder.inputNames.includes('logits_from')) feeds.logits_from = new ort.Tensor('int64', BigInt64Array.of(-1n), [1]);
      const out = await decoder.run(feeds);
      past = out.new_k; pastV = out.new_v;
      logits.push(...out.logits.data.slice(0, 64));
      tokens = [220 + 97 * step];
    }
    return logits;
  };
  const decoderRuns = [];
  let logits;
  for (let i = 0; i < REPEATS; i++) {
    const started = performance.now();
    logits = await decode();
    decoderRuns.push(performance.now() - started);
  }
  return { runtimeMs, encoderMs, decoderMs, encoderRunMs: median(encoderRuns.slice(2)), decoderStepsMs: median(decoderRuns.slice(2)),
    crossK: Array.from(cross.cross_k.data.slice(0, 4096)), logits };
}

function flag(name, fallback) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : fallback;
}

async function main() {
  if (process.argv[2] === '--child') {
    process.stdout.write(JSON.stringify(await child(process.argv[3], process.argv[4])));
    return;
  }
  const [baseline, candidate] = process.argv.slice(2, 4);
  if (!baseline || !candidate) throw new Error('usage: node scripts/ort-sessions-ab.mjs BASELINE_DIR CANDIDATE_DIR [--rounds N]');
  const rounds = Number(flag('--rounds', 3));
  const builds = { baseline: [baseline, flag('--baseline-level', 'all')], candidate: [candidate, flag('--candidate-level', 'disabled')] };
  const results = { baseline: [], candidate: [] };
  for (let round = 0; round < rounds; round++) {
    for (const [name, [dir, level]] of Object.entries(builds)) { // alternating, each in a fresh process
      results[name].push(JSON.parse(execFileSync(process.execPath, [here, '--child', dir, level], { maxBuffer: 1 << 26 })));
    }
  }
  const maxDiff = (key) => Math.max(...results.baseline[0][key].map((x, i) => Math.abs(x - results.candidate[0][key][i])));
  const report = Object.fromEntries(Object.entries(results).map(([name, runs]) => [name, {
    dir: builds[name][0], level: builds[name][1],
    runtime_start_ms_p50: median(runs.map((r) => r.runtimeMs)),
    create_ms_p50: { encoder: median(runs.map((r) => r.encoderMs)), decoder: median(runs.map((r) => r.decoderMs)),
      both: median(runs.map((r) => r.encoderMs + r.decoderMs)) },
    encoder_2s_run_ms_p50: median(runs.map((r) => r.encoderRunMs)),
    decoder_12_steps_ms_p50: median(runs.map((r) => r.decoderStepsMs)),
  }]));
  report.rounds = rounds;
  report.max_abs_diff = { cross_k: maxDiff('crossK'), logits: maxDiff('logits') };
  console.log(JSON.stringify(report, (k, v) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v), 1));
}

await main();
