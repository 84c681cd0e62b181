// The zero-RTT intent cache: transcripts that resolved to a command before, kept in IndexedDB and mirrored in
// memory, so that a repeated command acts without the network and without waiting for the Python engine.
//
// Key: the normalised transcript (./normalize.js, the spec shared with the Python engine).
// Value: {key, intent, slots, confirmation, grammar_version, source_of_entry, hits, last_used, created}.
//
// What it promises, and which way its errors may go:
// - `peek()` is synchronous and reads only the in-memory mirror loaded at `open()`; a hit costs no I/O at all.
//   Other tabs' writes reach the mirror by BroadcastChannel, so it may lag them by one message: it may miss an
//   entry another tab just added (a miss costs a round trip), or still serve one another tab just evicted or
//   cleared (an entry that was valid under this page's grammar version, so never an intent the grammar would
//   not give).
// - Every record is checked against one schema and the current grammar version when it is read from IndexedDB
//   (at `open()` and in `get()`); a record that fails is deleted and counts as a miss. Nothing unchecked reaches
//   the mirror.
// - An intent from a server is stored only when it came from the configured server's origin.
// - The cache holds at most `maxEntries`; past that the least recently used entries go, in the same
//   transaction as the write that overflowed it.
// - A new grammar version empties the store: an entry is only as good as the grammar that produced it.
import { normalize } from './normalize.js';

export const DEFAULT_DB_NAME = 'voxline-intents';
export const DEFAULT_MAX_ENTRIES = 500;

const DB_VERSION = 1;
const ENTRIES = 'entries';
const META = 'meta';
const GRAMMAR_VERSION_KEY = 'grammar_version';
const BY_LAST_USED = 'by_last_used';

// Schema limits: generous for any real command, small enough that a hostile record cannot bloat the mirror.
const MAX_KEY_CHARS = 1000;
const MAX_SLOTS = 32;
const MAX_TEXT_CHARS = 512;
const INTENT_NAME = /^[^\s\p{C}]{1,128}$/u;
const SLOT_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const RECORD_FIELDS = Object.freeze(['key', 'intent', 'slots', 'confirmation', 'grammar_version', 'source_of_entry',
  'hits', 'last_used', 'created']);
const SOURCES = Object.freeze(['local', 'server']);

/**
 * @typedef {string|number|boolean} SlotValue
 * @typedef {{intent: string, slots?: Record<string, SlotValue>, confirmation?: string|null}} IntentMatch
 *   what `put` stores: the engine's `Match.to_dict()` or a server's intent (other fields are ignored)
 * @typedef {{key: string, intent: string, slots: Record<string, SlotValue>, confirmation: string|null,
 *   grammar_version: string, source_of_entry: 'local'|'server', hits: number, last_used: number,
 *   created: number}} CacheEntry  times are epoch milliseconds
 */

/**
 * Why `record` is not a valid entry for `key` under `grammarVersion`, or null when it is.
 * @param {unknown} record
 * @param {string} key the normalised transcript it is stored under
 * @param {string|null} grammarVersion
 * @returns {string|null}
 */
export function entryProblem(record, key, grammarVersion) {
  if (!isPlainObject(record)) return 'not an object';
  const fields = Object.keys(record);
  if (fields.length !== RECORD_FIELDS.length || !RECORD_FIELDS.every((f) => Object.hasOwn(record, f))) {
    return `fields must be exactly ${RECORD_FIELDS.join(', ')}`;
  }
  const r = /** @type {Record<string, any>} */ (record);
  if (r.key !== key || typeof key !== 'string' || !key || key.length > MAX_KEY_CHARS || normalize(key) !== key) {
    return 'key is not the normalised transcript';
  }
  if (typeof r.intent !== 'string' || !INTENT_NAME.test(r.intent)) return 'bad intent name';
  const slotProblem = slotsProblem(r.slots);
  if (slotProblem) return slotProblem;
  if (r.confirmation !== null && !isShortText(r.confirmation)) return 'bad confirmation';
  if (typeof grammarVersion !== 'string' || r.grammar_version !== grammarVersion) return 'other grammar version';
  if (!SOURCES.includes(r.source_of_entry)) return 'bad source_of_entry';
  if (!Number.isSafeInteger(r.hits) || r.hits < 0) return 'bad hits';
  if (!isTime(r.created) || !isTime(r.last_used)) return 'bad times';
  return null;
}

function slotsProblem(slots) {
  if (!isPlainObject(slots)) return 'slots is not an object';
  const entries = Object.entries(slots);
  if (entries.length > MAX_SLOTS) return 'too many slots';
  for (const [name, value] of entries) {
    if (!SLOT_NAME.test(name)) return `bad slot name ${JSON.stringify(name).slice(0, 40)}`;
    const ok = typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value)) || isShortText(value);
    if (!ok) return `bad value for slot ${name}`;
  }
  return null;
}

function isPlainObject(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function isShortText(value) {
  return typeof value === 'string' && value.length <= MAX_TEXT_CHARS;
}

function isTime(value) {
  return Number.isFinite(value) && value >= 0;
}

/**
 * The origin an intent arrived from, as the page's scheme sees it: a WebSocket URL (ws:, wss:) and the HTTP URL
 * of the same server have one origin. Null when `url` is not an absolute URL.
 * @param {string|URL} url
 */
export function serverOrigin(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const scheme = { 'ws:': 'http:', 'wss:': 'https:' }[parsed.protocol] ?? parsed.protocol;
  if (scheme !== 'http:' && scheme !== 'https:') return null;
  // URL drops a port that is the default for its scheme, and ws/http (wss/https) share defaults.
  return `${scheme}//${parsed.host}`;
}

/** @param {IDBRequest} request */
function completed(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

/** @param {IDBTransaction} tx */
function committed(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve(undefined);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new DOMException('transaction aborted', 'AbortError'));
  });
}

/** @param {string} name */
function openDatabase(name) {
  const request = indexedDB.open(name, DB_VERSION);
  request.onupgradeneeded = () => {
    const db = request.result;
    const entries = db.createObjectStore(ENTRIES, { keyPath: 'key' });
    entries.createIndex(BY_LAST_USED, 'last_used');
    db.createObjectStore(META);
  };
  return completed(request);
}

export class IntentCache {
  /** @type {IDBDatabase} */ #db;
  /** @type {Map<string, CacheEntry>} the mirror: every valid entry, as last written or read */
  #mirror = new Map();
  /** @type {Map<string, {hits: number, last_used: number}>} uses not yet written to IndexedDB */
  #pendingUses = new Map();
  #flushTimer = null;
  /** @type {string|null} */ #grammarVersion;
  /** @type {string|null} */ #acceptOrigin;
  #maxEntries;
  #clock = 0;
  #rejected = 0;
  /** @type {BroadcastChannel|null} */ #channel = null;
  #closed = false;

  /**
   * Open (or create) the cache and load its mirror.
   *
   * Without `grammarVersion` the cache keeps the version it last saw, so that hits work before the engine has
   * loaded and with the server down; call `setGrammarVersion()` once the engine reports its version.
   * @param {{name?: string, maxEntries?: number, grammarVersion?: string,
   *          acceptServerFrom?: string|URL|null}} [options]
   *   acceptServerFrom: the Voxline server whose intents may be cached; without it no server intent is stored
   */
  static async open({ name = DEFAULT_DB_NAME, maxEntries = DEFAULT_MAX_ENTRIES, grammarVersion,
    acceptServerFrom = null } = {}) {
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) throw new RangeError(`maxEntries must be a positive integer, got ${maxEntries}`);
    if (grammarVersion !== undefined && (typeof grammarVersion !== 'string' || !grammarVersion)) {
      throw new TypeError('grammarVersion must be a non-empty string');
    }
    const acceptOrigin = acceptServerFrom === null ? null : serverOrigin(acceptServerFrom);
    if (acceptServerFrom !== null && !acceptOrigin) throw new TypeError(`acceptServerFrom is not an http(s) or ws(s) URL: ${acceptServerFrom}`);
    const cache = new IntentCache(await openDatabase(name), name, maxEntries, acceptOrigin);
    await cache.#load(grammarVersion);
    return cache;
  }

  /** @private use `IntentCache.open()` */
  constructor(db, name, maxEntries, acceptOrigin) {
    this.#db = db;
    this.#maxEntries = maxEntries;
    this.#acceptOrigin = acceptOrigin;
    this.name = name;
    // Another tab deleting or upgrading the database must not be blocked by this one; this cache then stops.
    db.onversionchange = () => this.close();
    if (typeof BroadcastChannel === 'function') {
      this.#channel = new BroadcastChannel(`voxline-intent-cache:${name}`);
      this.#channel.onmessage = (event) => this.#fromOtherTab(event.data);
    }
  }

  /** The grammar version entries are checked against (null until one is known). */
  get grammarVersion() {
    return this.#grammarVersion;
  }

  get maxEntries() {
    return this.#maxEntries;
  }

  /** Entries in the mirror (synchronous; `stats()` counts IndexedDB itself). */
  get size() {
    return this.#mirror.size;
  }

  /**
   * The cached entry for `text`, from memory: synchronous, no I/O. A hit counts as a use (hits, last_used),
   * written to IndexedDB later, off the hit path.
   * @param {string} text a transcript, normalised here
   * @returns {CacheEntry|null} a copy
   */
  peek(text) {
    const entry = this.#mirror.get(normalize(text));
    if (!entry) return null;
    this.#use(entry);
    return copy(entry);
  }

  /**
   * The entry for `text` as IndexedDB holds it (one read), checked; an invalid record is deleted and is a miss.
   * @param {string} text
   * @returns {Promise<CacheEntry|null>}
   */
  async get(text) {
    const key = normalize(text);
    if (!key || this.#closed) return null;
    const tx = this.#db.transaction(ENTRIES, 'readonly');
    const record = await completed(tx.objectStore(ENTRIES).get(key));
    if (record === undefined) {
      this.#mirror.delete(key);
      return null;
    }
    const problem = entryProblem(record, key, this.#grammarVersion);
    if (problem) {
      await this.#reject([key], problem);
      return null;
    }
    const unwritten = this.#pendingUses.get(key);
    if (unwritten) {
      record.hits += unwritten.hits;
      record.last_used = Math.max(record.last_used, unwritten.last_used);
    }
    this.#mirror.set(key, record);
    this.#use(record);
    return copy(record);
  }

  /**
   * Store what `text` resolved to.
   * @param {string} text the transcript
   * @param {IntentMatch} match
   * @param {'local'|string|URL} origin 'local' for the in-page engine, else the URL of the server it came from
   *   (its WebSocket URL will do); refused unless that is the configured server's origin
   * @returns {Promise<boolean>} whether it was stored: false for a foreign server, a match that breaks the
   *   schema, an empty transcript, or while no grammar version is known
   */
  async put(text, match, origin) {
    if (typeof origin !== 'string' && !(origin instanceof URL)) throw new TypeError("origin must be 'local' or the server's URL");
    const source = origin === 'local' ? 'local' : this.#acceptsServer(origin) ? 'server' : null;
    const key = normalize(text);
    if (!source || !key || this.#grammarVersion === null || this.#closed) return false;
    const now = this.#tick();
    const before = this.#mirror.get(key);
    const record = {
      key,
      intent: match?.intent,
      slots: isPlainObject(match?.slots) ? { ...match.slots } : match?.slots ?? {},
      confirmation: match?.confirmation ?? null,
      grammar_version: this.#grammarVersion,
      source_of_entry: source,
      hits: before?.hits ?? 0,
      last_used: now,
      created: before?.created ?? now,
    };
    if (entryProblem(record, key, this.#grammarVersion)) return false;

    const tx = this.#db.transaction(ENTRIES, 'readwrite');
    const store = tx.objectStore(ENTRIES);
    const done = committed(tx);
    // Pending uses go in first, so that eviction sees true recency.
    await this.#writeUses(store);
    store.put(record);
    const evicted = await this.#evictBeyondCap(store);
    await done;
    for (const gone of evicted) this.#mirror.delete(gone);
    // The grammar may have moved on while this write waited its turn; the stale record is then refused on read.
    if (record.grammar_version !== this.#grammarVersion) return false;
    this.#mirror.set(key, record);
    this.#broadcast({ type: 'put', record });
    if (evicted.length) this.#broadcast({ type: 'delete', keys: evicted });
    return true;
  }

  /** Remove every entry (the clear-cache API). */
  async clear() {
    if (this.#closed) return;
    const tx = this.#db.transaction(ENTRIES, 'readwrite');
    tx.objectStore(ENTRIES).clear();
    await committed(tx);
    this.#mirror.clear();
    this.#pendingUses.clear();
    this.#broadcast({ type: 'clear' });
  }

  /**
   * Adopt the engine's grammar version; a different one than before empties the cache.
   * @param {string} version
   * @returns {Promise<boolean>} whether the cache was emptied
   */
  async setGrammarVersion(version) {
    if (typeof version !== 'string' || !version) throw new TypeError('grammar version must be a non-empty string');
    if (version === this.#grammarVersion || this.#closed) return false;
    const tx = this.#db.transaction([ENTRIES, META], 'readwrite');
    tx.objectStore(ENTRIES).clear();
    tx.objectStore(META).put(version, GRAMMAR_VERSION_KEY);
    await committed(tx);
    this.#grammarVersion = version;
    this.#mirror.clear();
    this.#pendingUses.clear();
    this.#broadcast({ type: 'clear' });
    return true;
  }

  /**
   * Counts from IndexedDB, and from this page since `open()`.
   * @returns {Promise<{entries: number, mirrored: number, maxEntries: number, grammarVersion: string|null,
   *   hits: number, bySource: {local: number, server: number}, rejected: number}>}
   *   rejected: records deleted because they failed the schema or the grammar version
   */
  async stats() {
    await this.flush();
    const records = this.#closed ? [] : await completed(this.#db.transaction(ENTRIES, 'readonly').objectStore(ENTRIES).getAll());
    const bySource = { local: 0, server: 0 };
    let hits = 0;
    for (const record of records) {
      if (record?.source_of_entry in bySource) bySource[record.source_of_entry] += 1;
      hits += Number.isSafeInteger(record?.hits) ? record.hits : 0;
    }
    return { entries: records.length, mirrored: this.#mirror.size, maxEntries: this.#maxEntries,
      grammarVersion: this.#grammarVersion, hits, bySource, rejected: this.#rejected };
  }

  /** Write pending uses now (they are otherwise written shortly after the hit). */
  async flush() {
    clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    if (!this.#pendingUses.size || this.#closed) return;
    const tx = this.#db.transaction(ENTRIES, 'readwrite');
    const done = committed(tx);
    await this.#writeUses(tx.objectStore(ENTRIES));
    await done;
  }

  /** Close the database (uses not yet written still are); the mirror is dropped, so every later lookup misses. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#flushTimer);
    if (this.#pendingUses.size) {
      // A transaction opened before close() runs to the end; close() waits for it.
      this.#writeUses(this.#db.transaction(ENTRIES, 'readwrite').objectStore(ENTRIES)).catch(() => {});
    }
    this.#mirror.clear();
    this.#pendingUses.clear();
    this.#channel?.close();
    this.#db.close();
  }

  async #load(grammarVersion) {
    const tx = this.#db.transaction([ENTRIES, META], 'readwrite');
    const done = committed(tx);
    const entries = tx.objectStore(ENTRIES);
    const meta = tx.objectStore(META);
    const stored = await completed(meta.get(GRAMMAR_VERSION_KEY));
    this.#grammarVersion = grammarVersion ?? (typeof stored === 'string' ? stored : null);
    if (grammarVersion !== undefined && stored !== grammarVersion) {
      entries.clear();
      meta.put(grammarVersion, GRAMMAR_VERSION_KEY);
    }
    const keys = await completed(entries.getAllKeys());
    const records = await completed(entries.getAll());
    for (let i = 0; i < records.length; i++) {
      const problem = entryProblem(records[i], keys[i], this.#grammarVersion);
      if (problem) {
        entries.delete(keys[i]);
        this.#noteRejected(keys[i], problem);
        continue;
      }
      this.#mirror.set(keys[i], records[i]);
      this.#clock = Math.max(this.#clock, records[i].last_used);
    }
    // The cap may have been lowered since the last visit.
    for (const gone of await this.#evictBeyondCap(entries)) this.#mirror.delete(gone);
    await done;
  }

  /**
   * Delete the least recently used entries beyond the cap, inside the caller's transaction.
   * @param {IDBObjectStore} store
   * @returns {Promise<string[]>} the keys deleted
   */
  async #evictBeyondCap(store) {
    let excess = (await completed(store.count())) - this.#maxEntries;
    if (excess <= 0) return [];
    const evicted = [];
    const cursors = store.index(BY_LAST_USED).openCursor();
    await new Promise((resolve, reject) => {
      cursors.onerror = () => reject(cursors.error);
      cursors.onsuccess = () => {
        const cursor = cursors.result;
        if (!cursor || excess <= 0) return resolve(undefined);
        evicted.push(/** @type {string} */ (cursor.primaryKey));
        cursor.delete();
        excess -= 1;
        cursor.continue();
      };
    });
    return evicted;
  }

  /** Count a use in the mirror now and in IndexedDB soon. */
  #use(entry) {
    entry.hits += 1;
    entry.last_used = this.#tick();
    const pending = this.#pendingUses.get(entry.key) ?? { hits: 0, last_used: 0 };
    pending.hits += 1;
    pending.last_used = entry.last_used;
    this.#pendingUses.set(entry.key, pending);
    this.#flushTimer ??= setTimeout(() => this.flush().catch(() => {}), 0);
  }

  /**
   * Add pending uses to the stored records, inside the caller's transaction. A record deleted meanwhile (another
   * tab cleared it) stays deleted: uses only ever update, never recreate.
   * @param {IDBObjectStore} store
   */
  async #writeUses(store) {
    const uses = [...this.#pendingUses];
    this.#pendingUses.clear();
    for (const [key, use] of uses) {
      const record = await completed(store.get(key));
      if (entryProblem(record, key, this.#grammarVersion)) continue;
      store.put({ ...record, hits: record.hits + use.hits, last_used: Math.max(record.last_used, use.last_used) });
    }
  }

  async #reject(keys, problem) {
    for (const key of keys) {
      this.#mirror.delete(key);
      this.#noteRejected(key, problem);
    }
    const tx = this.#db.transaction(ENTRIES, 'readwrite');
    for (const key of keys) tx.objectStore(ENTRIES).delete(key);
    await committed(tx);
    this.#broadcast({ type: 'delete', keys });
  }

  #noteRejected(key, problem) {
    this.#rejected += 1;
    console.warn(`voxline intent cache: dropped the entry for ${JSON.stringify(String(key)).slice(0, 60)} (${problem})`);
  }

  #acceptsServer(origin) {
    return this.#acceptOrigin !== null && serverOrigin(origin) === this.#acceptOrigin;
  }

  /** Epoch milliseconds that never repeat or go back within this page, so recency has no ties. */
  #tick() {
    this.#clock = Math.max(Date.now(), this.#clock + 1);
    return this.#clock;
  }

  #broadcast(message) {
    this.#channel?.postMessage(message);
  }

  /** Keep the mirror honest about what other tabs wrote; their records are checked like any read. */
  #fromOtherTab(message) {
    if (this.#closed || !message) return;
    if (message.type === 'clear') this.#mirror.clear();
    else if (message.type === 'delete' && Array.isArray(message.keys)) message.keys.forEach((k) => this.#mirror.delete(k));
    else if (message.type === 'put' && !entryProblem(message.record, message.record?.key, this.#grammarVersion)) {
      this.#mirror.set(message.record.key, message.record);
    }
  }
}

/** @param {CacheEntry} entry */
function copy(entry) {
  return { ...entry, slots: { ...entry.slots } };
}
