// The demo page: a progress bar while models load, a listening/thinking state, the live transcript and an event
// log. `/?autostart=1` loads the models, fires `voxline:ready`, then opens the microphone (used by the tests).
import { EVENTS } from './voxline/events.js';
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

document.addEventListener(EVENTS.speechStart, () => setState('speaking', 'Hearing you…'));
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
  setState('listening', 'Listening');
});
document.addEventListener(EVENTS.error, (e) => {
  setState('error', 'Something went wrong');
  $('detail').textContent = e.detail.message;
});

const voxline = new Voxline({
  base: new URL('./', location.href),
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
