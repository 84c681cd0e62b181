// The demo page: a progress bar while models load, a listening/thinking state, the live transcript and an event
// log. `/?autostart=1` loads the models, fires `voxline:ready`, then opens the microphone (used by the tests).
// On a server with site keys, `/?key=ID` gets its tokens from the server's `/token?key=ID` (a public key that lists
// this page's origin), and `/?token-url=URL` from another endpoint.
import { EVENTS } from './voxline/events.js';
import { tokenFromUrl } from './voxline/link.js';
import { settingsFromQuery } from './voxline/settings.js';
import { waterfall } from './voxline/timings.js';
import { Voxline } from './voxline/voxline.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

function setState(state, text) {
  $('state').dataset.state = state;
  $('state').textContent = text;
}

/** Whether the server cannot be reached (an `OFFLINE_ERRORS` error, until the link is open again). */
let offline = false;
/** Back to waiting for speech once a turn is over: "Listening", or the offline notice while the server is away (a
 * local command acting must not hide it). */
function settle() {
  if (offline) setState('offline', 'Offline: local commands only');
  else setState('listening', 'Listening');
}

function log(name, detail) {
  const item = document.createElement('li');
  const fields = Object.entries(detail).filter(([k]) => !['t', 'timings', 'models', 'stages'].includes(k))
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
  settle();
});
document.addEventListener(EVENTS.reply, (e) => {
  $('intent').replaceChildren();
  $('reply').textContent = e.detail.text;
  if (e.detail.final) settle();
});
document.addEventListener(EVENTS.replyAudio, (e) => {
  if (!e.detail.last) setState('speaking', 'Answering…');
  else if ($('state').dataset.state === 'speaking') settle(); // not over "Hearing you…"
});
document.addEventListener(EVENTS.turn, (e) => {
  // A turn that ends still "Recognising…" settles here: one with nothing intelligible in it (no transcript or answer
  // follows), and one whose command acted before its speech ended (the intent came first).
  if (e.detail.state === 'idle' && $('state').dataset.state === 'thinking') settle();
});
document.addEventListener(EVENTS.timings, (e) => drawTimings(e.detail));
/** Errors after which nothing works until the user acts (reload, allow the microphone); any error before
 * `voxline:ready` is one too. The others leave Voxline working with less (no learned commands, no grammar help, one
 * turn lost): their message is shown, the state stays. */
const FATAL_ERROR = /^(mic_|model_|load_failed$|vad_failed$)/;
/** The server cannot be reached or will not serve this page: local commands still work. */
const OFFLINE_ERRORS = new Set(['backend_unreachable', 'token_unavailable', 'unauthenticated', 'origin_not_allowed',
  'unauthorized', 'unsupported_version', 'unsupported_language']);
let modelsReady = false;
document.addEventListener(EVENTS.ready, () => { modelsReady = true; });
document.addEventListener(EVENTS.error, (e) => {
  const { code, message } = e.detail;
  if (OFFLINE_ERRORS.has(code)) {
    offline = true;
    settle();
  }
  else if (FATAL_ERROR.test(code) || !modelsReady) setState('error', 'Something went wrong');
  $('detail').textContent = message;
});
document.addEventListener(EVENTS.link, (e) => {
  // Back online (the link reconnects by itself): the offline notice goes.
  if (e.detail.state === 'open') offline = false;
  if (e.detail.state === 'open' && $('state').dataset.state === 'offline') {
    if (window.voxline.listening) setState('listening', 'Listening');
    else setState('idle', 'Ready');
    $('detail').textContent = '';
  }
});

const SVG = 'http://www.w3.org/2000/svg';
/** Rows of the waterfall: one bar each, this many px high. */
const BAR_PX = 14;
/** Turns kept on the page, newest first. */
const TIMINGS_SHOWN = 8;

/** One turn's `voxline:timings` as a small waterfall: a bar per stage, in ms after the end of speech. */
function drawTimings(record) {
  const bars = waterfall(record);
  if (!bars.length) return;
  const from = Math.min(0, ...bars.map((b) => b.start_ms));
  const to = Math.max(1, ...bars.map((b) => b.end_ms));
  const span = to - from;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 1000 ${bars.length * BAR_PX}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('height', String(bars.length * BAR_PX));
  svg.setAttribute('role', 'img');
  bars.forEach((bar, row) => {
    const rect = document.createElementNS(SVG, 'rect');
    rect.setAttribute('class', bar.lane);
    rect.setAttribute('x', String(((bar.start_ms - from) / span) * 1000));
    rect.setAttribute('width', String(Math.max(((bar.end_ms - bar.start_ms) / span) * 1000, 2)));
    rect.setAttribute('y', String(row * BAR_PX + 2));
    rect.setAttribute('height', String(BAR_PX - 4));
    const title = document.createElementNS(SVG, 'title');
    title.textContent = `${bar.label}: ${bar.start_ms} → ${bar.end_ms} ms (${bar.end_ms - bar.start_ms} ms)`;
    rect.append(title);
    svg.append(rect);
  });
  svg.setAttribute('aria-label', bars.map((b) => `${b.label} ${b.end_ms - b.start_ms} ms`).join(', '));
  const item = document.createElement('li');
  const heading = document.createElement('div');
  const answered = record.stages.first_audio ?? record.stages.intent;
  const total = answered === undefined ? '' : ` · ${Math.round((answered - record.stages.speech_end) * 1000)} ms to the answer`;
  heading.textContent = `turn ${record.turn_id} · ${record.source ?? 'unanswered'}${record.early ? ' (early)' : ''}${total}`;
  const labels = document.createElement('ol');
  labels.className = 'stages';
  for (const bar of bars) {
    const label = document.createElement('li');
    label.className = bar.lane;
    label.textContent = `${bar.label} ${bar.end_ms - bar.start_ms} ms`;
    labels.append(label);
  }
  item.append(heading, svg, labels);
  $('timings').prepend(item);
  while ($('timings').children.length > TIMINGS_SHOWN) $('timings').lastElementChild.remove();
}

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
  $('forget').disabled = false;
  $('forget').onclick = async () => {
    await voxline.clearCache();
    $('detail').textContent = 'Learned commands forgotten: each is recognised afresh next time.';
  };
  if (params.get('autostart') === '1') return listen();
}).catch(() => { /* already reported through voxline:error */ });
