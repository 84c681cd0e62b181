// A site's TypeScript against the `voxline-widget` package's types, compiled with `tsc --noEmit` by
// widget-package.test.js (through the package's `exports`, as an installed package resolves). Every line marked
// `@ts-expect-error` must be refused: tsc fails when such a line compiles, so these are the types' negative tests.
import { EVENTS, Voxline, VoxlineAssistant, defineVoxlineAssistant } from 'voxline-widget';
import type {
  VoxlineEventMap, VoxlineIntentDetail, VoxlineOptions, VoxlineSettings, VoxlineAssistantState,
} from 'voxline-widget';
import type {} from 'voxline-widget/widget.js';

// The element, from the DOM's own lookups.
const assistant = document.querySelector('voxline-assistant');
if (assistant) {
  const state: VoxlineAssistantState = assistant.state;
  const removeHandler: () => void = assistant.onIntent('media.pause', (detail) => {
    const source: 'cache' | 'local' | 'server' = detail.source;
    console.log(detail.intent, detail.slots, source, detail.confidence, state);
  });
  removeHandler();
  assistant.addEventListener('voxline:transcript', (event) => {
    const text: string = event.detail.text;
    const final: boolean = event.detail.final;
    console.log(text, final, event.detail.audio_t);
  });
  assistant.addEventListener('click', (event) => console.log(event.clientX)); // the element's own events still type
  // @ts-expect-error an intent's detail has no `transcript`
  assistant.onIntent('media.pause', (detail) => detail.transcript);
  // @ts-expect-error `state` is read-only: the element reflects it
  assistant.state = 'idle';
}
const created: VoxlineAssistant = document.createElement('voxline-assistant');
created.setAttribute('base', 'https://voxline.example/');
VoxlineAssistant.defaults.server = 'wss://voxline.example/ws';
defineVoxlineAssistant();

// Each event on `document`, by its name and through EVENTS.
document.addEventListener('voxline:ready', (event) => console.log(event.detail.load_ms, event.detail.isolated));
document.addEventListener(EVENTS.intent, (event) => {
  const detail: VoxlineIntentDetail = event.detail;
  console.log(detail.intent);
});
document.addEventListener('voxline:link', (event) => {
  // @ts-expect-error not a link state
  if (event.detail.state === 'broken') console.log('never');
});
window.addEventListener('voxline:error', (event) => console.log(event.detail.code, event.detail.message));
const names: (keyof VoxlineEventMap)[] = [EVENTS.ready, EVENTS.speechStart, EVENTS.speechEnd, EVENTS.transcript,
  EVENTS.intent, EVENTS.reply, EVENTS.replyAudio, EVENTS.timings, EVENTS.link, EVENTS.turn, EVENTS.error];
// @ts-expect-error EVENTS is read-only
EVENTS.intent = 'voxline:other';
// @ts-expect-error not an event of Voxline's
const wrong: keyof VoxlineEventMap = 'voxline:intents';

// Voxline without the element.
const settings: Partial<VoxlineSettings> = { hangoverSecs: 0.6, speculativeTurns: false };
const options: VoxlineOptions = { base: new URL('https://voxline.example/'), server: null, settings,
  token: async () => 'token', target: document.body, onProgress: (fraction) => console.log(fraction) };
const voxline = new Voxline(options);
void voxline.load().then((ready) => ready.models.map((m) => m.bytes));
// @ts-expect-error a setting that does not exist
new Voxline({ settings: { hangoverSeconds: 0.6 } });
// @ts-expect-error a setting of the wrong type
new Voxline({ settings: { hangoverSecs: '0.6' } });

// The one-script-tag bundle's global.
void window.VoxlineWidget.assistant.then((el) => el.onIntent('*', (detail) => console.log(detail.intent)));
const again: VoxlineAssistant = await VoxlineWidget.assistant;

console.log(names, wrong, again);
