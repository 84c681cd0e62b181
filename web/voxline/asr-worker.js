// The speech recognition worker: Whisper tiny.en (int8, onnxruntime-web wasm, threads when isolated).
// It reads turn audio from the capture ring by absolute sample index and answers decode requests one at a time.
// The final transcript must never wait behind a partial that nobody needs any more (see `enqueue`).
import { startOrt, createSession, epochNow, runtimeSpan } from './ort.js';
import { SampleRing } from './ring.js';
import { Whisper } from './whisper.js';
import { CommandGraph } from './grammar-decode.js';

let whisper, ring, settings;
/** @type {{id: number, final: boolean}|null} */
let current = null;
/** @type {any[]} */
const queue = [];
/** The token ids of the last decode and the turn (its first sample) it was of: drafts for the next decode of the
 * same turn, which has the same speech and more (whisper.js, "Drafts"). A partial cancelled for a final leaves the
 * tokens it had decoded. */
let last = { start: -1, ids: null };

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === 'runtime') await startOrt(msg.threads, msg.ort); // while the page reads the models
    else if (msg.type === 'init') await init(msg);
    else if (msg.type === 'block') ring.write(msg.samples);
    else if (msg.type === 'decode') enqueue(msg);
    else if (msg.type === 'cancel') cancel(msg.id);
    else if (msg.type === 'promote') promote(msg.id);
    else if (msg.type === 'lexicon') whisper.setGraph(msg.lexicon ? new CommandGraph(msg.lexicon) : null);
  } catch (error) {
    self.postMessage({ type: 'error', code: 'asr_failed', message: `Speech recognition failed: ${error.message}` });
  }
};

async function init(msg) {
  settings = msg.settings;
  ring = msg.ringBuffer ? new SampleRing(msg.ringBuffer) : SampleRing.allocate(settings.sampleRate * settings.ringSeconds, false);
  const ort = await startOrt(msg.threads, msg.ort);
  const table = JSON.parse(new TextDecoder().decode(msg.tokens));
  const sessionFrom = epochNow();
  const [encoder, decoder] = await Promise.all([createSession(ort, msg.encoder, { optimized: msg.graphOptimization }),
    createSession(ort, msg.decoder, { optimized: msg.graphOptimization })]);
  const timeline = { runtime: [runtimeSpan.from, runtimeSpan.to], session: [sessionFrom, epochNow()] };
  whisper = new Whisper(ort, encoder, decoder, table);
  self.postMessage({ type: 'ready', threads: ort.env.wasm.numThreads, timeline });
  // The first run of a session is slow (allocation, kernel set-up): pay it now, queued like any decode, so it
  // never delays `voxline:ready` and a real request waits for it only if it comes within the first second.
  queue.push({ warmUp: true, final: false });
  if (!current) drain();
}

/**
 * Scheduling: finals are never dropped and run in order; a final cancels a running partial (between decoder
 * steps) and discards a waiting one. At most one partial waits, the newest; it never cancels a running decode, so
 * under load partials still complete, just less often, and none is started while a final is due.
 */
function enqueue(request) {
  if (request.final) {
    for (let i = queue.length - 1; i >= 0; i--) if (!queue[i].final) queue.splice(i, 1);
    if (current && !current.final) current.cancelled = true;
  } else {
    if (queue.some((r) => r.final) || current?.final) return;
    queue.length = 0;
  }
  queue.push(request);
  if (!current) drain();
}

/** The page cancels a speculative final when the speaker goes on after the pause. */
function cancel(id) {
  if (current?.id === id) current.cancelled = true;
  const at = queue.findIndex((r) => r.id === id);
  if (at >= 0) queue.splice(at, 1);
}

/**
 * The page found that a partial decode, running or waiting, already has all the speech of a pause: it becomes that
 * pause's final decode (with the grammar's search, as any final), sparing a second decode behind it. Answers
 * `promoted: false` when the partial is gone (finished or replaced), so that the page asks for a decode of its own.
 */
function promote(id) {
  const request = current?.id === id && !current.cancelled ? current : queue.find((r) => r.id === id);
  if (request) {
    request.final = true;
    for (let i = queue.length - 1; i >= 0; i--) if (!queue[i].final) queue.splice(i, 1); // as a final would
  }
  self.postMessage({ type: 'promoted', id, promoted: Boolean(request) });
}

async function drain() {
  while (queue.length) {
    current = { ...queue.shift(), cancelled: false };
    const request = current;
    const started = performance.now();
    try {
      if (request.warmUp) {
        await whisper.transcribe(new Float32Array(settings.sampleRate), settings);
        continue;
      }
      const audio = ring.read(request.start, request.end);
      const hint = last.start === request.start ? last.ids : null;
      const result = await whisper.transcribe(audio, settings, () => request.cancelled, () => request.final, hint);
      // A cancelled decode keeps the drafts it was given where it had got less far than they go.
      const further = !result.cancelled || result.ids?.length > (hint?.length ?? 0);
      if (result.ids?.length && further) last = { start: request.start, ids: result.ids };
      if (!result.cancelled) {
        self.postMessage({ type: 'transcript', id: request.id, final: request.final, start: request.start,
          end: request.end, queuedMs: performance.timeOrigin + started - request.sentAtEpochMs, ...result });
      }
    } catch (error) {
      self.postMessage({ type: 'error', code: 'asr_failed', id: request.id, message: `Speech recognition failed: ${error.message}` });
    }
  }
  current = null;
}
