// A single-writer ring of 16 kHz mono samples shared between the audio thread and the workers.
//
// The writer (the AudioWorklet) copies each 128-sample block in and then publishes the new total with
// Atomics.store; readers address samples by their absolute index since capture began (the capture clock), so
// any number of readers can follow at their own pace without coordinating with each other. A reader that falls
// more than the ring's capacity behind has lost audio and is told so.

const HEADER_INTS = 2; // [0] total samples written (wraps after 2^31 samples, ~37 h at 16 kHz), [1] reserved

export class SampleRing {
  /**
   * @param {SharedArrayBuffer|ArrayBuffer} buffer from `SampleRing.allocate`
   */
  constructor(buffer) {
    this.buffer = buffer;
    this.header = new Int32Array(buffer, 0, HEADER_INTS);
    this.samples = new Float32Array(buffer, HEADER_INTS * 4);
    this.capacity = this.samples.length;
  }

  /** @param {number} capacity samples */
  static allocate(capacity, shared = typeof SharedArrayBuffer !== 'undefined' && self.crossOriginIsolated) {
    const bytes = HEADER_INTS * 4 + capacity * 4;
    return new SampleRing(shared ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes));
  }

  get shared() {
    return typeof SharedArrayBuffer !== 'undefined' && this.buffer instanceof SharedArrayBuffer;
  }

  /** Total samples written since capture began. */
  get written() {
    return this.shared ? Atomics.load(this.header, 0) : this.header[0];
  }

  /** @param {Float32Array} block */
  write(block) {
    const start = this.written;
    let at = start % this.capacity;
    const first = Math.min(block.length, this.capacity - at);
    this.samples.set(block.subarray(0, first), at);
    if (first < block.length) this.samples.set(block.subarray(first), 0);
    const total = start + block.length;
    if (this.shared) {
      Atomics.store(this.header, 0, total);
      Atomics.notify(this.header, 0);
    } else {
      this.header[0] = total;
    }
  }

  /**
   * Copy samples [from, to) by absolute index into a new array.
   * @throws when part of the range is no longer (or not yet) in the ring
   */
  read(from, to) {
    const written = this.written;
    if (to > written || from < written - this.capacity || from > to) {
      throw new RangeError(`samples ${from}..${to} are not in the ring (holds ${Math.max(0, written - this.capacity)}..${written})`);
    }
    const out = new Float32Array(to - from);
    const at = from % this.capacity;
    const first = Math.min(out.length, this.capacity - at);
    out.set(this.samples.subarray(at, at + first));
    if (first < out.length) out.set(this.samples.subarray(0, out.length - first), first);
    return out;
  }

  /** Wait until at least `count` samples have been written (workers only: Atomics.wait blocks). */
  async waitFor(count, timeoutMs = 50) {
    while (this.written < count) {
      if (this.shared && Atomics.waitAsync) {
        const seen = this.written;
        if (seen >= count) break;
        const { async, value } = Atomics.waitAsync(this.header, 0, seen, timeoutMs);
        if (async) await value;
      } else {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
  }
}
