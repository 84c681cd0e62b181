// Opus packets of each turn, encoded with WebCodecs' AudioEncoder as the audio arrives (MediaRecorder is not
// used: it cannot be cut at sample positions). Packets are kept from shortly before the turn to its end, ready
// for the uplink when the server is asked to re-recognise; outside turns only the pre-roll is kept.

const BITRATE = 24000;
const KEEP_OUTSIDE_TURN_SECS = 1.0;

export class TurnAudioEncoder {
  /**
   * @param {number} sampleRate
   * @param {(turn: {packets: ArrayBuffer[], timestamps: number[], decoderConfig: object, start: number, end: number}) => void} onTurn
   */
  constructor(sampleRate, onTurn) {
    this.rate = sampleRate;
    this.onTurn = onTurn;
    /** @type {{t: number, bytes: ArrayBuffer}[]} t = first sample of the packet */
    this.packets = [];
    this.turnStart = null;
    this.decoderConfig = null;
    this.supported = typeof AudioEncoder !== 'undefined';
    this.encoder = null;
    if (this.supported) {
      this.encoder = new AudioEncoder({
        output: (chunk, meta) => this.#keep(chunk, meta),
        error: () => { this.supported = false; },
      });
      this.encoder.configure({ codec: 'opus', sampleRate, numberOfChannels: 1, bitrate: BITRATE });
    }
  }

  /** @param {Float32Array} frame @param {number} start absolute sample index of frame[0] */
  push(frame, start) {
    if (!this.supported) return;
    const data = new AudioData({
      format: 'f32-planar', sampleRate: this.rate, numberOfChannels: 1, numberOfFrames: frame.length,
      timestamp: Math.round((start * 1e6) / this.rate), data: frame,
    });
    this.encoder.encode(data);
    data.close();
  }

  beginTurn(start) {
    this.turnStart = start;
  }

  async endTurn(end) {
    const start = this.turnStart;
    this.turnStart = null;
    if (!this.supported || start === null) return;
    await this.encoder.flush();
    const inTurn = this.packets.filter((p) => p.t >= start - this.rate * 0.02 && p.t < end);
    this.onTurn({
      packets: inTurn.map((p) => p.bytes), timestamps: inTurn.map((p) => p.t),
      decoderConfig: this.decoderConfig, start, end,
    });
  }

  #keep(chunk, meta) {
    if (meta?.decoderConfig) {
      const { description, ...rest } = meta.decoderConfig;
      this.decoderConfig = { ...rest, description: description ? new Uint8Array(description).slice().buffer : undefined };
    }
    const bytes = new ArrayBuffer(chunk.byteLength);
    chunk.copyTo(bytes);
    const t = Math.round((chunk.timestamp * this.rate) / 1e6);
    this.packets.push({ t, bytes });
    if (this.turnStart === null) {
      const keepFrom = t - KEEP_OUTSIDE_TURN_SECS * this.rate;
      while (this.packets.length && this.packets[0].t < keepFrom) this.packets.shift();
    }
  }
}
