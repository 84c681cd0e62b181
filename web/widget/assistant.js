// <voxline-assistant>: Voxline as one element a page can drop in. A mic button whose look follows the `voxline:*`
// events (see state.js), the live caption and the answer, an ARIA live region, and a small API for the host page:
//
//   el.onIntent('media.volume_down', (detail) => player.volume -= 0.1)   // or listen to 'voxline:intent'
//   await el.extendIntents([{language: 'en', intents: {...}}])            // the page's own sentences
//   el.start(), el.stop(), el.toggle(), el.state, el.voxline
//
// Attributes: `server` (WebSocket URL; default `ws` on `base`; `none`: local commands only), `base` (the Voxline server; default the origin the
// widget script came from), `autostart` (listen once loaded), `lazy` (load the models on the first press, not at
// once), `floating` (pinned to the corner of the viewport), `label` (the button's accessible name), `token-url`
// (for a server with site keys: POSTed to for a fresh token before each connection, see docs/protocol.md).
// Reflected: `state` (loading, idle, listening, thinking, speaking, offline, error), for the page's own CSS.
//
// Voxline dispatches its events on the element (bubbling, composed), so they reach both the element's own listeners
// and `document`, exactly as on the demo page.
import { EVENTS } from '../voxline/protocol.js';
import { tokenFromUrl } from '../voxline/link.js';
import { Voxline } from '../voxline/voxline.js';
import { useServerBase } from './core-url.js';
import { INITIAL_STATUS, nextStatus, shownState } from './state.js';
import { STYLES } from './styles.js';

/** How long `extendIntents` waits for the intent engine (Pyodide) to start. */
const ENGINE_WAIT_MS = 60000;
const DEFAULT_LABEL = 'Talk to the voice assistant';

const STATUS_TEXT = Object.freeze({
  loading: 'Loading…',
  idle: 'Press to talk',
  listening: 'Listening',
  thinking: 'Thinking…',
  speaking: 'Speaking',
  offline: 'Offline: local commands only',
  error: 'Voice assistant unavailable',
});

const TEMPLATE = `
<div class="panel" part="panel" data-state="loading">
  <button class="mic" part="button" type="button" aria-pressed="false" aria-describedby="status">
    <svg class="icon" viewBox="0 0 24 24" aria-hidden="true" focusable="false">
      <rect class="body" x="9" y="2.5" width="6" height="11.5" rx="3"/>
      <path class="stand" d="M5.5 11a6.5 6.5 0 0 0 13 0M12 17.5V21M8.5 21h7"/>
      <path class="slash" d="M4 3.5l16 17"/>
    </svg>
    <span class="ring" aria-hidden="true"></span>
  </button>
  <div class="text">
    <p class="status" id="status" part="status">${STATUS_TEXT.loading}</p>
    <p class="caption" part="caption"></p>
    <p class="answer" part="answer"></p>
  </div>
  <p class="sr-only" role="status" aria-live="polite" aria-atomic="true"></p>
</div>`;

/**
 * Voxline keeps no handle to stop its workers, and cannot listen again after stop() (its link closes and its
 * capture clock starts over), so the widget ends an instance for good and starts a fresh one on the next press.
 * @param {Voxline} voxline
 */

/** "media.volume_down" → "media volume down": the answer line when a command has no confirmation sentence. */
function describeIntent(name) {
  return name.replace(/[._]/g, ' ');
}

export class VoxlineAssistant extends HTMLElement {
  /** Used when the element has no attribute of the same name (the script tag sets them from its data-*). */
  static defaults = { base: null, server: null, autostart: false, lazy: false, 'token-url': null };

  /** @type {import('./state.js').WidgetStatus} */
  #status = INITIAL_STATUS;
  /** @type {Voxline|null} */
  #voxline = null;
  /** @type {Promise<Voxline>|null} the load of `#voxline` */
  #loading = null;
  /** Whether `#voxline` opened the microphone (and so cannot be used again after stop). */
  #micOpened = false;
  /** @type {Map<string, Set<(detail: object) => void>>} intent name (or '*') → handlers */
  #handlers = new Map();
  /** @type {object[][]} every extendIntents() call, applied again to each new Voxline instance */
  #extensions = [];
  /** @type {Record<string, HTMLElement>} */
  #ui;

  constructor() {
    super();
    const root = this.attachShadow({ mode: 'open', delegatesFocus: true });
    root.innerHTML = `<style>${STYLES}</style>${TEMPLATE}`;
    const $ = (selector) => root.querySelector(selector);
    this.#ui = { panel: $('.panel'), button: $('.mic'), status: $('.status'), caption: $('.caption'),
      answer: $('.answer'), live: $('[role="status"]') };
    this.#ui.button.addEventListener('click', () => this.toggle());
    for (const name of Object.values(EVENTS)) this.addEventListener(name, (event) => this.#onEvent(name, event.detail));
  }

  connectedCallback() {
    this.#ui.button.setAttribute('aria-label', this.getAttribute('label') ?? DEFAULT_LABEL);
    this.#render();
    if (this.#option('autostart')) this.start();
    else if (!this.#option('lazy')) this.load().catch(() => {}); // reported through voxline:error
  }

  disconnectedCallback() {
    // A move within the page disconnects and reconnects at once: only an element really removed lets go.
    queueMicrotask(() => {
      if (!this.isConnected) this.#release();
    });
  }

  /** The Voxline server's base URL. */
  get base() {
    return new URL(this.getAttribute('base') ?? VoxlineAssistant.defaults.base ?? '/', location.href).href;
  }

  /** @returns {import('./state.js').ShownState} */
  get state() {
    return shownState(this.#status);
  }

  get listening() {
    return this.#status.listening;
  }

  /** The running Voxline instance (null before the first load): its events, intents, settings. */
  get voxline() {
    return this.#voxline;
  }

  /** Load the models and start the workers (at most once per instance); resolves with the Voxline instance. */
  load() {
    this.#loading ??= this.#create();
    return this.#loading;
  }

  /** Open the microphone (loading first if needed). */
  async start() {
    if (this.#status.listening) return;
    this.#input({ type: 'listen' });
    try {
      const voxline = await this.load();
      if (!this.#status.listening || this.#micOpened) return; // pressed again while loading
      this.#micOpened = true;
      await voxline.listen();
    } catch (error) {
      this.#micOpened = false; // nothing was opened: the next press tries again
      this.#input({ type: 'failed' }); // the detail went out as voxline:error
    }
  }

  /** Close the microphone; the next start() begins with a fresh Voxline instance (models come from the cache). */
  async stop() {
    const wasListening = this.#status.listening;
    this.#input({ type: 'stop' });
    if (!wasListening || !this.#micOpened) return;
    const voxline = this.#voxline;
    this.#voxline = null;
    this.#loading = null;
    this.#micOpened = false;
    await voxline.stop().catch(() => {});
    voxline.dispose();
    if (this.isConnected && !this.#option('lazy')) this.load().catch(() => {});
  }

  toggle() {
    return this.#status.listening ? this.stop() : this.start();
  }

  /**
   * Call `handler(detail)` for every `voxline:intent` named `intent` ('*' for all).
   * @param {string} intent e.g. 'media.volume_down'
   * @param {(detail: object) => void} handler
   * @returns {() => void} removes the handler
   */
  onIntent(intent, handler) {
    if (!this.#handlers.has(intent)) this.#handlers.set(intent, new Set());
    this.#handlers.get(intent).add(handler);
    return () => this.#handlers.get(intent)?.delete(handler);
  }

  /**
   * Add the page's own sentences to the local grammar (skill documents as `IntentResolver.extend` takes them). Kept
   * and applied again whenever the widget starts a new Voxline instance.
   * @param {object[]} documents
   * @returns {Promise<string>} the new grammar version
   */
  async extendIntents(documents) {
    const version = await this.#applyExtension(await this.load(), documents);
    this.#extensions.push(documents);
    return version;
  }

  /**
   * Forget the commands this browser learned for this origin (the intent cache; see `Voxline.clearCache`).
   * @returns {Promise<void>}
   */
  async clearCache() {
    const voxline = await this.load();
    await voxline.clearCache();
  }

  // ------------------------------------------------------------------------------------------------ internals

  /** Removed from the page: close the microphone, the link and the workers (a later insert loads again). */
  async #release() {
    await this.stop();
    const loading = this.#loading;
    if (!loading || this.isConnected) return;
    this.#loading = null;
    const voxline = await loading.catch(() => null);
    if (voxline && this.#voxline === voxline) this.#voxline = null;
    if (voxline) voxline.dispose();
  }

  #option(name) {
    if (name === 'autostart' || name === 'lazy') return this.hasAttribute(name) || Boolean(VoxlineAssistant.defaults[name]);
    return this.getAttribute(name) ?? VoxlineAssistant.defaults[name];
  }

  async #create() {
    const base = this.base;
    useServerBase(base);
    const server = this.#option('server');
    const tokenUrl = this.#option('token-url');
    const voxline = new Voxline({
      base,
      server: server === 'none' ? null : server ?? undefined,
      token: tokenUrl ? tokenFromUrl(tokenUrl) : null,
      target: this,
      onProgress: (fraction) => this.#ui.panel.style.setProperty('--progress', String(fraction)),
    });
    this.#voxline = voxline;
    this.#input({ type: 'load' });
    try {
      await voxline.load();
    } catch (error) {
      // Let the next press try again from scratch (the server may be back).
      this.#voxline = null;
      this.#loading = null;
      voxline.dispose();
      throw error;
    }
    for (const documents of this.#extensions) {
      this.#applyExtension(voxline, documents).catch((error) => console.error('voxline-assistant: extendIntents', error));
    }
    return voxline;
  }

  async #applyExtension(voxline, documents) {
    if (!voxline.intents) throw new Error('local intents are unavailable: the intent cache could not be opened');
    // The engine starts in the background (Pyodide takes seconds).
    let timer = 0;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('the intent engine did not start in time')), ENGINE_WAIT_MS);
    });
    try {
      await Promise.race([voxline.intents.whenReady().catch((error) => {
        throw new Error(`local intents are unavailable: ${error.message}`);
      }), late]);
    } finally {
      clearTimeout(timer);
    }
    return voxline.intents.extend(documents);
  }

  /** @param {string} name @param {any} detail */
  #onEvent(name, detail) {
    const ui = this.#ui;
    if (name === EVENTS.speechStart) {
      ui.caption.textContent = '';
      ui.answer.textContent = '';
    } else if (name === EVENTS.transcript) {
      ui.caption.textContent = detail.text;
      ui.caption.classList.toggle('partial', !detail.final);
      if (detail.final) this.#announce(`Heard: ${detail.text}`);
    } else if (name === EVENTS.intent) {
      ui.answer.textContent = detail.confirmation ?? describeIntent(detail.intent);
      this.#announce(ui.answer.textContent);
      this.#runHandlers(detail);
    } else if (name === EVENTS.reply) {
      ui.answer.textContent = detail.text;
      if (detail.final) this.#announce(detail.text);
    } else if (name === EVENTS.error) {
      ui.answer.textContent = detail.message;
      this.#announce(detail.message);
    }
    this.#input({ type: name, detail });
  }

  #runHandlers(detail) {
    for (const key of [detail.intent, '*']) {
      for (const handler of this.#handlers.get(key) ?? []) {
        try {
          handler(detail);
        } catch (error) {
          // One broken handler must not stop the widget or the other handlers; the page's console shows it.
          queueMicrotask(() => { throw error; });
        }
      }
    }
  }

  /** @param {import('./state.js').WidgetInput} input */
  #input(input) {
    this.#status = nextStatus(this.#status, input);
    this.#render(input.type);
  }

  /** @param {string} [cause] the input that led here */
  #render(cause) {
    const state = this.state;
    const ui = this.#ui;
    ui.panel.dataset.state = state;
    ui.panel.toggleAttribute('data-hearing', this.#status.hearing);
    ui.button.setAttribute('aria-pressed', String(this.#status.listening));
    const status = STATUS_TEXT[state];
    if (ui.status.textContent !== status) {
      ui.status.textContent = status;
      // Only what the user did is announced as a state; after a turn the live region keeps the answer instead,
      // and errors announce their own message.
      if (cause === 'listen' || cause === 'stop' || cause === EVENTS.ready) this.#announce(status);
    }
    if (this.getAttribute('state') !== state) this.setAttribute('state', state);
  }

  #announce(text) {
    this.#ui.live.textContent = text;
  }
}

/** Register the element (once per page, whichever copy of the widget loads first). */
export function defineVoxlineAssistant(name = 'voxline-assistant') {
  if (!customElements.get(name)) customElements.define(name, VoxlineAssistant);
}
