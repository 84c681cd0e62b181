// Types of `voxline-widget` (the ES module, dist/voxline-widget.mjs). Written by hand beside the JavaScript in
// web/widget/ and web/voxline/ (plain ES modules with JSDoc); web/tests/widget-package.test.js checks that the event
// names and the settings here are exactly those of web/voxline/events.js and web/voxline/settings.js, and a small
// TypeScript consumer (web/tests/types/consumer.ts) compiles against this file with `tsc --noEmit`.

// ------------------------------------------------------------------------------------------------------ events

/** Fields every `voxline:*` event's `detail` carries. */
export interface VoxlineEventBase {
  /** `performance.now()` when the event fired. */
  t: number;
  /** Seconds of microphone audio captured since listening started, when the event fired (the capture clock). */
  audio_t: number;
}

export interface VoxlineReadyDetail extends VoxlineEventBase {
  load_ms: number;
  /** `graph_optimization`: the level onnxruntime's optimizer ran at when the server built the model (then the
   * page creates its session with the optimizer off), or null. */
  models: { name: string; bytes: number; graph_optimization: 'basic' | 'extended' | null }[];
  /** Whether the page is cross-origin isolated (then the recogniser runs multi-threaded). */
  isolated: boolean;
  threads: number;
  /** Whether the uplink can send Opus (WebCodecs). */
  opus: boolean;
  /** ms from the load's start: the manifest, the models read, the workers' start after them, onnxruntime's wasm
   * compiled (`ort_ms`), and each worker's runtime start and model sessions as [from, to] (`timeline`). */
  phases: { manifest_ms: number; models_ms: number; workers_ms: number; ort_ms: number;
    timeline: Record<'vad' | 'asr', { runtime: [number, number]; session: [number, number] }> };
  bytes: Record<string, number>;
  files: object[];
}

export interface VoxlineSpeechStartDetail extends VoxlineEventBase {
  /** Capture-clock seconds where the speech starts. */
  start_t: number;
}

export interface VoxlineSpeechEndDetail extends VoxlineEventBase {
  start_t: number;
  /** Capture-clock seconds where the speech ends. */
  end_t: number;
  /** What ended the turn (smart-turn, the silence hangover, the length limit, ...). */
  reason: string;
}

export interface VoxlineTranscriptDetail extends VoxlineEventBase {
  text: string;
  final: boolean;
  /** 0..1 */
  confidence: number;
  /** `server` when the server recognised the audio again. */
  source?: 'server';
  turn_id?: number;
  /** The reading constrained to the grammar's commands, when there is one. */
  command?: { text: string; confidence: number; margin: number; constrained: boolean } | null;
}

export type VoxlineIntentSource = 'cache' | 'local' | 'server';

export interface VoxlineIntentDetail extends VoxlineEventBase {
  /** e.g. `media.volume_down` */
  intent: string;
  slots: Record<string, unknown>;
  source: VoxlineIntentSource;
  text: string;
  confidence: number;
  /** The sentence the skill confirms with ("Volume 30."), or null. */
  confirmation: string | null;
  turn_id?: number;
  /** When a better reading of the same turn replaces a command already acted on: the one it replaces. */
  amends?: { intent: string; slots: Record<string, unknown> };
}

export interface VoxlineReplyDetail extends VoxlineEventBase {
  /** The reply's text so far. */
  text: string;
  final: boolean;
  interrupted?: boolean;
  turn_id: number;
}

export interface VoxlineReplyAudioDetail extends VoxlineEventBase {
  /** The first sample of a reply started playing. */
  first?: boolean;
  /** The last sample has played, or playback was stopped (`interrupted`). */
  last?: boolean;
  interrupted?: boolean;
  played_ms?: number;
  turn_id: number;
}

export interface VoxlineTimingsDetail extends VoxlineEventBase {
  turn_id: number;
  /** Capture-clock seconds of each stage the turn reached (end of speech, final transcript, intent or sent, ...). */
  stages: Partial<Record<'speech_end' | 'turn_end' | 'transcript' | 'intent' | 'sent' | 'first_audio', number>>;
  source?: string;
  /** The server's own timings, when it took part. */
  timings?: Record<string, number>;
}

export type VoxlineLinkState = 'connecting' | 'open' | 'closed' | 'offline';

export interface VoxlineLinkDetail extends VoxlineEventBase {
  state: VoxlineLinkState;
  reason?: string;
  retry_ms?: number;
}

export type VoxlineTurnState = 'hearing' | 'deciding' | 'server-pending' | 'replying' | 'idle';

export interface VoxlineTurnDetail extends VoxlineEventBase {
  state: VoxlineTurnState;
  /** With `idle`: how the exchange ended. */
  outcome?: 'local' | 'reply' | 'interrupted' | 'nothing' | 'unreachable';
  /** With `hearing`: the turn id of a reply that speech barged in on. */
  interrupted?: number;
  turn_id?: number;
}

export interface VoxlineErrorDetail extends VoxlineEventBase {
  /** The same code strings as the server's protocol errors (docs/protocol.md), e.g. `mic_denied`. */
  code: string;
  message: string;
  turn_id?: number;
}

/** Every Voxline event by name, for `addEventListener` on `document` and on `<voxline-assistant>`. */
export interface VoxlineEventMap {
  'voxline:ready': CustomEvent<VoxlineReadyDetail>;
  'voxline:speech-start': CustomEvent<VoxlineSpeechStartDetail>;
  'voxline:speech-end': CustomEvent<VoxlineSpeechEndDetail>;
  'voxline:transcript': CustomEvent<VoxlineTranscriptDetail>;
  'voxline:intent': CustomEvent<VoxlineIntentDetail>;
  'voxline:reply': CustomEvent<VoxlineReplyDetail>;
  'voxline:reply-audio': CustomEvent<VoxlineReplyAudioDetail>;
  'voxline:timings': CustomEvent<VoxlineTimingsDetail>;
  'voxline:link': CustomEvent<VoxlineLinkDetail>;
  'voxline:turn': CustomEvent<VoxlineTurnDetail>;
  'voxline:error': CustomEvent<VoxlineErrorDetail>;
}

export type VoxlineEventName = keyof VoxlineEventMap;

/** The event names by short key (web/voxline/events.js). */
export declare const EVENTS: Readonly<{
  ready: 'voxline:ready';
  speechStart: 'voxline:speech-start';
  speechEnd: 'voxline:speech-end';
  transcript: 'voxline:transcript';
  intent: 'voxline:intent';
  reply: 'voxline:reply';
  replyAudio: 'voxline:reply-audio';
  timings: 'voxline:timings';
  link: 'voxline:link';
  turn: 'voxline:turn';
  error: 'voxline:error';
}>;

// ------------------------------------------------------------------------------------------------------ Voxline

/** Coefficients of the command confidence (whisper.js `COMMAND_CONFIDENCE_MODEL`). */
export interface CommandConfidenceModel {
  bias: number;
  spelled: number;
  margin: number;
  freeConfidence: number;
  wordRatio: number;
  /** How alike the reading and the free transcript are (0..1); absent: no weight (a model fitted before it). */
  agreement?: number;
}

/** The browser pipeline's named settings (web/voxline/settings.js, where each is explained); all optional. */
export interface VoxlineSettings {
  sampleRate: number;
  ringSeconds: number;
  vadStartProb: number;
  vadStopProb: number;
  minSpeechSecs: number;
  onsetGapSecs: number;
  vadOnsetPhases: number;
  preRollSecs: number;
  turnCheckSecs: number;
  turnCheckMaxWaitMs: number;
  turnWorker: boolean;
  turnCompleteProb: number;
  turnCompleteMinSilenceSecs: number;
  commandSilenceSecs: number;
  completeByMeaning: boolean;
  latePauseDecodes: boolean;
  prefixCommandSilenceSecs: number;
  prefixOnTurnComplete: boolean;
  prefixTurnCompleteProb: number;
  hangoverSecs: number;
  maxTurnSecs: number;
  runtimeFirst: boolean;
  asrThreads: number;
  windowPadSecs: number;
  minWindowSecs: number;
  partialEverySecs: number;
  firstPartialSecs: number;
  tokensPerSec: number;
  tokenSlack: number;
  draftTokens: number;
  encoderTail: boolean;
  encoderTailMarginSecs: number;
  localIntentMinConfidence: number;
  grammarDecode: boolean;
  grammarMaxMarginNats: number;
  grammarBeam: number;
  grammarMaxSteps: number;
  grammarBacktrack: boolean;
  misheardStartGuard: boolean;
  commandPromptMaxSecs: number;
  commandPromptBelowConfidence: number;
  commandPromptFromSkills: boolean;
  calibratedCommandConfidence: boolean;
  commandConfidenceModel: CommandConfidenceModel | null;
  commandMinConfidence: number;
  pauseIntentMinConfidence: number;
  promotePartials: boolean;
  speculativeTurns: boolean;
  speculativeMinConfidence: number;
  holdSilentAnswers: boolean;
  intentCacheMaxEntries: number;
  reconnectFirstMs: number;
  reconnectMaxMs: number;
  reconnectJitter: number;
  fullWindow: boolean;
}

export interface VoxlineOptions {
  /** The Voxline server's base URL, where its `/voxline/`, `/vendor/` and `/wasm_models/` paths are. */
  base?: string | URL;
  /** The server's WebSocket URL (default: `ws` on `base`); null runs without a server (local commands only). */
  server?: string | URL | null;
  /** For a server with site keys: a token, or a function that gets a fresh one before each connection. */
  token?: string | null | (() => string | Promise<string>);
  /** Overrides of the pipeline's settings. */
  settings?: Partial<VoxlineSettings>;
  /** Where the `voxline:*` events are dispatched (default `document`). */
  target?: EventTarget;
  /** Model download progress. */
  onProgress?: (fraction: number, loaded: number, total: number) => void;
}

/** A match of the local grammar. */
export interface VoxlineIntentMatch {
  intent: string;
  slots: Record<string, unknown>;
  confirmation?: string | null;
}

/** The local intents: the IndexedDB cache and the grammar engine (Pyodide, in a worker). */
export interface VoxlineIntents {
  /** Whether the engine has loaded. */
  readonly ready: boolean;
  whenReady(): Promise<void>;
  /** Null while the engine is loading. */
  recognize(text: string, lang?: string):
    Promise<{ match: VoxlineIntentMatch | null; prefix: boolean; ms: number } | null>;
  /** Add skill documents (the page's own sentences); resolves with the new grammar version. */
  extend(documents: object[]): Promise<string>;
  clearCache(): Promise<void>;
}

/** The pipeline without the element: load, listen, and the `voxline:*` events on `target`. */
export declare class Voxline {
  constructor(options?: VoxlineOptions);
  readonly base: URL;
  /** The WebSocket URL, or null without a server. */
  readonly serverUrl: string | null;
  readonly settings: Readonly<VoxlineSettings>;
  readonly listening: boolean;
  /** Null until `load()` resolves, or when the intent cache cannot be opened. */
  readonly intents: VoxlineIntents | null | undefined;
  /** The turn model (smart-turn) loads after `voxline:ready`: resolves true once it is up, false if it failed
   * (`turn_detection_failed`); null before `ready`. Until it is up, a turn ends after the hangover's silence. */
  readonly turnDetection: Promise<boolean> | null;
  readonly turnDetectionState: 'waiting' | 'loading' | 'up' | 'off';
  /** Load the speech models and start the workers; resolves with `voxline:ready`'s detail (never waits for the mic). */
  load(): Promise<VoxlineReadyDetail>;
  /** Open the microphone and start listening. */
  listen(): Promise<void>;
  /** Close the microphone and the connection. */
  stop(): Promise<void>;
  /** Let go of everything (workers, engine, audio output); the instance cannot be used again. */
  dispose(): Promise<void>;
  /** Forget the commands this browser learned for this origin. */
  clearCache(): Promise<void>;
}

// ------------------------------------------------------------------------------------------------------ element

/** What `<voxline-assistant>` shows, also reflected as its `state` attribute. */
export type VoxlineAssistantState = 'loading' | 'idle' | 'listening' | 'thinking' | 'speaking' | 'offline' | 'error';

/** Defaults for every element's attributes of the same name (the script tag sets them from its `data-*`). */
export interface VoxlineAssistantDefaults {
  base: string | null;
  server: string | null;
  autostart: boolean;
  lazy: boolean;
  'token-url': string | null;
}

/**
 * `<voxline-assistant>`. Attributes: `base` (the Voxline server; required when this module is bundled into the
 * page or installed from npm, since its default is the origin the module was loaded from), `server` (the WebSocket
 * URL; default `ws` on `base`; `none`: local commands only), `autostart`, `lazy`, `floating`, `label`, `token-url`.
 * Every `voxline:*` event is dispatched on the element (bubbling, composed).
 */
export declare class VoxlineAssistant extends HTMLElement {
  static defaults: VoxlineAssistantDefaults;
  /** The Voxline server's base URL. */
  readonly base: string;
  readonly state: VoxlineAssistantState;
  readonly listening: boolean;
  /** The running Voxline instance (null before the first load). */
  readonly voxline: Voxline | null;
  load(): Promise<Voxline>;
  start(): Promise<void>;
  stop(): Promise<void>;
  toggle(): Promise<void>;
  /** Call `handler` for every `voxline:intent` named `intent` ('*' for all); returns a function that removes it. */
  onIntent(intent: string, handler: (detail: VoxlineIntentDetail) => void): () => void;
  /** Add the page's own sentences to the local grammar; resolves with the new grammar version. */
  extendIntents(documents: object[]): Promise<string>;
  clearCache(): Promise<void>;

  addEventListener<K extends keyof VoxlineEventMap>(type: K,
    listener: (this: VoxlineAssistant, event: VoxlineEventMap[K]) => unknown,
    options?: boolean | AddEventListenerOptions): void;
  addEventListener<K extends keyof HTMLElementEventMap>(type: K,
    listener: (this: VoxlineAssistant, event: HTMLElementEventMap[K]) => unknown,
    options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject,
    options?: boolean | AddEventListenerOptions): void;
  removeEventListener<K extends keyof VoxlineEventMap>(type: K,
    listener: (this: VoxlineAssistant, event: VoxlineEventMap[K]) => unknown,
    options?: boolean | EventListenerOptions): void;
  removeEventListener<K extends keyof HTMLElementEventMap>(type: K,
    listener: (this: VoxlineAssistant, event: HTMLElementEventMap[K]) => unknown,
    options?: boolean | EventListenerOptions): void;
  removeEventListener(type: string, listener: EventListenerOrEventListenerObject,
    options?: boolean | EventListenerOptions): void;
}

/** Register the element (once per page; the module does it on import). */
export declare function defineVoxlineAssistant(name?: string): void;

declare global {
  interface HTMLElementTagNameMap {
    'voxline-assistant': VoxlineAssistant;
  }
  // The events reach `document` (and `window`) by bubbling from the element, or are dispatched there directly.
  interface DocumentEventMap extends VoxlineEventMap {}
  interface WindowEventMap extends VoxlineEventMap {}
}
