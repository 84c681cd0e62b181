// Microphone capture: getUserMedia → AudioContext at 16 kHz (the browser resamples 44.1/48 kHz correctly) →
// AudioWorklet → the sample ring. `audio_t`, the capture clock, is samples written / 16000.
import { SampleRing } from './ring.js';

export class Capture {
  /**
   * @param {{sampleRate: number, ringSeconds: number}} settings
   */
  constructor(settings) {
    this.settings = settings;
    this.ring = SampleRing.allocate(settings.sampleRate * settings.ringSeconds);
    /** @type {((block: Float32Array) => void)[]} called with each batch on the message fallback path */
    this.blockListeners = [];
    this.context = null;
    this.stream = null;
    this.node = null;
  }

  /** Seconds of microphone audio captured since listening started. */
  get audioTime() {
    return this.ring.written / this.settings.sampleRate;
  }

  async start() {
    // Everything that takes time comes before getUserMedia, so the capture clock starts with the microphone's
    // first samples rather than a few hundred milliseconds into them.
    this.context = new AudioContext({ sampleRate: this.settings.sampleRate, latencyHint: 'interactive' });
    await this.context.audioWorklet.addModule(new URL('./capture-worklet.js', import.meta.url));
    this.node = new AudioWorkletNode(this.context, 'voxline-capture', {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: 'explicit',
      processorOptions: { ringBuffer: this.ring.shared ? this.ring.buffer : null },
    });
    if (!this.ring.shared) {
      this.node.port.onmessage = (event) => {
        this.ring.write(event.data);
        for (const listener of this.blockListeners) listener(event.data);
      };
    }
    if (this.context.state !== 'running') await this.context.resume();
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false, autoGainControl: false },
    });
    this.context.createMediaStreamSource(this.stream).connect(this.node);
  }

  async stop() {
    this.node?.port.postMessage('stop');
    this.stream?.getTracks().forEach((t) => t.stop());
    await this.context?.close();
  }
}
