// Opus packets of each turn, encoded with WebCodecs' AudioEncoder while the user speaks (MediaRecorder is not
// used: it cannot be cut at sample positions). A fresh encoder per turn gets the pre-roll from the ring at the
// start of the turn and then every frame until its end, so the packets belong to the turn by construction (no
// timestamp bookkeeping); at the end it is flushed and the packets go to the page, ready for the uplink when the
// server is asked to re-recognise.

const BITRATE = 24000;

export class TurnAudioEncoder {
  /**
   * @param {number} sampleRate
   * @param {(turn: {packets: ArrayBuffer[], decoderConfig: object, start: number, end: number}) => void} onTurn
   */
  constructor(sampleRate, onTurn) {
    this.rate = sampleRate;
    this.onTurn = onTurn;
    this.supported = typeof AudioEncoder !== 'undefined';
    this.turn = null;
  }

  /** @param {number} start first sample of the turn @param {Float32Array} preRoll samples [start, now) */
  beginTurn(start, preRoll) {
    if (!this.supported) return;
    this.turn?.encoder.close();
    const turn = { start, packets: [], decoderConfig: null, next: start, encoder: null };
    turn.encoder = new AudioEncoder({
      output: (chunk, meta) => {
        if (meta?.decoderConfig) {
          const { description, ...rest } = meta.decoderConfig;
          turn.decoderConfig = { ...rest, description: description ? new Uint8Array(description).slice().buffer : undefined };
        }
        const bytes = new ArrayBuffer(chunk.byteLength);
        chunk.copyTo(bytes);
        turn.packets.push(bytes);
      },
      error: () => { this.supported = false; },
    });
    turn.encoder.configure({ codec: 'opus', sampleRate: this.rate, numberOfChannels: 1, bitrate: BITRATE });
    this.turn = turn;
    this.push(preRoll);
  }

  /** @param {Float32Array} samples the next samples of the current turn (ignored outside turns) */
  push(samples) {
    const turn = this.turn;
    if (!turn || !this.supported || samples.length === 0) return;
    const data = new AudioData({
      format: 'f32-planar', sampleRate: this.rate, numberOfChannels: 1, numberOfFrames: samples.length,
      timestamp: Math.round(((turn.next - turn.start) * 1e6) / this.rate), data: samples,
    });
    turn.next += samples.length;
    turn.encoder.encode(data);
    data.close();
  }

  async endTurn(end) {
    const turn = this.turn;
    this.turn = null;
    if (!turn || !this.supported) return;
    await turn.encoder.flush();
    turn.encoder.close();
    this.onTurn({ packets: turn.packets, decoderConfig: turn.decoderConfig, start: turn.start, end });
  }
}
