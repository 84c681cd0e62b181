// The one-line embed, bundled as dist/widget.js (a classic script, served at /widget.js):
//
//   <script src="https://voxline.example/widget.js" data-server="wss://voxline.example/ws"></script>
//
// The script's own origin is the Voxline server (`base`); its data-server, data-base, data-autostart, data-lazy
// and data-token-url become the defaults of every <voxline-assistant> on the page. If the page has none, one
// floating assistant is added to <body>. The exports are on `window.VoxlineWidget`, among them `assistant`, a promise of
// the page's (first) element, for handlers: `VoxlineWidget.assistant.then((el) => el.onIntent(...))`.
import { VoxlineAssistant, defineVoxlineAssistant } from './assistant.js';

// Only readable while this script first runs: record everything it says now.
const script = /** @type {HTMLScriptElement|null} */ (document.currentScript);
const data = script?.dataset ?? {};
Object.assign(VoxlineAssistant.defaults, {
  base: data.base ?? (script?.src ? new URL('/', script.src).href : null),
  server: data.server ?? null,
  autostart: data.autostart !== undefined && data.autostart !== 'false',
  lazy: data.lazy !== undefined && data.lazy !== 'false',
  'token-url': data.tokenUrl ?? null,
});
defineVoxlineAssistant();

/** @returns {VoxlineAssistant} the page's element, or a new floating one */
function ensureAssistant() {
  const existing = document.querySelector('voxline-assistant');
  if (existing) return /** @type {VoxlineAssistant} */ (existing);
  const element = /** @type {VoxlineAssistant} */ (document.createElement('voxline-assistant'));
  element.setAttribute('floating', '');
  document.body.append(element);
  return element;
}

// An element written after this script in the page is not parsed yet: decide once the document is.
/** @type {Promise<VoxlineAssistant>} */
export const assistant = document.readyState === 'loading'
  ? new Promise((resolve) => document.addEventListener('DOMContentLoaded', () => resolve(ensureAssistant()), { once: true }))
  : Promise.resolve(ensureAssistant());

export { VoxlineAssistant, defineVoxlineAssistant };
export { EVENTS } from '../voxline/events.js';
