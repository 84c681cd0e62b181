// Local intents for the page: the zero-RTT cache first, then the Python grammar engine in a Worker.
//
//   transcript ─► peek() ── hit ──► {source: 'cache'}        synchronous, no network, no engine
//                   └─ miss ─► recognize() (Pyodide worker) ─► {source: 'local'}, remembered for next time
//                                └─ null while the engine loads, or no match ─► ask the server
//
// `create()` returns as soon as the cache is open; the engine loads in the background and nothing here ever
// waits for it: before it is ready `recognize()` answers null at once.
import { IntentCache } from './intent-cache.js';
import { spawnWorker } from './workers.js';

/**
 * @typedef {import('./intent-cache.js').CacheEntry} CacheEntry
 * @typedef {import('./intent-cache.js').IntentMatch} IntentMatch
 * @typedef {{intent: string, slots: Record<string, string|number|boolean>, text: string,
 *   spans: Record<string, [number, number]>, template: string, confirmation: string|null}} EngineMatch
 * @typedef {{match: EngineMatch|null, prefix: boolean, couldChange: boolean, ms: number}} Recognition
 *   prefix: the text could still grow into a longer command;
 *   couldChange: a longer command that starts with the text would do something else (another intent or other
 *   slot values: "stop" … "the timer", "turn on the lights" … "in the kitchen"), so semantic endpointing waits;
 *   false for "pause" (… "the music" pauses all the same). For text that is no command, the same as `prefix`.
 * @typedef {{code: string, message: string}} EngineFailure
 * @typedef {{grammar_version: string, load_ms: number, timings: Record<string, number>,
 *   files: {name: string, bytes: number, from: 'cache'|'network', ms: number, cache?: 'http'|'storage'}[]}} EngineLoad
 */

/** How long a recognition may take before it is answered with an error instead (the engine is wedged). */
export const RECOGNIZE_TIMEOUT_MS = 5000;
/** Extending recompiles the whole grammar, which takes about as long as the engine's first start. */
export const EXTEND_TIMEOUT_MS = 30000;

/**
 * Semantic endpointing: a recognition that may be dispatched before the end of the turn, because it is a
 * command and nothing longer could make it another one ("pause", "pause the music"; not "turn the volume down",
 * which may go on "to 30").
 * @param {Recognition|null} result
 * @param {boolean} [byMeaning] false: complete only when no longer command extends the words at all (the design
 *   before `completeByMeaning`: "pause" waited for a "the music" that would pause all the same)
 */
export function isCompleteCommand(result, byMeaning = true) {
  return Boolean(result?.match) && !(byMeaning ? result.couldChange : result.prefix);
}

/** A promise with its resolve and reject (Promise.withResolvers, which Node 20 lacks). */
function deferred() {
  let resolve, reject;
  const promise = new Promise((yes, no) => { resolve = yes; reject = no; });
  return { promise, resolve, reject };
}

export class IntentResolver {
  /** @type {IntentCache} */ cache;
  /** @type {Worker|null} */ #worker = null;
  #nextId = 0;
  /** @type {Map<number, {resolve: Function, reject: Function, timer: any}>} */
  #pending = new Map();
  #lang;
  /** Set once the engine answered 'ready'. */
  #ready = false;
  /**
   * How the engine loaded (null until it has): times, and where Pyodide's files came from (`files`, as
   * `voxline:ready`'s).
   * @type {EngineLoad|null}
   */
  engineLoad = null;
  /** @type {EngineFailure|null} */ #failure = null;
  /** @type {(() => void)[]} */ #grammarListeners = [];
  /** Settled when the engine is ready (resolved) or has failed (rejected with its message). */
  #readiness = deferred();

  /**
   * Open the cache and start the engine in the background.
   * @param {{base?: string|URL, server?: string|URL|null, lang?: string, cacheName?: string, maxEntries?: number,
   *   engine?: boolean, onReady?: (info: EngineLoad) => void,
   *   onError?: (failure: EngineFailure) => void}} [options]
   *   base: the Voxline server (default: where this module is served from).
   *   server: the server whose intents may enter the cache (its WebSocket URL will do); default `base`, null: none.
   *   engine: false does not start the engine: the cache works alone until `startEngine()`.
   */
  static async create({ base = new URL('..', import.meta.url), server, lang = 'en', cacheName, maxEntries,
    engine = true, onReady = () => {}, onError = () => {} } = {}) {
    const acceptServerFrom = server === null ? null : new URL(server ?? base, location.href);
    const cache = await IntentCache.open({ name: cacheName, maxEntries, acceptServerFrom });
    const resolver = new IntentResolver(cache, lang);
    if (engine) resolver.#start(onReady, onError);
    return resolver;
  }

  /**
   * Start the engine if it is not started yet, e.g. once the speech models are loaded, so that Pyodide's
   * start-up (seconds of CPU) does not compete with theirs.
   */
  startEngine(onReady = () => {}, onError = () => {}) {
    if (!this.#worker && !this.#failure) this.#start(onReady, onError);
  }

  /** @private use `IntentResolver.create()` */
  constructor(cache, lang) {
    this.cache = cache;
    this.#lang = lang;
    this.#readiness.promise.catch(() => {}); // nobody may be waiting: not an unhandled rejection
  }

  /**
   * Resolves when the engine has loaded; rejects with the reason when it cannot (see `failure`).
   * @returns {Promise<void>}
   */
  whenReady() {
    return this.#readiness.promise;
  }

  /** Whether the engine has loaded (recognize() answers). */
  get ready() {
    return this.#ready;
  }

  /** Why the engine is off, or null. */
  get failure() {
    return this.#failure;
  }

  /**
   * The cached entry for `text`, or null: synchronous, zero network, never waits for the engine.
   * @param {string} text
   * @returns {CacheEntry|null}
   */
  peek(text) {
    return this.cache.peek(text);
  }

  /**
   * Ask the engine. Null at once while it is loading or when it failed to load.
   * @param {string} text
   * @param {string} [lang]
   * @returns {Promise<Recognition|null>}
   * @throws {Error & {code: string}} when the engine fails this request (no grammar for `lang`, a timeout)
   */
  async recognize(text, lang = this.#lang) {
    if (!this.#ready) return null;
    const reply = await this.#request({ type: 'recognize', text, lang }, RECOGNIZE_TIMEOUT_MS);
    return { match: reply.match, prefix: reply.prefix, couldChange: reply.couldChange, ms: reply.ms };
  }

  /**
   * Cache first, then the engine; a local match is remembered. Null when neither knows `text` (ask the server).
   * @param {string} text
   * @returns {Promise<{source: 'cache', entry: CacheEntry}|{source: 'local', match: EngineMatch, prefix: boolean}|null>}
   */
  async resolve(text) {
    const entry = this.peek(text);
    if (entry) return { source: 'cache', entry };
    const result = await this.recognize(text);
    if (!result?.match) return null;
    await this.remember(text, result.match, 'local');
    return { source: 'local', match: result.match, prefix: result.prefix };
  }

  /**
   * Store what `text` resolved to.
   * @param {string} text
   * @param {IntentMatch} match
   * @param {'local'|string|URL} origin 'local', or the URL of the server the intent came from
   * @returns {Promise<boolean>} whether it was stored (see IntentCache.put)
   */
  remember(text, match, origin) {
    return this.cache.put(text, match, origin);
  }

  clearCache() {
    return this.cache.clear();
  }

  /**
   * The grammar of `lang` as the word graph grammar-aware decoding walks (`voxline.intents.lexicon`).
   * @returns {Promise<import('./grammar-decode.js').Lexicon>}
   */
  async lexicon(lang = this.#lang) {
    if (!this.#ready) throw new Error('the intent engine has not loaded yet');
    return (await this.#request({ type: 'lexicon', lang }, EXTEND_TIMEOUT_MS)).lexicon;
  }

  /**
   * Why the grammar could never give (`intent`, `slots`) — an unknown intent, a slot it lacks, a value outside
   * its list or range — or null when it could. For intents from elsewhere (the server) before they are cached.
   * @returns {Promise<string|null>}
   */
  async validate(intent, slots, lang = this.#lang) {
    if (!this.#ready) throw new Error('the intent engine has not loaded yet');
    return (await this.#request({ type: 'validate', intent, slots, lang }, RECOGNIZE_TIMEOUT_MS)).problem;
  }

  /** Call `listener()` whenever the grammar changes (extend); the engine's first start is `onReady`. */
  onGrammarChange(listener) {
    this.#grammarListeners.push(listener);
  }

  /**
   * Add user skill documents (source dicts as a YAML file parses, or compiled grammars) to the engine's grammar.
   * The grammar version changes, and with it the cache empties.
   * @param {object[]} documents
   * @returns {Promise<string>} the new grammar version
   */
  async extend(documents) {
    if (!this.#ready) throw new Error('the intent engine has not loaded yet');
    const reply = await this.#request({ type: 'extend', documents }, EXTEND_TIMEOUT_MS);
    await this.cache.setGrammarVersion(reply.grammar_version);
    for (const listener of this.#grammarListeners) listener();
    return reply.grammar_version;
  }

  /** Stop the engine and close the cache. */
  close() {
    this.#worker?.terminate();
    this.#fail({ code: 'intents_closed', message: 'the intent resolver was closed' });
    this.cache.close();
  }

  #start(onReady, onError) {
    try {
      this.#worker = spawnWorker('./intents-worker.js');
    } catch (error) {
      this.#fail({ code: 'intents_engine_unavailable', message: `The intent engine worker could not start: ${error.message}` });
      onError(this.#failure);
      return;
    }
    this.#worker.onmessage = (event) => {
      const msg = event.data;
      if (msg.type === 'ready') {
        // Entries are only as good as the grammar that made them: a new version empties the cache first.
        this.cache.setGrammarVersion(msg.grammar_version).catch(() => {}).then(() => {
          this.engineLoad = { grammar_version: msg.grammar_version, load_ms: msg.load_ms, timings: msg.timings,
            files: msg.files ?? [] };
          this.#ready = true;
          this.#readiness.resolve();
          onReady(this.engineLoad);
        });
      } else if (msg.type === 'error' && msg.id === undefined) {
        this.#fail({ code: msg.code, message: msg.message });
        onError(this.#failure);
      } else {
        this.#settle(msg);
      }
    };
    this.#worker.onerror = (event) => {
      event.preventDefault?.();
      this.#fail({ code: 'intents_engine_unavailable', message: `The intent engine worker failed: ${event.message ?? 'script error'}` });
      onError(this.#failure);
    };
  }

  #request(message, timeoutMs) {
    const id = ++this.#nextId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.#settle({ type: 'error', id, code: 'intents_engine_timeout',
        message: `the intent engine did not answer within ${timeoutMs} ms` }), timeoutMs);
      this.#pending.set(id, { resolve, reject, timer });
      this.#worker.postMessage({ ...message, id });
    });
  }

  #settle(msg) {
    const waiter = this.#pending.get(msg.id);
    if (!waiter) return;
    this.#pending.delete(msg.id);
    clearTimeout(waiter.timer);
    if (msg.type === 'error') waiter.reject(Object.assign(new Error(msg.message), { code: msg.code }));
    else waiter.resolve(msg);
  }

  #fail(failure) {
    this.#ready = false;
    this.#failure = failure;
    this.#readiness.reject(new Error(failure.message));
    for (const id of [...this.#pending.keys()]) this.#settle({ type: 'error', id, ...failure });
  }
}
