// The demo page: a progress bar while models load, a listening/thinking state, the live transcript and an event
// log. `/?autostart=1` loads the models, fires `voxline:ready`, then opens the microphone (used by the tests).
// On a server with site keys, `/?key=ID` gets its tokens from the server's `/token?key=ID` (a public key that lists
// this page's origin), and `/?token-url=URL` from another endpoint.
import { EVENTS } from './voxline/events.js';
import { tokenFromUrl } from './voxline/link.js';
import { settingsFromQuery } from './voxline/settings.js';
import { Voxline } from './voxline/voxline.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

function setState(state, text) {
  $('state').dataset.state = state;
  $('state').textContent = text;
}

function log(name, detail) {
  const item = document.createElement('li');
  const fields = Object.entries(detail).filter(([k]) => !['t', 'timings', 'models'].includes(k))
    .map(([k, v]) => `${k}=${typeof v === 'number' ? Math.round(v * 1000) / 1000 : JSON.stringify(v)}`);
  item.textContent = `${name.replace('voxline:', '')} ${fields.join(' ')}`;
  $('log').prepend(item);
}

for (const name of Object.values(EVENTS)) document.addEventListener(name, (e) => log(name, e.detail));

document.addEventListener(EVENTS.speechStart, () => setState('hearing', 'Hearing you…'));
document.addEventListener(EVENTS.speechEnd, () => setState('thinking', 'Recognising…'));
document.addEventListener(EVENTS.transcript, (e) => {
  if (!e.detail.final) {
    $('partial').textContent = e.detail.text;
    return;
  }
  $('partial').textContent = '';
  const item = document.createElement('li');
  item.textContent = e.detail.text;
  const confidence = document.createElement('span');
  confidence.className = 'confidence';
  confidence.textContent = `${Math.round(e.detail.confidence * 100)} %`;
  item.append(confidence);
  $('finals').prepend(item);
  setState('thinking', 'Thinking…');
});
document.addEventListener(EVENTS.intent, (e) => {
  const { intent, slots, source, confirmation } = e.detail;
  const code = document.createElement('code');
  code.textContent = `${intent} ${Object.keys(slots).length ? JSON.stringify(slots) : ''}`.trim();
  const origin = document.createElement('span');
  origin.className = 'source';
  origin.textContent = source === 'server' ? 'resolved by the server' : `on this device (${source}, no network)`;
  $('intent').replaceChildren(code, origin);
  $('reply').textContent = confirmation ?? '';
  setState('listening', 'Listening');
});
document.addEventListener(EVENTS.reply, (e) => {
  $('intent').replaceChildren();
  $('reply').textContent = e.detail.text;
  if (e.detail.final) setState('listening', 'Listening');
});
document.addEventListener(EVENTS.replyAudio, () => setState('speaking', 'Answering…'));
document.addEventListener(EVENTS.error, (e) => {
  // Losing the backend is not fatal: local commands go on working, and the link reconnects by itself.
  if (e.detail.code === 'backend_unreachable') setState('offline', 'Offline: local commands only');
  else setState('error', 'Something went wrong');
  $('detail').textContent = e.detail.message;
});

const tokenUrl = params.get('token-url') ?? (params.get('key') ? `token?key=${encodeURIComponent(params.get('key'))}` : null);
const voxline = new Voxline({
  base: new URL('./', location.href),
  token: tokenUrl ? tokenFromUrl(new URL(tokenUrl, location.href)) : null,
  settings: settingsFromQuery(location.search),
  onProgress: (fraction, loaded, total) => {
    $('progress').value = fraction;
    $('detail').textContent = `${(loaded / 2 ** 20).toFixed(1)} of ${(total / 2 ** 20).toFixed(1)} MiB`;
  },
});
window.voxline = voxline;

async function listen() {
  $('mic').disabled = true;
  await voxline.listen();
  $('mic').textContent = 'Listening…';
  setState('listening', 'Listening');
}

voxline.load().then((ready) => {
  $('progress').hidden = true;
  $('detail').textContent = `Models ready in ${Math.round(ready.load_ms)} ms · ${ready.isolated ? `${ready.threads} wasm threads` : 'single-threaded (page not cross-origin isolated)'}`;
  setState('idle', 'Ready');
  $('mic').disabled = false;
  $('mic').onclick = listen;
  if (params.get('autostart') === '1') return listen();
}).catch(() => { /* already reported through voxline:error */ });
