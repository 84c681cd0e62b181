// Reply playback on the audio thread: a queue of PCM chunks drained 128 samples at a time.
// It starts only once `prebufferSamples` are queued (or the reply is complete), so network jitter between
// clause frames does not cause audible gaps; it reports the first sample played and, when stopped (barge-in) or
// done, how many samples were actually played, so the dialog history can keep only what the user heard.

class PlayerProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.prebuffer = options.processorOptions.prebufferSamples;
    this.reset(null);
    this.port.onmessage = ({ data }) => {
      if (data.type === 'start') {
        if (this.replyId !== null) this.finish('stopped'); // a new reply cuts the old one: its end is reported
        this.reset(data.replyId);
      } else if (data.type === 'chunk' && data.replyId === this.replyId) {
        this.chunks.push(data.samples);
        this.queued += data.samples.length;
      } else if (data.type === 'end' && data.replyId === this.replyId) this.complete = true;
      else if (data.type === 'stop') this.finish('stopped');
    };
  }

  reset(replyId) {
    this.replyId = replyId;
    this.chunks = [];
    this.offset = 0; // into chunks[0]
    this.queued = 0;
    this.played = 0;
    this.playing = false;
    this.complete = false;
  }

  finish(reason) {
    // Answered even when idle (the reply ended a moment ago): whoever asked to stop is waiting for the answer.
    this.port.postMessage({ type: 'finished', replyId: this.replyId, reason, playedSamples: this.played });
    if (this.replyId === null) return;
    this.reset(null);
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    if (this.replyId === null) return true;
    if (!this.playing) {
      if (this.queued < this.prebuffer && !this.complete) return true;
      this.playing = true;
    }
    let written = 0;
    while (written < out.length && this.chunks.length) {
      const chunk = this.chunks[0];
      const n = Math.min(out.length - written, chunk.length - this.offset);
      out.set(chunk.subarray(this.offset, this.offset + n), written);
      written += n;
      this.offset += n;
      if (this.offset === chunk.length) {
        this.chunks.shift();
        this.offset = 0;
      }
    }
    if (written && this.played === 0) {
      this.port.postMessage({ type: 'first', replyId: this.replyId, frame: currentFrame });
    }
    this.played += written;
    this.queued -= written;
    if (!this.chunks.length && this.complete) this.finish('done');
    return true;
  }
}

registerProcessor('voxline-player', PlayerProcessor);
