// Whisper greedy decoding over the two ONNX graphs made by `voxline.convert.whisper_onnx`:
// the encoder takes raw 16 kHz samples (log-mel inside) and returns the cross-attention K/V of every decoder
// layer; the decoder takes new tokens plus the self-attention cache and returns last-position logits.
//
// Confidence: the geometric mean of the probabilities of the emitted tokens that carry a letter or a digit
// (exp of their mean log-probability), in 0..1. Punctuation and end-of-text are left out: Whisper is often unsure
// whether a command ends in "." or nothing, which says nothing about the words. A decode cut short by a guard
// (repetition loop or token budget) has its confidence halved: its text is suspect, and the local intent gate
// should send it to the server.
//
// Command reading (grammar-aware decoding, when a `CommandGraph` is set): beside the free transcript, the most
// likely reading that is a sentence of the grammar. Where the free transcript already is one, it is the reading
// and costs nothing more. Otherwise a best-first beam continues the decode, among the tokens the grammar allows,
// from the decoder states saved by the free decode: at the first token the grammar refuses, and, when that finds
// nothing, at each earlier one (`grammarBacktrack`: a misheard first word may be refused only later on); a
// hypothesis is dropped once its log-likelihood falls more than `grammarMaxMarginNats` below the free transcript's
// (a sum of log-probabilities only falls as tokens are added, so this never loses a reading within the margin). A
// short utterance heard unsurely is decoded once more with a prompt of the grammar's short commands, and its
// reading kept when it is more confident.
// Command confidence: the probability that the reading is what was said, from a logistic model
// (`COMMAND_CONFIDENCE_MODEL`, fitted by `voxline bench readings --fit` on the tuning set, clean and noisy) over six
// things the decode knows: how well the reading's words are spelled (the geometric mean, over its word tokens, of
// the probability of every token spelling the same word: " Stop", "stop", " STOP" count together; over free text,
// a song name, plain token probabilities), its margin (log-likelihood below the decode it came from), the free
// transcript's word confidence, how many words the reading has beside the free transcript (a prompted decode
// that stops after "Stop." on "stop signs are red" reads a command into part of a sentence; a loop the repeat guard
// cut counts once), and how alike the reading and the free transcript are, letter for letter (`agreement`): a
// prompted decode of audio it cannot make out tends to copy a sentence of its prompt ("What time is it?" for "back
// one song" heard as "One song"), which the free transcript does not bear out; and how likely the unprompted decoder
// finds the reading beside the free transcript (`support`, in nats: for a prompted decode's reading a forced decode
// of its tokens, a few decoder steps; for a reading of the free decode its margin). Off
// (`calibratedCommandConfidence`): the design before, spelled × exp(½ · margin). Partials (while the user speaks)
// get a reading only where the free transcript is one: no search, no second decode. A free transcript that opens as
// no command does (the lexicon's `no_command_openings`: "don't ...", "who ...") gets none at all.
//
// Drafts (`draftTokens`): a decoder run costs about as much for a few tokens as for one (its largest part is the
// output projection's read of the 20 MB embedding, and copying the inputs in), so where an earlier decode of the
// same utterance exists (a partial while the user spoke), each run of the free decode also feeds what followed
// there, from where the tokens so far meet it, and checks it against its own predictions.
// The drafted tokens the decoder would have chosen itself are kept, with the token it chose after them, so that a
// run yields one token or more; the cache of the ones refused is cut off. Greedy decoding picks the tokens it picks
// without drafts, except where int8 activations, quantised with one scale over a run's rows, move a near tie (case
// or punctuation, in what was measured). Guessing drafts from the grammar's likeliest next words was tried: it
// saved a run in six on commands but no time in the page, and is not done.
//
// The encoder's silent tail (`encoderTail`): an utterance is padded with silence to the smallest window (8 s, 400
// positions), and a command fills a quarter of it, but the encoder's time goes to every position. With the audio
// gain-normalised in the graph (its loudest log-mel frame at one level, so every window's silence has the same
// log-mel value), the positions after the speech are nearly the same in every window: a run over a window of
// nothing but that floor, made once, gives every layer's K and V of them and the decoder's cross K/V. Each decode
// then runs the encoder on the *head* alone (the audio and `encoderTailMarginSecs` more), whose queries attend to
// its own keys and to the cached tail's, and the decoder attends to both. Longer windows run whole.
import { foldToken } from './grammar-decode.js';

export const REPEAT_NGRAM = 3;
/** Candidate tokens kept per decoder step: the alternatives a command reading may take at that step. */
export const TOP_CANDIDATES = 16;
/** Length of the command prompt (tokens of earlier text): each costs a little of the first decoder step. */
export const DEFAULT_PROMPT_TOKENS = 64;
/** Samples per encoder position (two log-mel frames of 160; the second convolution halves the rate). */
const SAMPLES_PER_POSITION = 320;
/** `level_offset` that turns a window into its floor alone (the tail cache's run; `voxline.convert.whisper_onnx`). */
const FLOOR_ONLY = -1e4;
const HAS_WORD = /[\p{L}\p{N}]/u;
const WORD_BREAK = /[^\p{L}\p{N}%']+/u;

/**
 * Coefficients of the command confidence (logistic: bias + Σ coefficient × feature), fitted by
 * `voxline bench readings --noise-snr-db 10 --fit` (the tuning set, 5 voices, each clean and with pink noise; its
 * sweep and reliability curve are cross-validated by sentence). Features: log spelled, min(0, margin), log free
 * word confidence, log((reading words + 1) / (free words + 1)), agreement (see `agreement`), min(0, support) (see
 * `#support`). A model without an `agreement` or `support` coefficient (fitted before it existed) gives it none, and
 * without `support` the forced decode it needs is not run.
 */
export const COMMAND_CONFIDENCE_MODEL = Object.freeze({
  bias: 3.34, spelled: 0.61, margin: 0.36, freeConfidence: 0.18, wordRatio: 2.31, agreement: 0.56, support: 0.23,
});

/**
 * Where `hint` (earlier token ids of the same utterance) goes on from the end of `ids`: the index after the longest
 * run of `ids`' last tokens (at most `longest`) found in `hint`, the occurrence ending nearest index `ids.length`
 * first; 0 for no ids; -1 when `hint` has none of them.
 */
export function continuation(ids, hint, longest = REPEAT_NGRAM) {
  if (!ids.length) return 0;
  for (let n = Math.min(longest, ids.length); n >= 1; n--) {
    let best = -1;
    for (let at = 0; at + n <= hint.length; at++) {
      let same = true;
      for (let k = 0; k < n && same; k++) same = hint[at + k] === ids[ids.length - n + k];
      if (same && (best < 0 || Math.abs(at + n - ids.length) < Math.abs(best - ids.length))) best = at + n;
    }
    if (best >= 0) return best;
  }
  return -1;
}

/**
 * Words in a transcript, as the confidence model counts them. A transcript cut out of a repetition loop (`loop`: the
 * repeat guard stopped its decode) counts the loop's words once: "Console Console Console" is one word heard.
 */
export function wordCount(text, loop = false) {
  const words = text.split(WORD_BREAK).filter(Boolean);
  return loop ? withoutTrailingRepeats(words.map((w) => w.toLowerCase())) : words.length;
}

/**
 * Length of `items` once its end is no longer a run repeated back to back (runs of 1 to `longest` items): `a b c c c`
 * → 3, `x a b a b` → 3, `a b c` → 3.
 */
export function withoutTrailingRepeats(items, longest = REPEAT_NGRAM) {
  const same = (a, b, n) => items.slice(a, a + n).every((item, i) => item === items[b + i]);
  let shortest = items.length;
  for (let n = 1; n <= longest; n++) {
    let end = items.length;
    while (end >= 2 * n && same(end - n, end - 2 * n, n)) end -= n;
    shortest = Math.min(shortest, end);
  }
  return shortest;
}

/**
 * The command confidence of a reading (see the header), in 0..1.
 * @param {{spelled: number, margin: number, freeConfidence: number, readingWords: number, freeWords: number,
 *   agreement: number}} f
 */
export function commandConfidence(f, model = COMMAND_CONFIDENCE_MODEL) {
  const log = (x) => Math.log(Math.max(x, 1e-4));
  const z = model.bias + model.spelled * log(f.spelled) + model.margin * Math.min(0, f.margin)
    + model.freeConfidence * log(f.freeConfidence)
    + model.wordRatio * Math.log((f.readingWords + 1) / (f.freeWords + 1))
    + (model.agreement ?? 0) * f.agreement
    + (model.support ?? 0) * Math.min(0, f.support ?? f.margin);
  return 1 / (1 + Math.exp(-z));
}

/**
 * How alike two transcripts are, letter for letter, in 0..1: 1 − the edit distance between their letters and digits
 * (case, spaces and punctuation left out) over the longer one's length. "Pause." / "pause" → 1, "Paul." / "pause." →
 * 0.6, "What time is it?" / "One song." → 0.08; two empty texts → 1.
 */
export function agreement(a, b) {
  const fold = (text) => [...text.normalize('NFKC').toLowerCase()].filter((ch) => HAS_WORD.test(ch));
  const x = fold(a);
  const y = fold(b);
  if (!x.length && !y.length) return 1;
  let row = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const next = [i];
    for (let j = 1; j <= y.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (x[i - 1] === y[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return 1 - row[y.length] / Math.max(x.length, y.length);
}

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
    /** @type {import('./grammar-decode.js').CommandGraph|null} */
    this.graph = null;
    /** @type {Map<number, string>} token id → its text (decoded once) */
    this.texts = new Map();
    /** @type {Map<number, string>} token id → its folded text */
    this.folds = new Map();
    /** A decoder built before `logits_from` gives the last position's logits alone: it cannot check drafts. */
    this.draftable = !decoder.inputNames || decoder.inputNames.includes('logits_from');
    /** An encoder built before the silent tail's cache takes `samples` alone. */
    this.tailable = !encoder.inputNames || encoder.inputNames.includes('tail_k');
  }

  /**
   * Constrain command readings to `graph` (null: free decoding only), and prompt command decodes with its short
   * commands (at most `promptTokens` tokens).
   */
  setGraph(graph, promptTokens = DEFAULT_PROMPT_TOKENS) {
    this.graph = graph;
    this.commandPrompt = graph ? this.#commandPrompt(graph.shortCommands(), promptTokens) : null;
    this.skillPrompt = graph?.prompt ? this.#commandPrompt(graph.prompt, promptTokens) : null;
  }

  /**
   * `<|startofprev|>` and short commands of the graph as earlier text ("Pause. Next. Lights off. ..."), then the
   * usual prompt: Whisper then expects that vocabulary. Only words that are one token each are used (the page has
   * no BPE encoder); the rest of the grammar still constrains the reading.
   */
  #commandPrompt(sentences, maxTokens) {
    const special = this.table.special;
    if (special.startofprev == null) return null;
    this.tokenIds ??= new Map(this.tokenizer.tokens.map((token, id) => [token, id]));
    const period = this.tokenIds.get('.');
    const wordId = (word, capital) => this.tokenIds.get('\u0120' + (capital ? word[0].toUpperCase() + word.slice(1) : word));
    const ids = [];
    for (const sentence of sentences) {
      const spelled = sentence.map((word, i) => wordId(word, i === 0) ?? (i === 0 ? wordId(word, false) : undefined));
      if (spelled.some((id) => id === undefined)) continue;
      if (ids.length + spelled.length + 1 > maxTokens) break;
      ids.push(...spelled, period);
    }
    return ids.length ? [special.startofprev, ...ids, ...this.table.prompt] : null;
  }

  /** The text of one token as it adds to a transcript (leading space kept; U+FFFD for a partial character). */
  tokenText(id) {
    let text = this.texts.get(id);
    if (text === undefined) {
      const bytes = [...this.tokenizer.tokens[id]].map((ch) => this.tokenizer.bytes.get(ch) ?? 63);
      text = this.tokenizer.utf8.decode(new Uint8Array(bytes));
      this.texts.set(id, text);
    }
    return text;
  }

  #fold(id) {
    let folded = this.folds.get(id);
    if (folded === undefined) this.folds.set(id, (folded = id >= this.tokenizer.firstSpecial ? '' : foldToken(this.tokenText(id))));
    return folded;
  }

  /**
   * The decoder's cross-attention K/V of `audio` in a window of `windowLength` samples: the whole window through the
   * encoder, or, for the smallest window with `encoderTail`, only its head (see "The encoder's silent tail").
   * `headSamples`: how many samples went through the encoder.
   */
  async #encode(audio, windowLength, settings) {
    const rate = this.dims.sample_rate;
    const tailed = settings.encoderTail && windowLength === settings.minWindowSecs * rate && this.tailable;
    const tail = tailed ? await this.#tailCache(windowLength) : null;
    const length = tail
      ? Math.min(windowLength,
        (Math.ceil(audio.length / SAMPLES_PER_POSITION) + Math.round(settings.encoderTailMarginSecs * rate
          / SAMPLES_PER_POSITION)) * SAMPLES_PER_POSITION)
      : windowLength;
    const samples = new Float32Array(length);
    samples.set(audio.subarray(Math.max(0, audio.length - length)));
    const { cross_k, cross_v } = await this.encoder.run({
      ...(tail ?? (this.tailable ? this.#plainFeeds() : {})),
      samples: new this.ort.Tensor('float32', samples, [1, length]),
    }, ['cross_k', 'cross_v']);
    return { cross_k, cross_v, headSamples: length };
  }

  /** The encoder's inputs besides `samples` for Whisper's own encoder: no gain normalisation, no cached tail. */
  #plainFeeds() {
    if (!this.plainFeeds) {
      const { ort, dims } = this;
      const empty = (layers) => new ort.Tensor('float32', new Float32Array(0), [layers, 1, dims.heads, 0, dims.head_dim]);
      this.plainFeeds = { gain_normalise: new ort.Tensor('float32', Float32Array.of(0), [1]),
        level_offset: new ort.Tensor('float32', Float32Array.of(0), [1]),
        tail_k: empty(dims.encoder_layers), tail_v: empty(dims.encoder_layers),
        tail_cross_k: empty(dims.layers), tail_cross_v: empty(dims.layers) };
    }
    return this.plainFeeds;
  }

  /** The cached tail of a window of `windowLength` samples, and the inputs that read it (made on first use). */
  async #tailCache(windowLength) {
    if (this.tail?.windowLength !== windowLength) {
      const { ort } = this;
      const out = await this.encoder.run({
        ...this.#plainFeeds(),
        samples: new ort.Tensor('float32', new Float32Array(windowLength), [1, windowLength]),
        gain_normalise: new ort.Tensor('float32', Float32Array.of(1), [1]),
        level_offset: new ort.Tensor('float32', Float32Array.of(FLOOR_ONLY), [1]),
      }, ['cross_k', 'cross_v', 'self_k', 'self_v']);
      this.tail = { windowLength, feeds: { tail_k: out.self_k, tail_v: out.self_v, tail_cross_k: out.cross_k,
        tail_cross_v: out.cross_v, gain_normalise: new ort.Tensor('float32', Float32Array.of(1), [1]),
        level_offset: new ort.Tensor('float32', Float32Array.of(0), [1]) } };
    }
    return this.tail.feeds;
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
   * @param {boolean|(() => boolean)} final false for a partial while the user speaks: then a command reading is
   *   given only where the free transcript already is one (no search, no second decode), so that partials leave the
   *   cores to the voice detector and to the final decode. A function is asked after the free decode (a partial
   *   can be promoted to a final while it runs).
   * @param {number[]|null} hint the token ids of an earlier decode of the same utterance (its start, less audio),
   *   for drafts (see the header)
   */
  async transcribe(audio, settings, cancelled = () => false, final = true, hint = null) {
    const isFinal = typeof final === 'function' ? final : () => final;
    const t0 = performance.now();
    const windowLength = this.windowSamples(audio.length, settings);
    const { cross_k, cross_v, headSamples } = await this.#encode(audio, windowLength, settings);
    const encodeMs = performance.now() - t0;
    const budget = Math.min(
      this.dims.max_new_tokens,
      Math.ceil((settings.tokensPerSec * audio.length) / this.dims.sample_rate) + settings.tokenSlack,
    );
    const timing = () => ({ encodeMs, decodeMs: performance.now() - t0 - encodeMs, totalMs: performance.now() - t0,
      windowSecs: windowLength / this.dims.sample_rate, encodedSecs: headSamples / this.dims.sample_rate });
    const grammar = settings.grammarDecode && this.graph;
    if (!grammar) {
      const { states, logprobs, eotLogprob, ...result } = await this.#decode(cross_k, cross_v, this.table.prompt, budget,
        cancelled, settings, hint);
      return result.cancelled ? result : { command: null, ...result, prompted: false, ...timing() };
    }
    // The free transcript (what the server gets) and, where it is a command, its reading: no extra work for a
    // command heard well, nor for a clear question. One that opens as no command does ("why ...", "don't ...")
    // gets no reading at all: any would leave the opening out.
    const searchable = (text) => isFinal() && !this.graph.opensAsNoCommand(text);
    const free = await this.#read(this.table.prompt, cross_k, cross_v, budget, settings, cancelled, searchable, hint);
    if (free.cancelled) return free;
    // A reading that leaves out what may be the start of its word ("Okay, in pause." read "okay pause", which may
    // be "unpause") is no reading: no command rather than the opposite one.
    const flips = (command) => Boolean(command) && settings.misheardStartGuard
      && this.graph.dropsAMisheardStart(free.text, command.text);
    if (flips(free.command)) free.command = null;
    this.#confide(free.command, free, settings);
    const sure = free.command && free.command.confidence >= settings.commandMinConfidence;
    const short = audio.length <= settings.commandPromptMaxSecs * this.dims.sample_rate;
    // A short utterance heard unsurely may be a command misheard: decode it again prompted with the grammar's
    // commands, and keep that reading if it is confident.
    const commandPrompt = (settings.commandPromptFromSkills && this.skillPrompt) || this.commandPrompt;
    if (searchable(free.text) && !sure && short && commandPrompt
      && free.confidence < settings.commandPromptBelowConfidence) {
      const prompted = await this.#read(commandPrompt, cross_k, cross_v, budget, settings, cancelled);
      if (prompted.cancelled) return prompted;
      if (prompted.command && this.#weighsSupport(settings)) {
        const support = await this.#support(prompted.command.ids, free, cross_k, cross_v, cancelled);
        if (support === null) return { cancelled: true };
        prompted.command.support = support;
      }
      if (flips(prompted.command)) prompted.command = null;
      this.#confide(prompted.command, free, settings);
      if (prompted.command && prompted.command.confidence > (free.command?.confidence ?? 0)) {
        return { ...free, command: prompted.command, prompted: true, ...timing() };
      }
    }
    return { ...free, prompted: false, ...timing() };
  }

  /** A decode after `prompt` and its command reading (`search(text)`: whether to look beyond the free transcript
   * `text`). */
  async #read(prompt, crossK, crossV, budget, settings, cancelled, search = () => true, hint = null) {
    const decoded = await this.#decode(crossK, crossV, prompt, budget, cancelled, settings, hint);
    if (decoded.cancelled) return decoded;
    const { states, logprobs, eotLogprob, ...free } = decoded;
    const since = performance.now();
    const command = await this.#commandReading(decoded, states, crossK, crossV, budget, settings, cancelled,
      search(decoded.text));
    if (command?.cancelled) return command;
    if (command) command.ms = performance.now() - since;
    const result = { ...free, command };
    // Kept out of sight (not posted with the result): what `#support` reuses of this decode.
    Object.defineProperty(result, 'trace', { value: { states, logprobs, eotLogprob }, enumerable: false });
    return result;
  }

  /** One decoder run over `input`; `logits` holds a row for each input position from `logitsFrom` on. */
  async #step(input, pastK, pastV, crossK, crossV, logitsFrom = input.length - 1) {
    const feeds = {
      tokens: new this.ort.Tensor('int64', BigInt64Array.from(input, BigInt), [1, input.length]),
      past_k: pastK, past_v: pastV, cross_k: crossK, cross_v: crossV,
    };
    if (this.draftable) feeds.logits_from = new this.ort.Tensor('int64', BigInt64Array.of(BigInt(logitsFrom)), [1]);
    return this.decoder.run(feeds);
  }

  /** A self-attention cache cut to its first `length` positions (the drafted tokens a run refused dropped). */
  #truncate(cache, length) {
    const [layers, batch, heads, total, headDim] = cache.dims;
    if (length === total) return cache;
    const rows = layers * batch * heads;
    const out = new Float32Array(rows * length * headDim);
    for (let r = 0; r < rows; r++) {
      out.set(cache.data.subarray(r * total * headDim, (r * total + length) * headDim), r * length * headDim);
    }
    return new this.ort.Tensor('float32', out, [layers, batch, heads, length, headDim]);
  }

  /** A decode's state after a position of a run: its cache (cut to `length`, when first asked for) and `top`. */
  #state(newK, newV, length, top) {
    let pastK = null;
    let pastV = null;
    const cut = (cache) => this.#truncate(cache, length);
    return { top, get pastK() { return (pastK ??= cut(newK)); }, get pastV() { return (pastV ??= cut(newV)); } };
  }

  /** Tokens that probably follow `ids`: where `ids` meets `hint`, what follows there (see the header). */
  #drafts(ids, hint, max) {
    if (max <= 0 || !hint?.length) return [];
    const at = continuation(ids, hint);
    return at < 0 ? [] : hint.slice(at, at + max);
  }

  /** A self-attention cache of length 0: the first step's past. */
  #emptyCache() {
    const { layers, heads, head_dim: headDim } = this.dims;
    return new this.ort.Tensor('float32', new Float32Array(0), [layers, 1, heads, 0, headDim]);
  }

  /**
   * Greedy decoding after `prompt`, with drafts (`settings.draftTokens`, see the header) from `hint`.
   * `steps` (returned as `states`): per token predicted, the decoder state after the input before it and the
   * candidates for it, as if decoded one token per run.
   */
  async #decode(crossK, crossV, prompt, budget, cancelled, settings = {}, hint = null) {
    const vocab = this.dims.vocab;
    const maxDrafts = this.draftable ? settings.draftTokens ?? 0 : 0;
    let pastK = this.#emptyCache();
    let pastV = this.#emptyCache();
    let pending = prompt; // fed to the next run before its drafts
    const ids = [];
    const logprobs = [];
    const steps = [];
    let guard = null;
    let eotLogprob = null;
    let runs = 0;
    let drafted = 0;
    let kept = 0;
    decoding: for (;;) {
      if (cancelled()) return { cancelled: true, ids }; // the tokens so far still draft the decode that follows
      const drafts = this.#drafts(ids, hint, Math.min(maxDrafts, budget - ids.length - 1));
      const input = drafts.length ? [...pending, ...drafts] : pending;
      const out = await this.#step(input, pastK, pastV, crossK, crossV, pending.length - 1);
      runs++;
      drafted += drafts.length;
      const fed = pastK.dims[3] + pending.length; // cache length through the last pending token
      // Row j predicts the token after input[pending.length - 1 + j]: drafts[j] if the decoder agrees with it.
      for (let j = 0; j <= drafts.length; j++) {
        const { id, logprob, top } = this.#pick(out.logits.data.subarray(j * vocab, (j + 1) * vocab), runs === 1 && j === 0);
        steps.push(this.#state(out.new_k, out.new_v, fed + j, top));
        if (id === this.tokenizer.eot) {
          eotLogprob = logprob;
          break decoding;
        }
        ids.push(id);
        logprobs.push(logprob);
        const loopAt = repeatStart(ids);
        if (loopAt >= 0) {
          ids.length = loopAt; // drop the restarted loop: its words are already there once
          logprobs.length = loopAt;
          guard = 'repeat';
          break decoding;
        }
        if (ids.length >= budget) {
          guard = 'budget';
          break decoding;
        }
        if (j === drafts.length || id !== drafts[j]) {
          // The decoder's own token after the drafts it kept: fed next, after a cache cut to what it agreed with.
          pastK = this.#truncate(out.new_k, fed + j);
          pastV = this.#truncate(out.new_v, fed + j);
          pending = [id];
          break;
        }
        kept++;
      }
    }
    const words = logprobs.filter((_, i) => HAS_WORD.test(this.tokenizer.tokens[ids[i]]));
    const mean = words.length ? words.reduce((a, b) => a + b, 0) / words.length : -Infinity;
    const confidence = Math.exp(mean) * (guard ? 0.5 : 1);
    return { text: this.tokenizer.decode(ids), ids, confidence, guard, steps: ids.length + 1, runs, drafted, kept,
      logprobs, eotLogprob, states: steps.slice(0, ids.length + 1) };
  }

  /**
   * The grammar's most likely reading of the audio, or null when none is within the margin (see the header).
   * @returns {Promise<{text: string, confidence: number, margin: number, constrained: boolean, steps: number}|
   *   {cancelled: true}|null>}
   */
  async #commandReading(free, steps, crossK, crossV, budget, settings, cancelled, search = true) {
    const graph = this.graph;
    const states = [graph.start()]; // states[k]: after the free transcript's first k tokens
    let agreed = 0;
    for (; agreed < free.ids.length; agreed++) {
      const next = graph.feed(states[agreed], this.tokenText(free.ids[agreed]));
      if (!next) break;
      states.push(next);
    }
    const freeTotal = free.logprobs.reduce((a, b) => a + b, 0) + (free.eotLogprob ?? 0);
    if (agreed === free.ids.length && free.eotLogprob !== null && graph.complete(states[agreed])) {
      return this.#reading(free.ids.slice(), free.logprobs.slice(), steps.slice(0, agreed).map((s) => s.top), 0,
        false, states[agreed]);
    }
    if (!search) return null;
    const floor = freeTotal - settings.grammarMaxMarginNats;
    let root;
    if (agreed < steps.length) {
      root = { ...steps[agreed] };
    } else { // the free decode stopped on a guard after this token: the step after it was never run
      const last = steps[agreed - 1];
      const out = await this.#step([free.ids[agreed - 1]], last.pastK, last.pastV, crossK, crossV);
      root = { pastK: out.new_k, pastV: out.new_v, top: this.#pick(out.logits.data, false).top };
    }
    // The search starts where the graph refused the free transcript; when it finds nothing there, it starts again
    // from every shorter prefix the graph accepted (`grammarBacktrack`): "Time for 1 hour" is refused at " for" (no
    // command has the word "time" there), but the command "Timer for 1 hour" leaves the free transcript at its
    // first token. A prefix's own next token is left to the longer prefix (`skip`).
    const seed = (k, decoder) => ({ ids: free.ids.slice(0, k), chosen: free.logprobs.slice(0, k),
      tops: steps.slice(0, k).map((s) => s.top), state: states[k],
      total: free.logprobs.slice(0, k).reduce((a, b) => a + b, 0), skip: free.ids[k], ...decoder });
    const searchFrom = (beam, runs) => this.#search(beam, floor, runs, budget, settings, crossK, crossV, cancelled);
    let found = await searchFrom([seed(agreed, root)], 0);
    if (!found.cancelled && !found.best && settings.grammarBacktrack && agreed > 0) {
      found = await searchFrom(Array.from({ length: agreed }, (_, k) => seed(k, steps[k])), found.runs);
    }
    if (found.cancelled) return found;
    const { best, runs } = found;
    return best && this.#reading(best.ids, best.chosen, best.tops, best.total - freeTotal, true, best.state, runs);
  }

  /**
   * Best-first beam over the tokens the graph allows, from the hypotheses `beam`: a hypothesis's total only falls
   * as it grows, so the best finished reading beats every unfinished one whose total is already below it; none
   * below `floor`; at most `grammarMaxSteps` decoder steps in all (`runs` spent already).
   * @returns {Promise<{best: object|null, runs: number}|{cancelled: true}>}
   */
  async #search(beam, floor, runs, budget, settings, crossK, crossV, cancelled) {
    const { graph } = this;
    const eot = this.tokenizer.eot;
    let best = null;
    while (beam.length) {
      const children = [];
      for (const hyp of beam) {
        for (const candidate of hyp.top) {
          const total = hyp.total + candidate.logprob;
          if (total < floor) break; // candidates are sorted: none after this one fits either
          if (candidate.id === hyp.skip) continue;
          if (candidate.id === eot) {
            if (!graph.complete(hyp.state)) continue;
            if (!best || total > best.total) best = { ...hyp, total };
            floor = Math.max(floor, total);
            continue;
          }
          if (candidate.id > eot || hyp.ids.length >= budget) continue;
          const next = graph.feed(hyp.state, this.tokenText(candidate.id));
          if (next) children.push({ hyp, candidate, state: next, total });
        }
      }
      children.sort((a, b) => b.total - a.total);
      beam = [];
      for (const child of children) {
        if (beam.length >= settings.grammarBeam || child.total < floor) break;
        if (runs >= settings.grammarMaxSteps) break;
        if (cancelled()) return { cancelled: true };
        const { hyp, candidate } = child;
        const out = await this.#step([candidate.id], hyp.pastK, hyp.pastV, crossK, crossV);
        runs++;
        beam.push({ ids: [...hyp.ids, candidate.id], chosen: [...hyp.chosen, candidate.logprob],
          tops: [...hyp.tops, hyp.top], state: child.state, total: child.total,
          pastK: out.new_k, pastV: out.new_v, top: this.#pick(out.logits.data, false).top });
      }
    }
    return { best, runs };
  }

  /** Whether the confidence model names `support` (the forced decode it needs costs a few decoder steps). */
  #weighsSupport(settings) {
    const model = settings.commandConfidenceModel ?? COMMAND_CONFIDENCE_MODEL;
    return settings.calibratedCommandConfidence && 'support' in model;
  }

  /**
   * How much less likely the unprompted decoder finds the token sequence `ids` (then end of text) than the free
   * transcript `free`, in nats (≤ 0 unless greedy decoding missed a likelier sequence): the evidence the audio
   * alone gives a reading that a prompted decode found. The steps it shares with the free transcript are reused.
   * A free decode a guard stopped has no end of text to weigh, as for the margin (`#commandReading`).
   * @returns {Promise<number|null>} null when cancelled
   */
  async #support(ids, free, crossK, crossV, cancelled) {
    const { states, logprobs, eotLogprob } = free.trace;
    const freeTotal = logprobs.reduce((a, b) => a + b, 0) + (eotLogprob ?? 0);
    let shared = 0;
    while (shared < ids.length && shared < free.ids.length && ids[shared] === free.ids[shared]) shared++;
    if (shared === ids.length && shared === free.ids.length) return 0;
    let total = logprobs.slice(0, shared).reduce((a, b) => a + b, 0);
    // Run again the step that predicted token `shared` (its logits were not kept), then feed the rest of `ids`.
    let input = shared === 0 ? this.table.prompt : [free.ids[shared - 1]];
    let pastK = shared === 0 ? this.#emptyCache() : states[shared - 1].pastK;
    let pastV = shared === 0 ? this.#emptyCache() : states[shared - 1].pastV;
    for (let k = shared; k <= ids.length; k++) {
      if (cancelled()) return null;
      const out = await this.#step(input, pastK, pastV, crossK, crossV);
      total += this.#logprob(out.logits.data, k < ids.length ? ids[k] : this.tokenizer.eot, k === 0);
      if (k === ids.length) break;
      pastK = out.new_k;
      pastV = out.new_v;
      input = [ids[k]];
    }
    return total - freeTotal;
  }

  /** The log-probability of token `id` at a step with these logits, after the same suppression as `#pick`. */
  #logprob(logits, id, first) {
    this.#suppressIn(logits, first);
    let max = -Infinity;
    for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
    let sum = 0;
    for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
    return logits[id] - max - Math.log(sum);
  }

  /**
   * Set `reading.confidence` (null reading: nothing to do): the calibrated command confidence against the free
   * transcript `free` (the unprompted decode), or the design before when `calibratedCommandConfidence` is off.
   */
  #confide(reading, free, settings) {
    if (!reading) return;
    reading.features = { spelled: reading.spelled, margin: reading.margin, freeConfidence: free.confidence,
      readingWords: wordCount(reading.text), freeWords: wordCount(free.text, free.guard === 'repeat'),
      agreement: agreement(reading.text, free.text),
      // A reading of the free decode is scored without a prompt already: its support is its margin.
      support: reading.support ?? reading.margin };
    reading.confidence = settings.calibratedCommandConfidence
      ? commandConfidence(reading.features, settings.commandConfidenceModel ?? COMMAND_CONFIDENCE_MODEL)
      : reading.spelled * Math.exp(0.5 * Math.min(0, reading.margin));
  }

  /**
   * A command reading and how well its words are spelled (`spelled`): the geometric mean over word tokens of each
   * word's grouped probability. Free text (a wildcard) has no spelling the grammar can vouch for, so there the plain
   * token probabilities count, as in word confidence. Its `confidence` is set by #confide.
   */
  #reading(ids, logprobs, tops, margin, constrained, state, extraSteps = 0) {
    let grouped = 0, plain = 0, words = 0;
    ids.forEach((id, i) => {
      const word = this.#fold(id);
      if (!word) return;
      let mass = 0;
      for (const c of tops[i]) if (this.#fold(c.id) === word) mass += Math.exp(c.logprob);
      grouped += Math.log(Math.max(mass, Math.exp(logprobs[i])));
      plain += logprobs[i];
      words++;
    });
    if (!words) return null;
    const free = this.graph.usesFreeText(state);
    const spelled = Math.exp((free ? plain : grouped) / words);
    // confidence: set by #confide, which knows the free transcript it is weighed against
    return { text: this.tokenizer.decode(ids), ids: ids.slice(), confidence: 0, spelled, margin, constrained,
      freeText: free, steps: extraSteps };
  }

  /** Tokens never transcribed (and, at the first step, never first) get no probability: in place. */
  #suppressIn(logits, first) {
    for (const id of this.suppress) logits[id] = -Infinity;
    if (first) for (const id of this.suppressBegin) logits[id] = -Infinity;
  }

  /** Greedy choice after suppression, with the chosen token's log-probability and the best candidates. */
  #pick(logits, first) {
    this.#suppressIn(logits, first);
    // The TOP_CANDIDATES largest logits, kept sorted (descending) by insertion.
    const topIds = [];
    const topLogits = [];
    for (let i = 0; i < logits.length; i++) {
      const value = logits[i];
      if (topIds.length === TOP_CANDIDATES && value <= topLogits[TOP_CANDIDATES - 1]) continue;
      let at = topIds.length === TOP_CANDIDATES ? TOP_CANDIDATES - 1 : topIds.length;
      while (at > 0 && topLogits[at - 1] < value) {
        topIds[at] = topIds[at - 1];
        topLogits[at] = topLogits[at - 1];
        at--;
      }
      topIds[at] = i;
      topLogits[at] = value;
    }
    const max = topLogits[0];
    let sum = 0;
    for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
    const logSum = Math.log(sum);
    const top = topIds.map((id, k) => ({ id, logprob: topLogits[k] - max - logSum }));
    return { id: topIds[0], logprob: -logSum, top };
  }
}
