// The audio thread only moves samples: into the shared ring when the page is cross-origin isolated, otherwise
// to the main thread in batches (the message fallback). No allocation per block on the shared path.
import { SampleRing } from './ring.js';

const FALLBACK_BATCH_SAMPLES = 2048; // ~128 ms at 16 kHz: few messages, little latency

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { ringBuffer } = options.processorOptions;
    this.ring = ringBuffer ? new SampleRing(ringBuffer) : null;
    this.batch = this.ring ? null : new Float32Array(FALLBACK_BATCH_SAMPLES);
    this.filled = 0;
    this.running = true;
    this.port.onmessage = (event) => {
      if (event.data === 'stop') this.running = false;
    };
  }

  process(inputs) {
    const channel = inputs[0]?.[0];
    if (!channel) return this.running;
    if (this.ring) {
      this.ring.write(channel);
      return this.running;
    }
    let offset = 0;
    while (offset < channel.length) {
      const n = Math.min(channel.length - offset, this.batch.length - this.filled);
      this.batch.set(channel.subarray(offset, offset + n), this.filled);
      this.filled += n;
      offset += n;
      if (this.filled === this.batch.length) {
        this.port.postMessage(this.batch, [this.batch.buffer]);
        this.batch = new Float32Array(FALLBACK_BATCH_SAMPLES);
        this.filled = 0;
      }
    }
    return this.running;
  }
}

registerProcessor('voxline-capture', CaptureProcessor);
