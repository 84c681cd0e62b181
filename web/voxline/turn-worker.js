// smart-turn v3.2 in a worker of its own, started by the listening worker (vad-worker.js). A run takes ~0.2 s of
// one core; in the listening worker it would stop the voice detector from reading on for that long, so that the
// silence after a command, or a speaker going on, would be seen that much later.
//
// In: {type: 'init', turnModel, graphOptimization, ort} then {type: 'check', pauseId, samples} (the last 8 s, front-padded).
// Out: {type: 'ready'}, {type: 'turn-prob', pauseId, prob, ms} or {type: 'error', pauseId?, message}.
import { loadOrt, createSession } from './ort.js';

const TURN_WINDOW = 8 * 16000;

let ort, session;

self.onmessage = async ({ data: msg }) => {
  try {
    if (msg.type === 'init') {
      ort = await loadOrt(1, msg.ort);
      session = await createSession(ort, msg.turnModel, { optimized: msg.graphOptimization });
      await turnProb(new Float32Array(TURN_WINDOW)); // the first run compiles kernels: not on the first pause
      self.postMessage({ type: 'ready' });
    } else if (msg.type === 'check') {
      const started = performance.now();
      const prob = await turnProb(msg.samples);
      self.postMessage({ type: 'turn-prob', pauseId: msg.pauseId, prob, ms: performance.now() - started });
    }
  } catch (error) {
    self.postMessage({ type: 'error', pauseId: msg.pauseId, message: error.message });
  }
};

async function turnProb(samples) {
  const out = await session.run({ samples: new ort.Tensor('float32', samples, [1, TURN_WINDOW]) });
  return out.logits.data[0];
}
