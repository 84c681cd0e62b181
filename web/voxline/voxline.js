// The page side of Voxline: loads the models, starts the two workers, opens the microphone, and turns the
// workers' messages into the public `voxline:*` events.
//
//   AudioWorklet ─► sample ring ─┬─► vad-worker (Silero, endpointing, smart-turn, Opus) ─► endpoint events ─┐
//                                └─► asr-worker (Whisper) ◄── decode requests ◄── this module ◄───────────────┘
//
// The final decode starts the moment a pause begins (speculatively); if the turn then ends, the transcript is
// usually ready already, and if the speaker goes on, the decode is cancelled. A partial decode still running at the
// pause that already has all the speech becomes the pause's decode (`promotePartials`).
//
// Intents: a final transcript confident enough is looked up in the IndexedDB cache (synchronous, no network),
// then in the Python grammar engine (Pyodide worker). Grammar-aware endpointing: the pause's decode that reads a
// command acts without waiting for the turn to end (`pauseIntentMinConfidence`), once the silence is as long as
// its kind waits for (`commandSilenceSecs`, `prefixCommandSilenceSecs`: whether more words could change the
// command); a partial, heard while the user still speaks, never acts. A speaker who goes on after a command acted
// amends it, repeats it, or asks for something more, which is then decided as a turn of its own (#goneOn).
// Anything else goes to the server, with the turn's Opus audio when the transcript is not confident; the spoken
// reply streams back and plays as it arrives, and speech during playback stops it at once (barge-in) and tells the
// server how much was heard. Speech before anything of the answer is audible holds it instead (turn.js): its audio
// is kept unplayed until that utterance turns out to be a turn of its own (then the held one is barged in on) or
// nothing, a cough (then the held answer goes on, its kept audio from the start).
// A confident transcript at a pause that the device cannot answer goes to the server speculatively
// (`speculativeTurns`): the LLM starts while the page waits to be sure the turn is over, and the answer is held
// there until the page confirms the turn (same final transcript) or cancels it (anything else). No speculative turn
// goes out while a server turn is held.

/** How long a low-confidence turn waits for its Opus packets (they follow the end of the turn by one flush). */
const TURN_AUDIO_WAIT_MS = 500;
/** Server turns whose sent transcript is kept for learning their intent (older ones are answered long since). */
const MAX_REMEMBERED_TURNS = 8;
import { Capture } from './capture.js';
import { EVENTS, Emitter } from './events.js';
import { IntentResolver, isCompleteCommand } from './intents.js';
import { normalize } from './normalize.js';
import { BackendLink } from './link.js';
import { compileRuntimeFile, fetchManifest, LoadLedger, loadModels, ModelLoadError } from './loader.js';
import { ReplyPlayer } from './player.js';
import { ERRORS, REPLY_AUDIO_RATE_HZ } from './protocol.js';
import { resolveSettings } from './settings.js';
import { TurnTimings } from './timings.js';
import { TurnMachine } from './turn.js';
import { spawnWorker } from './workers.js';

const FRAME = 512;

/** Whether two intents' slots are the same values (key order aside). */
function sameSlots(a = {}, b = {}) {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => JSON.stringify(a[k]) === JSON.stringify(b[k]));
}

/** A worker's answer to a load: its `ready` message (or the one named `ready`), or why it failed (`failed`). */
function whenReady(worker, name, { ready = 'ready', failed = 'error' } = {}) {
  return new Promise((resolve, reject) => {
    const onMessage = (event) => {
      if (event.data.type === ready) resolve(event.data);
      else if (event.data.type === failed) reject(new ModelLoadError('model_load_failed', `${name}: ${event.data.message}`));
      else return;
      worker.removeEventListener('message', onMessage);
    };
    worker.addEventListener('message', onMessage);
    worker.addEventListener('error', (event) => reject(new ModelLoadError('model_load_failed', `${name} worker failed to start: ${event.message ?? 'script error'}`)), { once: true });
  });
}

export class Voxline {
  /**
   * @param {{base?: string|URL, server?: string|URL|null, settings?: object, target?: EventTarget,
   *          token?: string|null|(() => string|Promise<string>),
   *          onProgress?: (fraction: number, loaded: number, total: number) => void}} options
   *   server: the backend's WebSocket URL (default: `/ws` on `base`); null runs without a backend.
   *   token: for a server with site keys: a token, or a function that gets a fresh one (`tokenFromUrl`).
   */
  constructor(options = {}) {
    this.base = new URL(options.base ?? new URL('..', import.meta.url));
    const ws = new URL('ws', this.base);
    ws.protocol = ws.protocol === 'https:' ? 'wss:' : 'ws:';
    this.serverUrl = options.server === null ? null : String(options.server ?? ws);
    this.token = options.token ?? null;
    /** @type {Map<number, {text: string, reheard: boolean}>} server turn id → the transcript this page sent */
    this.sentTurns = new Map();
    /** @type {((msg: object) => void)[]} waiting for the Opus packets of the turn that just ended */
    this.turnAudioWaiters = [];
    this.settings = resolveSettings(options.settings);
    /** Where the exchange stands, which server turn is unfinished, which replies play (turn.js). */
    this.exchange = new TurnMachine({ hold: this.settings.holdSilentAnswers });
    this.target = options.target ?? document;
    this.onProgress = options.onProgress ?? (() => {});
    this.capture = new Capture(this.settings);
    this.events = new Emitter(this.target, () => this.capture.audioTime);
    // Per-turn timings: built from the page's own events (and three facts of the link), one `voxline:timings` each.
    this.turnTimings = new TurnTimings((record) => this.events.emit(EVENTS.timings, record));
    this.events.observe((name, detail) => this.turnTimings.observe(name, detail));
    this.turn = null;
    /** @type {Map<number, {turn: object, requestedAt: number}>} decode request id → the turn it belongs to, and
     * when it was asked for (capture clock, s) */
    this.decodes = new Map();
    /** @type {Map<number, object>} partial decode id → the turn whose pause it was promoted for, until answered */
    this.promotions = new Map();
    this.requestId = 0;
    this.listening = false;
    /** @type {{turn: object, turnId: number, text: string}|null} the speculative server turn not yet settled */
    this.speculation = null;
    /** Server turns being sent (`#serverTurn` between its start and `sent`): no speculation goes out meanwhile. */
    this.sendingTurns = 0;
    /** Settles once the last barge-in has been sent: a speculative turn must not overtake it. */
    this.bargeInSent = Promise.resolve();
    /** @type {{turnId: number, chunks: Float32Array[]}|null} the reply audio of the held server turn (turn.js) */
    this.heldAudio = null;
    /** @type {Promise<boolean>|null} settles once smart-turn is up (true) or has failed (false); it loads after
     * `ready`, and until then the hangover ends every turn */
    this.turnDetection = null;
    /** @type {'waiting'|'loading'|'up'|'off'} where smart-turn stands (for a page or a test that polls) */
    this.turnDetectionState = 'waiting';
    /** @type {'waiting'|'up'|'off'} whether the ASR worker has the grammar's word graph (grammar-aware decoding);
     * it comes once the grammar engine is up, and until then commands are read from the free transcript alone */
    this.grammarDecodeState = this.settings.grammarDecode ? 'waiting' : 'off';
  }

  /** Load models and start the workers; fires `voxline:ready` (never waits for the microphone). */
  async load() {
    const started = performance.now();
    try {
      // Bytes per file, and whether they came from Cache Storage or the network: reported in `voxline:ready`.
      const ledger = new LoadLedger();
      // The engine (Pyodide) starts after `ready`: its start-up would slow the speech models' loading, and the
      // cache answers without it meanwhile.
      // Only intents from the configured server may enter the cache (none when there is no server).
      const intents = IntentResolver.create({ base: this.base, server: this.serverUrl, engine: false,
        maxEntries: this.settings.intentCacheMaxEntries }).catch((error) => {
        this.#fail('intent_cache_unavailable', `Local commands are off: the intent cache could not be opened (${error.message}).`);
        return null;
      });
      // The workers start first (their scripts load meanwhile) and set up onnxruntime while the models are read
      // (`runtime`, then `init`).
      this.vadWorker = spawnWorker('./vad-worker.js');
      this.asrWorker = spawnWorker('./asr-worker.js');
      const vadReady = whenReady(this.vadWorker, 'voice detection');
      const asrReady = whenReady(this.asrWorker, 'speech recognition');
      vadReady.catch(() => {}); // awaited below; a worker that fails sooner is reported then
      asrReady.catch(() => {});
      const manifest = await fetchManifest(this.base);
      const byRole = Object.fromEntries(manifest.models.map((m) => [m.role, m]));
      // What listening needs comes first; smart-turn (end of turn sooner than the hangover) comes after `ready`.
      const wanted = ['browser-asr', 'browser-vad'].map((role) => byRole[role]);
      const turnModel = byRole['browser-turn'];
      if (!turnModel || wanted.some((m) => !m)) throw new ModelLoadError('model_manifest_failed', 'The server lists no browser speech models; run `voxline models fetch` there.');
      const fetched = performance.now();
      // onnxruntime-web's wasm is fetched (and checked) and compiled once, here, and the module given to the workers.
      const ortRuntime = manifest.runtimes?.['onnxruntime-web'];
      let downloading = () => {};
      let ortAt = 0;
      const ortDownloading = new Promise((resolve) => { downloading = resolve; });
      const ortLoaded = (ortRuntime ? compileRuntimeFile(ortRuntime, 'ort-wasm-simd-threaded.wasm', this.base, ledger,
        { onDownload: downloading }) : Promise.resolve(null)).then((module) => {
        ortAt = performance.now();
        const runtime = module && { base: new URL(ortRuntime.base, this.base).href, module };
        if (runtime) {
          this.vadWorker.postMessage({ type: 'runtime', ort: runtime });
          this.asrWorker.postMessage({ type: 'runtime', ort: runtime, threads: this.settings.asrThreads });
        }
        return runtime;
      });
      const ringBuffer = this.capture.ring.shared ? this.capture.ring.buffer : null;
      // A cached runtime first (`runtimeFirst`): its workers then start it while the models are read. One that is
      // downloaded shares the link with the models (in turn it would leave the link idle while it compiles). An
      // altered runtime fails the load at once either way; `runtime` goes to each worker before its `init`.
      if (this.settings.runtimeFirst) await Promise.race([ortLoaded, ortDownloading]);
      const [files, ort] = await Promise.all([loadModels(wanted, this.base, this.onProgress, ledger), ortLoaded]);
      const loaded = performance.now();
      const [asrEntry, vadEntry] = wanted;
      const [asr, vad] = wanted.map((m) => files[m.name]);
      // The runtime went with `runtime` (from a server that lists none, each worker loads its own). The model bytes
      // are moved, not copied: the page keeps none of them.
      const vadModel = vad['silero_vad_v5_16k.onnx'];
      this.vadWorker.postMessage({ type: 'init', settings: this.settings, ringBuffer, vadModel,
        graphOptimization: vadEntry.graph_optimization ?? null }, [vadModel.buffer]);
      const { 'encoder.int8.onnx': encoder, 'decoder.int8.onnx': decoder, 'tokens.json': tokens } = asr;
      this.asrWorker.postMessage({ type: 'init', settings: this.settings, ringBuffer, threads: this.settings.asrThreads,
        encoder, decoder, tokens, graphOptimization: asrEntry.graph_optimization ?? null },
        [encoder.buffer, decoder.buffer, tokens.buffer]);
      const [vadInfo, asrInfo] = await Promise.all([vadReady, asrReady]);
      // Each worker's runtime start and model sessions, from this load's start (ms): what `workers_ms` waited for.
      const since = (epoch) => Math.round(epoch - performance.timeOrigin - started);
      const timeline = Object.fromEntries([['vad', vadInfo], ['asr', asrInfo]].map(([name, info]) => [name,
        info.timeline && Object.fromEntries(Object.entries(info.timeline).map(([stage, span]) => [stage, span.map(since)]))]));
      const phases = { manifest_ms: fetched - started, models_ms: loaded - fetched,
        workers_ms: performance.now() - loaded, ort_ms: ortAt - started, timeline };
      this.intents = await intents;
      this.opus = vadInfo.opus;
      this.#connect();
      this.vadWorker.onmessage = (e) => this.#fromVad(e.data);
      this.asrWorker.onmessage = (e) => this.#fromAsr(e.data);
      this.ready = this.events.emit(EVENTS.ready, {
        load_ms: performance.now() - started,
        models: wanted.map((m) => ({ name: m.name, bytes: m.files.reduce((s, f) => s + f.size, 0),
          graph_optimization: m.graph_optimization ?? null })),
        isolated: self.crossOriginIsolated,
        threads: asrInfo.threads,
        opus: vadInfo.opus,
        phases,
        bytes: ledger.totals(),
        files: [...ledger.files],
      });
      this.turnDetection = this.#startTurnDetection(turnModel, ort);
      this.intents?.startEngine(() => this.#sendLexicon(), (failure) => this.#fail(failure.code, failure.message));
      this.intents?.onGrammarChange(() => this.#sendLexicon());
      return this.ready;
    } catch (error) {
      this.vadWorker?.terminate();
      this.asrWorker?.terminate();
      this.#fail(error.code ?? 'load_failed', error.message);
      throw error;
    }
  }

  /**
   * Load smart-turn after `ready` and hand it to the listening worker. Until it is up (and for good if it fails:
   * `turn_detection_failed`, not fatal) the hangover ends every turn.
   * @returns {Promise<boolean>} whether smart-turn is up
   */
  async #startTurnDetection(model, ort) {
    this.turnDetectionState = 'loading';
    try {
      const files = await loadModels([model], this.base);
      const answer = whenReady(this.vadWorker, 'smart-turn', { ready: 'turn-ready', failed: 'turn-failed' });
      this.vadWorker.postMessage({ type: 'turn-model', turnModel: files[model.name]['smart-turn-v3.2.onnx'],
        graphOptimization: model.graph_optimization ?? null, ort });
      await answer;
      this.turnDetectionState = 'up';
      return true;
    } catch (error) {
      this.turnDetectionState = 'off';
      this.#fail('turn_detection_failed', `Turn detection is off (${error.message}); each turn ends after ${this.settings.hangoverSecs} s of silence.`);
      return false;
    }
  }

  /** Open the microphone and start listening. */
  async listen() {
    try {
      await this.capture.start();
    } catch (error) {
      const denied = error.name === 'NotAllowedError';
      this.#fail(denied ? 'mic_denied' : 'mic_unavailable', denied
        ? 'Microphone access was refused. Allow the microphone for this site and try again.'
        : `No microphone could be opened (${error.message}). Connect one and try again.`);
      throw error;
    }
    if (!this.capture.ring.shared) {
      this.capture.blockListeners.push((samples) => {
        this.vadWorker.postMessage({ type: 'block', samples });
        this.asrWorker.postMessage({ type: 'block', samples });
      });
    }
    this.listening = true;
    this.vadWorker.postMessage({ type: 'listen', from: 0 });
  }

  /**
   * Forget every command this page learned (the IndexedDB intent cache, in every tab of this origin): the next
   * time, each is recognised again by the grammar or the server.
   * @returns {Promise<void>}
   */
  async clearCache() {
    await this.intents?.clearCache();
  }

  async stop() {
    this.listening = false;
    this.link?.close();
    this.vadWorker?.postMessage({ type: 'stop' });
    clearInterval(this.turn?.partialTimer);
    await this.capture.stop();
  }

  /**
   * Let go of everything this instance holds: the microphone, the connection, the workers, the intent engine and
   * the audio output. The instance cannot be used again; a new one loads from the browser's caches.
   */
  async dispose() {
    await this.stop().catch(() => {}); // the microphone may never have opened
    this.vadWorker?.terminate();
    this.asrWorker?.terminate();
    this.intents?.close();
    await this.player?.context?.close().catch(() => {});
  }

  #fail(code, message, turnId = undefined) {
    this.events.emit(EVENTS.error, { code, message, ...(turnId === undefined ? {} : { turn_id: turnId }) });
  }

  /** Give the recogniser the grammar's word graph, for command readings (grammar-aware decoding). */
  #sendLexicon() {
    if (!this.settings.grammarDecode || !this.intents) return;
    this.intents.lexicon().then((lexicon) => {
      this.asrWorker.postMessage({ type: 'lexicon', lexicon }); // ahead of any decode asked for after this
      this.grammarDecodeState = 'up';
    }).catch((error) => {
      this.grammarDecodeState = 'off';
      this.#fail('grammar_decode_unavailable', `Commands are recognised without the grammar's help: its word graph could not be built (${error.message}).`);
    });
  }

  /** Ask the ASR worker for a decode of [start, end); the answer comes back to `turn` by request id. */
  #decode(turn, start, end, final) {
    const id = ++this.requestId;
    this.decodes.set(id, { turn, requestedAt: this.capture.audioTime });
    this.asrWorker.postMessage({ type: 'decode', id, start, end, final,
      sentAtEpochMs: performance.timeOrigin + performance.now() });
    return id;
  }

  #fromVad(msg) {
    if (msg.type === 'error') return this.#fail(msg.code, msg.message);
    if (msg.type === 'opus') {
      this.turnAudio = msg; // the last turn's Opus packets, for the uplink when the server must re-recognise
      for (const waiter of this.turnAudioWaiters.splice(0)) waiter(msg);
      return;
    }
    if (msg.type === 'turn-prob') {
      this.lastTurnCheck = msg;
      return;
    }
    if (msg.type !== 'endpoint') return;
    const ev = msg.event;
    const rate = this.settings.sampleRate;
    const turn = this.turn;
    if (ev.type === 'speech-start') {
      this.turn = { start: ev.start, voicedAt: ev.voicedAt, final: null, result: null, ended: false };
      this.events.emit(EVENTS.speechStart, { start_t: ev.voicedAt / rate });
      this.#exchangeInput({ type: 'speech-start' }); // over reply audio: barge-in; over a silent answer: hold
      this.turn.partialTimer = setInterval(() => this.#partial(), this.settings.partialEverySecs * 1000);
    } else if (!turn) {
      return;
    } else if (ev.type === 'pause') {
      // Speculative: decode what was said so far now, so the transcript is ready when the turn is declared over.
      const partial = turn.partial;
      if (this.settings.promotePartials && partial && partial.end >= ev.end) {
        turn.final = { end: ev.end, pauseId: ev.pauseId, id: partial.id, promoted: true, silent: new Set() };
        this.promotions.set(partial.id, turn);
        this.asrWorker.postMessage({ type: 'promote', id: partial.id });
      } else {
        const end = Math.min(this.capture.ring.written, ev.end + FRAME);
        const id = this.#decode(turn, ev.start, end, true);
        turn.final = { end: ev.end, pauseId: ev.pauseId, id, silent: new Set() };
      }
    } else if (ev.type === 'command-silence') {
      // Long enough a silence for a command of this kind: one the pause's decode read acts now.
      if (turn.final?.pauseId !== ev.pauseId) return;
      turn.final.silent.add(ev.kind);
      const waiting = turn.final.waitingCommand;
      if (waiting && !turn.dispatched && turn.final.silent.has(waiting.kind)) this.#act(turn, waiting, { early: true });
    } else if (ev.type === 'resume') {
      if (turn.dispatched && turn.continuedAt === undefined) { // the speaker went on after a command acted: #goneOn
        turn.continuedAt = ev.start;
        turn.continuedVoicedAt = ev.voicedAt;
      }
      this.#cancelSpeculation(turn); // what was heard at the pause is not the whole turn
      // A pause the detector had heard long enough for a command (`command-silence`) is decided by what was said
      // before it, however late its decode answers: on a busy machine the speaker may go on before it does, and
      // acting or not must follow the audio, not the machine's speed. Other pauses' decodes are cancelled.
      if (this.settings.latePauseDecodes && turn.final && !turn.dispatched && !turn.final.promoted
        && turn.final.silent.size) {
        (turn.lapsed ??= new Map()).set(turn.final.id, { ...turn.final, resumedAt: ev.start, resumedVoicedAt: ev.voicedAt });
      } else if (turn.final) {
        this.asrWorker.postMessage({ type: 'cancel', id: turn.final.id });
      }
      if (turn.final?.promoted) turn.partial = null;
      turn.final = null;
      turn.result = null;
    } else if (ev.type === 'speech-end') {
      clearInterval(turn.partialTimer);
      this.turn = null;
      turn.ended = true;
      turn.end = ev.end;
      this.events.emit(EVENTS.speechEnd, {
        start_t: turn.voicedAt / rate, end_t: ev.end / rate, reason: ev.reason,
        // diagnostics: how far the listening worker ran behind the microphone, and smart-turn's last answer
        lag_s: (msg.written - ev.end) / rate - ev.silence_s,
        turn_prob: this.lastTurnCheck?.prob, turn_check_ms: this.lastTurnCheck?.ms,
      });
      this.#exchangeInput({ type: 'speech-end', wentOn: turn.continuedAt !== undefined });
      if (turn.final?.end !== ev.end) {
        const end = Math.min(this.capture.ring.written, ev.end + FRAME);
        turn.final = { end: ev.end, id: this.#decode(turn, ev.start, end, true) };
        turn.result = null;
      } else if (turn.result) {
        this.#finish(turn);
      }
    }
  }

  #partial() {
    const turn = this.turn;
    if (!turn || turn.final) return; // paused: the speculative final is already running
    const end = this.capture.ring.written;
    if (end - turn.voicedAt >= this.settings.sampleRate * this.settings.firstPartialSecs) {
      turn.partial = { id: this.#decode(turn, turn.start, end, false), end };
    }
  }

  #fromAsr(msg) {
    if (msg.type === 'error') {
      const { turn } = this.decodes.get(msg.id) ?? {};
      this.decodes.delete(msg.id);
      this.#fail(msg.code, msg.message);
      // the decode the ended turn waited for: nothing to act on (its error said why)
      if (turn?.ended && turn.final?.id === msg.id) {
        this.#cancelSpeculation(turn);
        this.#exchangeInput({ type: 'nothing' });
      }
      return;
    }
    if (msg.type === 'promoted') return this.#promoted(msg);
    if (msg.type !== 'transcript') return;
    const { turn, requestedAt } = this.decodes.get(msg.id) ?? {};
    this.decodes.delete(msg.id);
    if (!turn) return;
    if (turn.partial?.id === msg.id) turn.partial = null;
    if (!msg.final) {
      if (turn === this.turn && !turn.final && msg.text) {
        this.events.emit(EVENTS.transcript, { text: msg.text, final: false, confidence: msg.confidence });
      }
      return;
    }
    if (turn.final?.id !== msg.id) { // a pause's decode the speaker talked over: it may still decide (see 'resume')
      if (turn.lapsed?.has(msg.id) && msg.text) this.#earlyIntent(turn, msg);
      return;
    }
    if (turn.final.pauseId) this.vadWorker.postMessage({ type: 'asr-idle', pauseId: turn.final.pauseId });
    turn.result = { ...msg, requestedAt, answeredAt: this.capture.audioTime };
    if (turn.ended) this.#finish(turn);
    // The pause's decode has all the speech so far, read with the grammar's help: a complete command in it need
    // not wait for the turn's end, and a question can start on the server.
    else if (msg.text) this.#earlyIntent(turn, msg).then(() => this.#speculate(turn, msg));
  }

  /** The worker's answer to `promote`: a partial that finished (or was dropped) first needs a decode of its own. */
  #promoted(msg) {
    const turn = this.promotions.get(msg.id);
    this.promotions.delete(msg.id);
    if (msg.promoted || !turn?.final?.promoted || turn.final.id !== msg.id) return;
    const end = Math.min(this.capture.ring.written, turn.final.end + FRAME);
    turn.final = { ...turn.final, promoted: false, id: this.#decode(turn, turn.start, end, true) };
  }

  #finish(turn) {
    const result = turn.result;
    if (!result.text) { // nothing intelligible: nothing to act on
      this.#cancelSpeculation(turn);
      return this.#exchangeInput({ type: 'nothing' });
    }
    const rate = this.settings.sampleRate;
    this.events.emit(EVENTS.transcript, {
      text: result.text, final: true, confidence: result.confidence,
      command: result.command && { text: result.command.text, confidence: result.command.confidence,
        margin: result.command.margin, constrained: result.command.constrained },
      start_t: (turn.final.addition ? turn.continuedVoicedAt : turn.voicedAt) / rate, end_t: turn.end / rate,
      timings: { encode_ms: result.encodeMs, decode_ms: result.decodeMs, command_ms: result.command?.ms,
        total_ms: result.totalMs, queued_ms: result.queuedMs, window_s: result.windowSecs, guard: result.guard,
        // the audio the encoder computed (the rest of the window came from the cached silent tail)
        encoded_s: result.encodedSecs,
        // the free decode's decoder runs, and the tokens of them a partial drafted and the decoder kept
        decoder_runs: result.runs, drafts_kept: result.kept,
        // on the capture clock: when the page asked for this decode (the pause, or the end of the turn) and when
        // its answer came back
        requested_t: result.requestedAt, answered_t: result.answeredAt },
    });
    const decided = !turn.dispatched || turn.final.addition ? this.#finalIntent(turn, result)
      : turn.continuedAt !== undefined ? this.#goneOn(turn, result) : null;
    // Only the server path confirms a speculation (#serverTurn): whatever else the turn became, it is cancelled.
    Promise.resolve(decided).finally(() => this.#cancelSpeculation(turn));
  }

  /**
   * A command acted on at a pause, after which the speaker went on; `decoded` is the whole turn. When it reads as
   * another local command ("turn the volume down" … "to thirty percent"), that acts too, as an intent with
   * `amends` (the intent and slots it corrects), so the host ends where the user meant; when it reads as the same
   * one ("go back" … "one song", "… please"), nothing more is done. Anything else holds a request of its own ("skip
   * this song" … "and set a timer for ten minutes"; "… and what's the weather like"): what the speaker added is
   * decoded on its own (from where they went on) and decided as any turn is (#finish), by the cache, the grammar
   * or the server (with the transcript alone: the turn's audio also holds the command that acted).
   */
  async #goneOn(turn, decoded) {
    const acted = turn.acted;
    const whole = await this.#localCommand(decoded, this.settings.commandMinConfidence,
      this.settings.localIntentMinConfidence);
    if (whole?.match.intent === acted.intent && sameSlots(whole.match.slots, acted.slots)) {
      return this.#exchangeInput({ type: 'nothing' });
    }
    if (whole) return this.#act(turn, whole, { amends: acted });
    const end = Math.min(this.capture.ring.written, turn.end + FRAME);
    turn.final = { end: turn.end, id: this.#decode(turn, turn.continuedAt, end, true), addition: true };
    turn.result = null;
  }

  #dispatch(turn, source, text, confidence, intent, extra = {}) {
    turn.dispatched = true;
    turn.acted = { intent: intent.intent, slots: intent.slots ?? {} };
    this.events.emit(EVENTS.intent, {
      intent: intent.intent, slots: intent.slots ?? {}, source, text, confidence,
      confirmation: intent.confirmation ?? null, ...extra,
    });
    this.#exchangeInput({ type: 'command' });
  }

  /**
   * The local command a decode says, or null: its command reading when that reaches `readingGate` (grammar-aware
   * decoding; the command confidence is calibrated, see `commandMinConfidence`), else the free transcript when its
   * word confidence reaches `freeGate`; matched in the cache (words learned before) or by the grammar engine.
   * `complete` (asked for with `needComplete`): nothing longer could extend it (see #cachedCommand).
   * @returns {Promise<{text: string, confidence: number, match: object, source: 'cache'|'local',
   *   complete?: boolean}|null>}
   */
  async #localCommand(decoded, readingGate, freeGate, needComplete = false) {
    const reading = decoded.command;
    const heard = reading && reading.confidence >= readingGate ? reading : decoded;
    if (!this.intents || heard.confidence < (heard === reading ? readingGate : freeGate)) return null;
    const { text, confidence } = heard;
    const cached = this.intents.peek(text);
    if (cached) return this.#cachedCommand(text, confidence, cached, needComplete);
    const result = await this.intents.recognize(text).catch(() => null);
    if (!result?.match) return null;
    return { text, confidence, match: result.match, source: 'local',
      complete: isCompleteCommand(result, this.settings.completeByMeaning) };
  }

  /**
   * A cache hit as a command. Words the server resolved count as complete (it saw them as a whole turn); words
   * the grammar resolved before are as complete as the grammar says ("turn the volume down" can go on "to 30"),
   * asked only when it matters (`needComplete`); the engine not there yet: not complete, the safe side.
   */
  async #cachedCommand(text, confidence, entry, needComplete) {
    const command = { text, confidence, match: entry, source: 'cache' };
    if (!needComplete) return command;
    if (entry.source_of_entry !== 'local') return { ...command, complete: true };
    const result = await this.intents.recognize(text).catch(() => null);
    return { ...command, complete: isCompleteCommand(result, this.settings.completeByMeaning) };
  }

  /** Act on a local command (the grammar's matches are learned, so the same words come from the cache next). */
  #act(turn, command, extra = {}) {
    this.#dispatch(turn, command.source, command.text, command.confidence, command.match, extra);
    if (command.source === 'local') this.intents.remember(command.text, command.match, 'local');
  }

  /**
   * Grammar-aware endpointing: the pause's decode (all the speech so far, read with the grammar's help) that reads
   * a command acts before the turn is over, when its confidence reaches `pauseIntentMinConfidence` and the detector
   * has heard the silence its kind waits for (`command-silence`): a complete command that nothing longer could
   * extend `commandSilenceSecs`, one that could go on ("turn the volume down" … "to 30") `prefixCommandSilenceSecs`.
   * A partial, taken while the user still speaks, never acts: that would act on part of what was said.
   * The pause decoded is the turn's current one, or one the speaker went on after before it was decided (see
   * 'resume'), which acts only on the silence heard before they did, and only while the turn is not over (then its
   * final decides, as at any speed).
   */
  async #earlyIntent(turn, decoded) {
    const gate = this.settings.pauseIntentMinConfidence;
    if (!this.intents || turn.dispatched || !decoded.final) return;
    const pauseOf = () => (turn.final?.id === decoded.id ? turn.final : turn.lapsed?.get(decoded.id));
    const stale = () => turn.ended || !pauseOf();
    const learned = decoded.confidence >= gate ? this.intents.peek(decoded.text) : null;
    const found = learned
      ? await this.#cachedCommand(decoded.text, decoded.confidence, learned, true)
      : await this.#localCommand(decoded, Math.max(gate, this.settings.commandMinConfidence), gate, true);
    // stale: the turn is over (its final decides), or a pause the speaker talked over too soon for any command
    if (turn.dispatched || stale() || !found) return;
    const command = { ...found, kind: found.complete ? 'complete' : 'prefix' };
    const pause = pauseOf();
    const lapsed = pause !== turn.final;
    if (!pause.silent.has(command.kind)) {
      if (!lapsed) turn.final.waitingCommand = command; // its silence may come yet
      return;
    }
    if (lapsed && turn.continuedAt === undefined) { // what the speaker added after it is read as #goneOn says
      turn.continuedAt = pause.resumedAt;
      turn.continuedVoicedAt = pause.resumedVoicedAt;
    }
    this.#act(turn, command, { early: true });
  }

  /**
   * The zero-round-trip path for a final transcript: the exact words in the cache (a command learned from the
   * server is keyed by them), then the command reading (or the free transcript) in the cache and the local grammar;
   * else the server's turn, with the free transcript (a question is not a command).
   */
  async #finalIntent(turn, decoded) {
    const command = await this.#finalCommand(decoded);
    if (command) return this.#act(turn, command);
    return this.#serverTurn(turn, decoded.text, decoded.confidence);
  }

  /** The command the device answers a final transcript with (see #finalIntent), or null: the server's turn. */
  async #finalCommand(decoded) {
    const { text, confidence } = decoded;
    const learned = this.intents && confidence >= this.settings.localIntentMinConfidence ? this.intents.peek(text)
      : null;
    if (learned) return { text, confidence, match: learned, source: 'cache' };
    return this.#localCommand(decoded, this.settings.commandMinConfidence, this.settings.localIntentMinConfidence);
  }

  /**
   * Speculative start: the pause's decode, if the turn ended now, would go to the server (neither the cache nor the
   * grammar answers it: nothing leaves the device for a command it can answer) with a confident transcript. Send
   * it now as a speculative turn, so the LLM works while the endpointer makes sure the user has finished; the
   * turn's final transcript confirms it (#serverTurn) or anything else cancels it (#cancelSpeculation).
   */
  async #speculate(turn, decoded) {
    const settings = this.settings;
    // No speculation over a held turn, even one finished on the server: the barge-in it may still need (when this
    // utterance turns out to be a turn) is refused by the server while a speculative turn is open.
    const open = () => !turn.ended && !turn.dispatched && turn.final?.id === decoded.id && !this.speculation
      && this.sendingTurns === 0 && this.exchange.serverTurn === null && this.exchange.held === null
      && this.link?.connected;
    if (!settings.speculativeTurns || decoded.confidence < settings.speculativeMinConfidence || !open()) return;
    // A turn the server would re-recognise goes with its audio, at the end of the turn: a speculative one has none.
    if (this.link.wantsAudio(decoded.confidence, settings.localIntentMinConfidence)) return;
    if (await this.#finalCommand(decoded)) return;
    await this.bargeInSent; // one turn at a time on the server: the one talked over must be ended first
    if (!open()) return; // the turn ended (its final path decides), or the user went on, meanwhile
    const turnId = this.link.sendSpeculativeTurn({ transcript: decoded.text, confidence: decoded.confidence });
    if (turnId !== null) this.speculation = { turn, turnId, text: decoded.text };
  }

  /** The speculative turn sent for `turn` (if any) is not the user's turn: the server drops it without a trace. */
  #cancelSpeculation(turn) {
    if (this.speculation?.turn !== turn) return;
    this.link?.cancelTurn(this.speculation.turnId);
    this.speculation = null;
  }

  /**
   * A command the server resolved is learned, so that the same words are answered on the device next time; only
   * when it can be trusted: from the configured server (the cache checks the origin), under the same grammar
   * version, with slot values the local grammar accepts, and keyed by the words this page heard and sent (not
   * when the server had to re-recognise the audio: then the page's own transcript was not what was said).
   */
  async #learn(turnId, msg, match) {
    const sent = this.sentTurns.get(turnId);
    this.sentTurns.delete(turnId);
    const intents = this.intents;
    if (!intents?.ready || !sent || sent.reheard) return;
    if (msg.grammar_version && msg.grammar_version !== intents.cache.grammarVersion) return;
    const problem = await intents.validate(match.intent, match.slots ?? {}).catch((error) => error.message);
    if (!problem) await intents.remember(sent.text, match, this.serverUrl);
  }

  /** A reply player at `sampleRate` (the protocol's until the server's `welcome` says otherwise). */
  #makePlayer(sampleRate) {
    return new ReplyPlayer({
      sampleRate,
      onFirstSample: (turnId) => this.events.emit(EVENTS.replyAudio, { first: true, turn_id: turnId }),
      onFinished: ({ replyId, reason, playedMs }) => {
        this.events.emit(EVENTS.replyAudio, {
          last: true, turn_id: replyId, interrupted: reason === 'stopped', played_ms: Math.round(playedMs) });
        this.#exchangeInput({ type: 'playback-ended', turnId: replyId });
      },
    });
  }

  /**
   * The server's `welcome`: its reply audio comes at the sample rate it announced. A player at another rate would
   * play it too fast or too slow, so it is replaced (rarely: every Voxline server so far speaks at 24 kHz).
   * @param {import('./link.js').ServerTerms} terms
   */
  #welcomed(terms) {
    if (this.player.rate === terms.replySampleRate) return;
    this.player.context?.close().catch(() => {});
    this.player = this.#makePlayer(terms.replySampleRate);
    this.player.warmUp().catch(() => {});
  }

  #connect() {
    if (!this.serverUrl) return;
    this.player = this.#makePlayer(REPLY_AUDIO_RATE_HZ);
    this.link = new BackendLink(this.serverUrl, {
      onWelcome: (terms) => this.#welcomed(terms),
      onStatus: (connected) => {
        this.backendConnected = connected;
        if (!connected) {
          this.speculation = null; // the server dropped it with the connection
          this.#exchangeInput({ type: 'link-down' });
          this.turnTimings.linkDown();
        }
      },
      onState: (state, detail) => this.events.emit(EVENTS.link, { state, ...detail }),
      onTranscript: (turnId, text, confidence) => {
        const sent = this.sentTurns.get(turnId);
        if (sent && normalize(text) !== normalize(sent.text)) sent.reheard = true;
        this.events.emit(EVENTS.transcript, { text, final: true, confidence: confidence ?? 1, source: 'server', turn_id: turnId });
      },
      onIntent: (turnId, msg) => {
        const match = { intent: msg.intent, slots: msg.slots, confirmation: msg.confirmation };
        this.events.emit(EVENTS.intent, { ...match, source: 'server', text: msg.text, confidence: 1, turn_id: turnId });
        this.#learn(turnId, msg, match);
      },
      onReplyDelta: (turnId, text) => this.#exchangeInput({ type: 'reply-text', turnId, text }),
      onReplyAudio: (turnId, samples) => this.#exchangeInput({ type: 'reply-audio', turnId }, samples),
      onReplyDone: (turnId, text, interrupted) => this.#exchangeInput({ type: 'reply-done', turnId, text, interrupted }),
      onTimings: (turnId, timings) => {
        this.lastTimings = timings;
        this.turnTimings.serverTimings(turnId, timings);
      },
      onTurnSent: (turnId, transcript) => this.turnTimings.sent(turnId, this.capture.audioTime, transcript),
      onError: (code, message, turnId) => this.#fail(code, message, turnId),
    }, { opus: this.opus, token: this.token, reconnect: { firstMs: this.settings.reconnectFirstMs, maxMs: this.settings.reconnectMaxMs,
      jitter: this.settings.reconnectJitter } });
    this.link.connect();
    this.player.warmUp().catch(() => {}); // an AudioContext takes a while to start: not on the first reply
  }

  /**
   * Feed the exchange's state machine (turn.js) and carry out what it says. `samples`: the reply audio of a
   * `reply-audio` input.
   * @param {import('./turn.js').TurnInput} input
   * @returns {Promise<void>} settled once a barge-in it called for has been sent
   */
  #exchangeInput(input, samples = null) {
    let bargedIn = Promise.resolve();
    for (const effect of this.exchange.input({ t: this.capture.audioTime, ...input })) {
      if (effect.type === 'phase') {
        const { type, phase, turnId, ...detail } = effect;
        this.events.emit(EVENTS.turn, { state: phase, ...detail,
          ...(turnId === undefined ? {} : { turn_id: turnId }) });
      } else if (effect.type === 'barge-in') {
        bargedIn = this.bargeInSent = this.#bargeIn(effect.turnId);
      } else if (effect.type === 'play') {
        if (effect.begin) this.player.begin(effect.turnId);
        this.player.push(effect.turnId, samples);
      } else if (effect.type === 'hold' || effect.type === 'release' || effect.type === 'drop') {
        this.#heldReply(effect, samples);
      } else if (effect.type === 'end-playback') {
        this.player.end(effect.turnId);
      } else if (effect.type === 'reply') {
        const { type, turnId, audioPending, ...detail } = effect;
        this.events.emit(EVENTS.reply, { ...detail, turn_id: turnId });
        if (detail.final) this.turnTimings.replyDone(turnId, { interrupted: detail.interrupted, audioPending });
      }
    }
    return bargedIn;
  }

  /**
   * The reply audio of a held server turn. It is kept here, not queued on a paused player: the player is one
   * worklet for every reply, so pausing it would also hold audio that must stop or play out, and a reply queued there
   * would count as playing (`player.playing`), which a barge-in reads as heard. Released, it is queued from its
   * first chunk as any reply is; dropped, none of it plays (and a turn whose `reply.done` said audio was pending
   * has its timings completed without it).
   * @param {{type: 'hold'|'release'|'drop', turnId: number, replied?: boolean}} effect
   * @param {Float32Array|null} samples the chunk to keep (`hold`)
   */
  #heldReply({ type, turnId, replied }, samples) {
    if (type === 'hold') {
      if (this.heldAudio?.turnId !== turnId) this.heldAudio = { turnId, chunks: [] };
      this.heldAudio.chunks.push(samples);
      return;
    }
    const chunks = this.heldAudio?.turnId === turnId ? this.heldAudio.chunks : [];
    this.heldAudio = null;
    if (type === 'release') {
      this.player.begin(turnId);
      for (const chunk of chunks) this.player.push(turnId, chunk);
    } else if (replied) {
      this.turnTimings.replyDone(turnId, { interrupted: true, audioPending: false });
    }
  }

  /**
   * The user speaks over a reply (turn.js decided it): stop it now. Playing audio is stopped (`voxline:reply-audio
   * {last: true, interrupted: true, played_ms}`), and `barge_in` says how much of it was heard; an unfinished reply
   * not yet audible is cancelled with nothing heard. The server cancels generation if it is still running (its
   * `reply.done` says interrupted) and keeps only what was heard in the dialog, whether or not it had finished the
   * reply. Resolves once `barge_in` is sent, so a new turn never overtakes it. A held turn is barged in on with
   * nothing heard, also when it has finished on the server (which then trims its dialog to what was heard).
   * @param {number|null} turnId the unfinished or held server turn (null: only a reply's tail is playing)
   */
  async #bargeIn(turnId) {
    if (this.player?.playing) { // also the tail of a reply the server has finished sending
      const { replyId, playedMs } = await this.player.stop();
      const heardTurn = replyId ?? turnId; // null: playback had just ended, all of it was heard
      if (heardTurn != null) this.link?.bargeIn(heardTurn, replyId === null ? Number.MAX_SAFE_INTEGER : playedMs);
    } else if (turnId != null) {
      this.link?.bargeIn(turnId, 0);
    }
  }

  #turnAudio(turn) {
    if (this.turnAudio?.end === turn.end) return Promise.resolve(this.turnAudio);
    // The packets come after one encoder flush, usually a few milliseconds after the end of the turn.
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(null), TURN_AUDIO_WAIT_MS);
      this.turnAudioWaiters.push((msg) => {
        clearTimeout(timer);
        resolve(msg.end === turn.end ? msg : null);
      });
    });
  }

  /**
   * Hand the turn to the backend: the transcript, and its audio when the confidence is below the gate; or, when
   * this turn went out speculatively with the same transcript, confirm that (its answer is ready or under way).
   */
  async #serverTurn(turn, text, confidence) {
    this.sendingTurns += 1;
    try {
      if (this.link?.dormant) await this.link.wake(); // closed for idling: back for this turn
      if (!this.link?.connected) {
        this.#exchangeInput({ type: 'unreachable' });
        this.#fail(ERRORS.backendUnreachable, this.serverUrl
          ? 'The Voxline server is unreachable, so only local commands work right now. It reconnects by itself.'
          : 'No Voxline server is configured: only local commands work.');
        return;
      }
      // The server re-recognises below its own gate (`welcome`); the audio goes with every turn it will use it for.
      // what the speaker added after a command acted goes without: the turn's audio holds that command too
      const wanted = turn.continuedAt === undefined
        && this.link.wantsAudio(confidence, this.settings.localIntentMinConfidence);
      const packets = wanted && this.opus ? await this.#turnAudio(turn) : null;
      const audio = packets && { ...packets, seconds: (packets.end - packets.start) / this.settings.sampleRate };
      // A speculation this turn does not confirm (another transcript, or another utterance's) ends before anything
      // else is sent: the server holds one turn at a time.
      const speculation = this.speculation;
      const confirming = speculation?.turn === turn && speculation.text === text && !audio;
      if (speculation && !confirming) this.#cancelSpeculation(speculation.turn);
      await this.#exchangeInput({ type: 'sending' }); // the protocol allows one unfinished turn at a time
      if (confirming) this.speculation = null;
      const turnId = confirming && this.link.confirmTurn(speculation.turnId, text) ? speculation.turnId
        : this.link.sendTurn({ transcript: text, confidence, audio });
      this.#exchangeInput({ type: 'sent', turnId });
      this.sentTurns.set(turnId, { text, reheard: false });
      for (const old of this.sentTurns.keys()) {
        if (this.sentTurns.size > MAX_REMEMBERED_TURNS) this.sentTurns.delete(old);
      }
    } finally {
      this.sendingTurns -= 1;
    }
  }
}

/** Load, fire `voxline:ready`, then listen: what the demo page does with `?autostart=1`. */
export async function startVoxline(options = {}) {
  const voxline = new Voxline(options);
  await voxline.load();
  await voxline.listen();
  return voxline;
}
