// The one-line embed, bundled as dist/widget.js (a classic script, served at /widget.js):
//
//   <script src="https://voxline.example/widget.js" data-server="wss://voxline.example/ws"></script>
//
// The script's own origin is the Voxline server (`base`); its data-server, data-base, data-autostart and
// data-lazy become the defaults of every <voxline-assistant> on the page. If the page has none, one floating
// assistant is added to <body>. The exports are on `window.VoxlineWidget`.
import { VoxlineAssistant, defineVoxlineAssistant } from './assistant.js';

// Only readable while this script first runs: record everything it says now.
const script = /** @type {HTMLScriptElement|null} */ (document.currentScript);
const data = script?.dataset ?? {};
Object.assign(VoxlineAssistant.defaults, {
  base: data.base ?? (script?.src ? new URL('/', script.src).href : null),
  server: data.server ?? null,
  autostart: data.autostart !== undefined && data.autostart !== 'false',
  lazy: data.lazy !== undefined && data.lazy !== 'false',
});
defineVoxlineAssistant();

function ensureAssistant() {
  if (document.querySelector('voxline-assistant')) return;
  const element = document.createElement('voxline-assistant');
  element.setAttribute('floating', '');
  document.body.append(element);
}

// An element written after this script in the page is not parsed yet: decide once the document is.
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', ensureAssistant, { once: true });
else ensureAssistant();

export { VoxlineAssistant, defineVoxlineAssistant };
export { EVENTS } from '../voxline/events.js';
