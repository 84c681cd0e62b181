// Whisper greedy decoding over the two ONNX graphs made by `voxline.convert.whisper_onnx`:
// the encoder takes raw 16 kHz samples (log-mel inside) and returns the cross-attention K/V of every decoder
// layer; the decoder takes new tokens plus the self-attention cache and returns last-position logits.
//
// Confidence: the geometric mean of the probabilities of the emitted tokens that carry a letter or a digit
// (exp of their mean log-probability), in 0..1. Punctuation and end-of-text are left out: Whisper is often unsure
// whether a command ends in "." or nothing, which says nothing about the words. A decode cut short by a guard
// (repetition loop or token budget) has its confidence halved: its text is suspect, and the local intent gate
// should send it to the server.

export const REPEAT_NGRAM = 3;
const HAS_WORD = /[\p{L}\p{N}]/u;

/** GPT-2's byte-level alphabet: printable bytes map to themselves, the others to U+0100 onwards. */
function byteDecoder() {
  const printable = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const code = printable.includes(b) ? b : 256 + extra++;
    map.set(String.fromCodePoint(code), b);
  }
  return map;
}

export class WhisperTokenizer {
  /** @param {{tokens: string[], special: Record<string, number>}} table tokens.json */
  constructor(table) {
    this.tokens = table.tokens;
    this.eot = table.special.eot;
    this.firstSpecial = table.special.eot; // every id from end-of-text on is a special token
    this.bytes = byteDecoder();
    this.utf8 = new TextDecoder('utf-8', { fatal: false });
  }

  /** @param {number[]} ids */
  decode(ids) {
    const out = [];
    for (const id of ids) {
      if (id >= this.firstSpecial) continue;
      for (const ch of this.tokens[id]) out.push(this.bytes.get(ch) ?? 63);
    }
    return this.utf8.decode(new Uint8Array(out)).trim();
  }
}

/** Index where the tail starts repeating an earlier n-gram, or -1. */
export function repeatStart(ids, n = REPEAT_NGRAM) {
  if (ids.length < 2 * n) return -1;
  const tail = ids.slice(-n).join(',');
  for (let i = 0; i + n <= ids.length - n; i++) {
    if (ids.slice(i, i + n).join(',') === tail) return ids.length - n;
  }
  return -1;
}

export class Whisper {
  /**
   * @param {any} ort onnxruntime-web
   * @param {any} encoder InferenceSession
   * @param {any} decoder InferenceSession
   * @param {any} table tokens.json
   */
  constructor(ort, encoder, decoder, table) {
    this.ort = ort;
    this.encoder = encoder;
    this.decoder = decoder;
    this.table = table;
    this.dims = table.dims;
    this.tokenizer = new WhisperTokenizer(table);
    this.suppress = Int32Array.from(table.suppress_ids);
    this.suppressBegin = Int32Array.from(table.suppress_ids_begin);
  }

  /** Samples in the encoder window for `speechSamples` of audio. */
  windowSamples(speechSamples, settings) {
    const rate = this.dims.sample_rate;
    if (settings.fullWindow) return this.dims.max_samples;
    const secs = Math.max(settings.minWindowSecs, Math.ceil(speechSamples / rate) + settings.windowPadSecs);
    return Math.min(this.dims.max_samples, secs * rate);
  }

  /**
   * @param {Float32Array} audio 16 kHz mono speech (no longer than the largest window)
   * @param {import('./settings.js').Settings} settings
   * @param {() => boolean} cancelled checked between decoder steps
   */
  async transcribe(audio, settings, cancelled = () => false) {
    const t0 = performance.now();
    const window = new Float32Array(this.windowSamples(audio.length, settings));
    window.set(audio.subarray(Math.max(0, audio.length - window.length)));
    const { cross_k, cross_v } = await this.encoder.run({
      samples: new this.ort.Tensor('float32', window, [1, window.length]),
    });
    const encodeMs = performance.now() - t0;
    const budget = Math.min(
      this.dims.max_new_tokens,
      Math.ceil((settings.tokensPerSec * audio.length) / this.dims.sample_rate) + settings.tokenSlack,
    );
    const result = await this.#decode(cross_k, cross_v, budget, cancelled);
    return { ...result, encodeMs, totalMs: performance.now() - t0, windowSecs: window.length / this.dims.sample_rate };
  }

  async #decode(crossK, crossV, budget, cancelled) {
    const { layers, heads, head_dim: headDim } = this.dims;
    const emptyCache = () => new this.ort.Tensor('float32', new Float32Array(0), [layers, 1, heads, 0, headDim]);
    let pastK = emptyCache();
    let pastV = emptyCache();
    let input = this.table.prompt;
    const ids = [];
    const logprobs = [];
    let guard = null;
    for (let step = 0; ; step++) {
      if (cancelled()) return { cancelled: true };
      const out = await this.decoder.run({
        tokens: new this.ort.Tensor('int64', BigInt64Array.from(input, BigInt), [1, input.length]),
        past_k: pastK, past_v: pastV, cross_k: crossK, cross_v: crossV,
      });
      pastK = out.new_k;
      pastV = out.new_v;
      const { id, logprob } = this.#pick(out.logits.data, step === 0);
      if (id === this.tokenizer.eot) break;
      ids.push(id);
      logprobs.push(logprob);
      const loopAt = repeatStart(ids);
      if (loopAt >= 0) {
        ids.length = loopAt; // drop the restarted loop: its words are already there once
        logprobs.length = loopAt;
        guard = 'repeat';
        break;
      }
      if (ids.length >= budget) {
        guard = 'budget';
        break;
      }
      input = [id];
    }
    const words = logprobs.filter((_, i) => HAS_WORD.test(this.tokenizer.tokens[ids[i]]));
    const mean = words.length ? words.reduce((a, b) => a + b, 0) / words.length : -Infinity;
    const confidence = Math.exp(mean) * (guard ? 0.5 : 1);
    return { text: this.tokenizer.decode(ids), ids, confidence, guard, steps: ids.length + 1 };
  }

  /** Greedy choice after suppression, with the chosen token's log-probability. */
  #pick(logits, first) {
    for (const id of this.suppress) logits[id] = -Infinity;
    if (first) for (const id of this.suppressBegin) logits[id] = -Infinity;
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    let sum = 0;
    const max = logits[best];
    for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
    return { id: best, logprob: -Math.log(sum) };
  }
}
