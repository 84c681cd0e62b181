// The listening worker: reads the capture ring, runs Silero VAD on every 32 ms frame, drives the endpointer,
// asks smart-turn whether a pause ends the turn, and Opus-encodes the audio of each turn with WebCodecs.
// It posts endpointing events (with absolute sample positions) to the page; it never decodes speech.
// smart-turn runs in a worker of its own (turn-worker.js, `turnWorker`), so the detector reads on meanwhile; its
// answer is applied once the detector has read the audio that came in before it (see `answer`).
// smart-turn comes after `ready` (`turn-model`): the page is ready with the detector alone, and until smart-turn is
// up every pause is left to the hangover, the endpointer's answer when smart-turn says nothing.
import { Endpointer } from './endpointer.js';
import { startOrt, createSession, epochNow, runtimeSpan } from './ort.js';
import { SampleRing } from './ring.js';
import { TurnAudioEncoder } from './opus.js';
import { spawnWorker } from './workers.js';

const FRAME = 512; // Silero v5 at 16 kHz
const CONTEXT = 64; // samples of the previous frame Silero v5 expects in front of each frame
const TURN_WINDOW = 8 * 16000; // smart-turn reads the last 8 s

let ort, vad, turn, ring, endpointer, settings, encoder;
/** @type {Worker|null} smart-turn's own worker (null: smart-turn runs here, `turn`) */
let turnWorker = null;
/** smart-turn is loaded and warm (in its worker or here): pauses are asked about from then on. */
let turnReady = false;
let position, running = false;
/** @typedef {{state: any, context: Float32Array, lag: number}} VadStream Silero's recurrent state and the 64 samples
 * before its next frame, for a stream whose frames end `lag` samples before the main stream's. */
/** @type {VadStream[]} the main stream (lag 0: the frame just read), then the onset streams (`vadOnsetPhases`) */
let streams = [];
/** Settles once the detector's first run (its warm-up) is done: `listen` waits for it. */
let warmedUp = Promise.resolve();
/** Counts `listen` and `stop` messages: a `listen` still waiting for the warm-up when a `stop` came does nothing. */
let listenGeneration = 0;

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === 'runtime') await startOrt(1, msg.ort); // while the page reads the models
    else if (msg.type === 'init') await init(msg);
    else if (msg.type === 'turn-model') await loadTurnModel(msg);
    else if (msg.type === 'block') ring.write(msg.samples);
    else if (msg.type === 'listen') await listen(msg.from);
    else if (msg.type === 'asr-idle') asrIdle(msg.pauseId);
    else if (msg.type === 'stop') stop();
  } catch (error) {
    self.postMessage({ type: 'error', code: 'vad_failed', message: `Voice detection failed: ${error.message}` });
  }
};

async function init(msg) {
  settings = msg.settings;
  ring = msg.ringBuffer ? new SampleRing(msg.ringBuffer) : SampleRing.allocate(settings.sampleRate * settings.ringSeconds, false);
  ort = await startOrt(1, msg.ort);
  const sessionFrom = epochNow();
  vad = await createSession(ort, msg.vadModel, { optimized: msg.graphOptimization });
  const timeline = { runtime: [runtimeSpan.from, runtimeSpan.to], session: [sessionFrom, epochNow()] };
  endpointer = new Endpointer(settings);
  encoder = new TurnAudioEncoder(settings.sampleRate, (packets) => self.postMessage({ type: 'opus', ...packets }));
  self.postMessage({ type: 'ready', threads: ort.env.wasm.numThreads, opus: encoder.supported, timeline });
  // The first run of a session compiles its kernels (~0.1 s): done now, after `ready`, while the page opens the
  // microphone, rather than on the user's first frames; listening starts once it is done (`listen`), reading the
  // ring from where the page says, so nothing captured meanwhile is lost.
  resetVadState();
  warmedUp = vadProb(new Float32Array(FRAME));
  warmedUp.catch(() => {}); // a failure is reported when listening starts, which awaits it
}

/**
 * smart-turn's model, sent by the page after `ready`: start it (in its own worker, or here), run it once, then answer
 * `turn-ready`; a failure answers `turn-failed` and leaves every pause to the hangover.
 */
async function loadTurnModel(msg) {
  try {
    if (settings.turnWorker) {
      await startTurnWorker(msg);
    } else {
      turn = await createSession(ort, msg.turnModel, { optimized: msg.graphOptimization });
      await turnProb(new Float32Array(TURN_WINDOW)); // the first run compiles kernels: not on the first pause
    }
    turnReady = true;
    self.postMessage({ type: 'turn-ready' });
  } catch (error) {
    turnWorker?.terminate();
    turnWorker = null;
    self.postMessage({ type: 'turn-failed', message: error.message });
  }
}

/** Start smart-turn's worker; resolves when it is ready (its model loaded and run once). */
function startTurnWorker({ turnModel, graphOptimization, ort: runtime }) {
  turnWorker = spawnWorker('./turn-worker.js');
  return new Promise((resolve, reject) => {
    turnWorker.onmessage = ({ data }) => {
      if (data.type === 'ready') resolve();
      else if (data.type === 'error' && data.pauseId === undefined) reject(new Error(`turn detection: ${data.message}`));
      else fromTurnWorker(data);
    };
    turnWorker.onerror = (event) => reject(new Error(`the turn detection worker failed to start: ${event.message ?? 'script error'}`));
    turnWorker.postMessage({ type: 'init', turnModel, graphOptimization, ort: runtime });
  });
}

function fromTurnWorker(msg) {
  if (msg.type === 'turn-prob') return turnAnswer(msg.pauseId, msg.prob, msg.ms);
  // One pause without an answer: the hangover ends that turn.
  self.postMessage({ type: 'error', code: 'turn_detection_failed', message: `Turn detection failed (${msg.message}); this turn ends after ${settings.hangoverSecs} s of silence.` });
}

/** smart-turn's answer for a pause: for the page's diagnostics now, for the endpointer once read up to here. */
function turnAnswer(pauseId, prob, ms) {
  self.postMessage({ type: 'turn-prob', pauseId, prob, ms });
  answer = { pauseId, prob, heardUpTo: ring.written };
}

function resetVadState() {
  const phases = Math.max(1, Math.round(settings.vadOnsetPhases ?? 1));
  streams = Array.from({ length: phases }, (_, i) => ({
    state: new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]),
    context: new Float32Array(CONTEXT),
    lag: Math.round((FRAME * (phases - i)) / phases) % FRAME,
  }));
}

/** One frame through one Silero stream: its speech probability, the stream's state carried on. */
async function vadProb(frame, stream = streams[0]) {
  const input = new Float32Array(CONTEXT + FRAME);
  input.set(stream.context);
  input.set(frame, CONTEXT);
  stream.context = frame.slice(FRAME - CONTEXT);
  // The 16 kHz model alone (silero-vad-v5-16k): the published graph's `sr` input went with its 8 kHz model.
  const out = await vad.run({ input: new ort.Tensor('float32', input, [1, CONTEXT + FRAME]), state: stream.state });
  stream.state = out.stateN;
  return out.output.data[0];
}

/**
 * The frame that ends at `end` through every stream: the main stream's probability, and the onset probability (the
 * largest of all streams'; each onset stream reads the frame ending `lag` samples earlier, already in the ring, so
 * none waits for audio). A stream whose frame is not in the ring (the first frame read) gives nothing.
 */
async function frameProbs(frame, end) {
  const prob = await vadProb(frame, streams[0]);
  let onset = prob;
  for (const stream of streams.slice(1)) {
    const from = end - stream.lag - FRAME;
    if (from < Math.max(0, ring.written - ring.capacity)) continue;
    onset = Math.max(onset, await vadProb(ring.read(from, from + FRAME), stream));
  }
  return { prob, onset };
}

async function turnProb(samples) {
  const out = await turn.run({ samples: new ort.Tensor('float32', samples, [1, TURN_WINDOW]) });
  return out.logits.data[0];
}

/** The last 8 s before `end`, front-padded with zeros as smart-turn was trained. */
function lastEightSeconds(start, end) {
  const from = Math.max(start, end - TURN_WINDOW, ring.written - ring.capacity);
  const audio = ring.read(from, end);
  const window = new Float32Array(TURN_WINDOW);
  window.set(audio, TURN_WINDOW - audio.length);
  return window;
}

async function listen(from) {
  const generation = ++listenGeneration;
  await warmedUp;
  if (generation !== listenGeneration) return;
  resetVadState();
  endpointer.reset();
  position = from;
  running = true;
  loop();
}

function stop() {
  listenGeneration++;
  running = false;
}

async function loop() {
  while (running) {
    await ring.waitFor(position + FRAME);
    if (ring.written - position > ring.capacity) {
      self.postMessage({ type: 'error', code: 'audio_overrun', message: 'Voice detection fell behind the microphone and skipped audio.' });
      position = ring.written - FRAME;
    }
    const frame = ring.read(position, position + FRAME);
    position += FRAME;
    encoder.push(frame);
    const { prob, onset } = await frameProbs(frame, position);
    for (const ev of endpointer.push(prob, position, FRAME, onset)) await handle(ev);
    if (answer && position >= answer.heardUpTo) {
      const { pauseId, prob: complete } = answer;
      answer = null;
      for (const next of endpointer.turnResult(pauseId, complete)) await handle(next);
    }
  }
}

/**
 * smart-turn's last answer, applied once the detector has read the audio that came in before it (while smart-turn
 * ran, and while the detector ran behind the microphone): a speaker who went on meanwhile has resumed the turn by
 * then, and the answer about the pause before is stale.
 * @type {{pauseId: number, prob: number, heardUpTo: number}|null}
 */
let answer = null;

/** @type {{pauseId: number, resolve: () => void}|null} */
let waitingForAsr = null;
let asrIdleFor = 0;

/** The page says the pause's speculative decode is done: smart-turn no longer competes with it for the CPU. */
function asrIdle(pauseId) {
  asrIdleFor = Math.max(asrIdleFor, pauseId);
  if (waitingForAsr && waitingForAsr.pauseId <= pauseId) waitingForAsr.resolve();
}

/** Wait (bounded) for the pause's decode: on two cores, running both at once slows both. */
function afterAsr(pauseId) {
  if (asrIdleFor >= pauseId) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, settings.turnCheckMaxWaitMs);
    waitingForAsr = { pauseId, resolve: () => { clearTimeout(timer); resolve(); } };
  }).finally(() => { waitingForAsr = null; });
}

async function handle(ev) {
  if (ev.type === 'turn-check') {
    if (!turnReady) return; // smart-turn is not up yet: the hangover ends this pause's turn
    if (turnWorker) {
      // Read on meanwhile; the window is taken now, when the pause is what it was asked about.
      const samples = lastEightSeconds(ev.start, ev.end);
      afterAsr(ev.pauseId).then(() => turnWorker.postMessage({ type: 'check', pauseId: ev.pauseId, samples },
        [samples.buffer]));
      return;
    }
    await afterAsr(ev.pauseId); // smart-turn here stops the detector for its run (`turnWorker` off)
    const started = performance.now();
    const p = await turnProb(lastEightSeconds(ev.start, ev.end));
    turnAnswer(ev.pauseId, p, performance.now() - started);
    return;
  }
  if (ev.type === 'speech-start') encoder.beginTurn(ev.start, ring.read(Math.max(ev.start, ring.written - ring.capacity), position));
  if (ev.type === 'speech-end') encoder.endTurn(ev.end);
  self.postMessage({ type: 'endpoint', event: ev, written: ring.written });
}
