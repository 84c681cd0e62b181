// `voxline bench readings`, the decoding half: the browser's Whisper module (web/voxline/whisper.js) run by node
// on onnxruntime-web's wasm, over raw 16 kHz float32 clips, once per configuration of the page's settings.
// Input on stdin: {modelDir, lexicon, clips: [{path}], configs: {name: settingsOverrides}}.
// Output on stdout: {name: [{text, ids, confidence, guard, command, prompted, encodeMs, decodeMs, windowSecs,
// encodedSecs, ...}, ...]}
// in clip order.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
const ort = await import(path.join(root, 'node_modules/onnxruntime-web/dist/ort.node.min.mjs'));
const { Whisper, COMMAND_CONFIDENCE_MODEL } = await import(path.join(root, 'web/voxline/whisper.js'));
const { CommandGraph } = await import(path.join(root, 'web/voxline/grammar-decode.js'));
const { resolveSettings } = await import(path.join(root, 'web/voxline/settings.js'));

/** The page's settings for a configuration; `measureSupport` (the fit's) has `support` computed for every prompted
 * reading, whatever the model weighs. (`partialFirst` is not a setting: see below.) */
function settingsOf({ measureSupport, partialFirst, ...overrides }) {
  const settings = resolveSettings(overrides);
  if (!measureSupport) return settings;
  const model = settings.commandConfidenceModel ?? COMMAND_CONFIDENCE_MODEL;
  return { ...settings, commandConfidenceModel: { support: 0, ...model } };
}

const input = JSON.parse(fs.readFileSync(0, 'utf8'));
ort.env.wasm.numThreads = 1;
const options = { executionProviders: ['wasm'], graphOptimizationLevel: 'all' };
const session = (name) => ort.InferenceSession.create(fs.readFileSync(path.join(input.modelDir, name)), options);
const whisper = new Whisper(ort, await session('encoder.int8.onnx'), await session('decoder.int8.onnx'),
  JSON.parse(fs.readFileSync(path.join(input.modelDir, 'tokens.json'))));
whisper.setGraph(new CommandGraph(input.lexicon));
await whisper.transcribe(new Float32Array(16000), resolveSettings({})); // warm-up, as the page does

const out = Object.fromEntries(Object.keys(input.configs).map((name) => [name, []]));
for (const clip of input.clips) {
  const bytes = fs.readFileSync(clip.path);
  const audio = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  for (const [name, overrides] of Object.entries(input.configs)) { // alternating, clip by clip
    // `partialFirst` (0..1): first a partial decode of that share of the clip, as the page makes while the user
    // speaks, whose tokens are the final decode's drafts (whisper.js, "Drafts"), as the ASR worker passes them.
    const settings = settingsOf(overrides);
    const hint = overrides.partialFirst
      ? (await whisper.transcribe(audio.subarray(0, Math.floor(audio.length * overrides.partialFirst)), settings,
        () => false, false)).ids
      : null;
    const r = await whisper.transcribe(audio, settings, () => false, true, hint);
    out[name].push({ text: r.text, ids: r.ids, confidence: r.confidence, guard: r.guard, command: r.command,
      prompted: r.prompted, encodeMs: r.encodeMs, decodeMs: r.decodeMs, windowSecs: r.windowSecs,
      encodedSecs: r.encodedSecs, runs: r.runs, drafted: r.drafted, kept: r.kept });
  }
}
process.stdout.write(JSON.stringify(out));
