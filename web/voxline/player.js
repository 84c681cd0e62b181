// Plays streamed reply audio (PCM at the server's TTS rate) through an AudioWorklet with a small jitter buffer.
// `onFirstSample` fires when the first sample of a reply is handed to the audio device: the moment
// `voxline:reply-audio {first: true}` reports. `onFinished` fires once per reply whose first sample played, when its
// last sample has played (`reason: 'done'`) or when it was stopped (`'stopped'`, barge-in), with how much of it was
// played: the moment `voxline:reply-audio {last: true}` reports. Stopping is immediate: the audio thread outputs
// silence from its next 128-sample render quantum (5 ms at the 24 kHz reply rate), well inside one reply frame.

export const PREBUFFER_SECS = 0.06;

/** @typedef {{replyId: number|null, reason: 'done'|'stopped', playedMs: number}} FinishedInfo */

export class ReplyPlayer {
  /** @param {{sampleRate: number, onFirstSample: (replyId: number) => void, onFinished?: (info: FinishedInfo) => void}} options */
  constructor({ sampleRate, onFirstSample, onFinished }) {
    this.rate = sampleRate;
    this.onFirstSample = onFirstSample;
    this.onFinished = onFinished;
    this.context = null;
    this.node = null;
    this.current = null;
    /** The reply whose first sample has played and whose end has not been reported yet. */
    this.audible = null;
    /** Messages go out in order, after the worklet exists: pushes made while it starts are not lost. */
    this.chain = Promise.resolve();
  }

  #send(message, transfer = []) {
    this.chain = this.chain.then(() => this.node.port.postMessage(message, transfer));
  }

  async #ensureStarted() {
    if (this.node) return;
    this.context = new AudioContext({ sampleRate: this.rate, latencyHint: 'interactive' });
    await this.context.audioWorklet.addModule(new URL('./player-worklet.js', import.meta.url));
    this.node = new AudioWorkletNode(this.context, 'voxline-player', {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { prebufferSamples: Math.round(PREBUFFER_SECS * this.rate) },
    });
    this.node.connect(this.context.destination);
    this.node.port.onmessage = ({ data }) => {
      if (data.type === 'first') {
        this.audible = data.replyId;
        this.onFirstSample(data.replyId);
      } else if (data.type === 'finished') {
        if (data.replyId === null && data.reason === 'done') return;
        if (this.current === data.replyId || data.replyId === null) this.current = null;
        const info = { replyId: data.replyId, reason: data.reason, playedMs: (1000 * data.playedSamples) / this.rate };
        this.stopping?.(info);
        this.stopping = null;
        // Idle when stopped (replyId null): the last reply's end was reported already, or it never became audible.
        if (data.replyId !== null && this.audible === data.replyId) {
          this.audible = null;
          this.onFinished?.(info);
        }
      }
    };
  }

  /** Prepare the audio output ahead of the first reply (an AudioContext takes a while to start). */
  async warmUp() {
    await this.#ensureStarted();
    if (this.context.state !== 'running') await this.context.resume();
  }

  get playing() {
    return this.current !== null;
  }

  begin(replyId) {
    this.current = replyId;
    this.chain = this.chain.then(() => this.warmUp());
    this.#send({ type: 'start', replyId });
  }

  /** @param {Float32Array} samples */
  push(replyId, samples) {
    this.#send({ type: 'chunk', replyId, samples }, [samples.buffer]);
  }

  end(replyId) {
    this.#send({ type: 'end', replyId });
  }

  /**
   * Barge-in: silence now. Resolves with how much of the reply was heard once the audio thread has stopped.
   * @returns {Promise<FinishedInfo>} replyId null: nothing was playing any more (the reply had just ended)
   */
  stop() {
    const stopped = new Promise((resolve) => { this.stopping = resolve; });
    this.#send({ type: 'stop' });
    return stopped;
  }
}
