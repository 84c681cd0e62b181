// The widget as an ES module (`npm run build` bundles it as dist/voxline-widget.mjs; the server also serves it
// at /voxline-widget.mjs). Importing it registers <voxline-assistant>; its default `base` is the origin this module
// was loaded from, so `import 'https://voxline.example/voxline-widget.mjs'` talks to that server. A page that
// bundles this module itself sets the element's `base` attribute (or `VoxlineAssistant.defaults.base`) instead.
import { VoxlineAssistant, defineVoxlineAssistant } from './assistant.js';

VoxlineAssistant.defaults.base ??= new URL('/', import.meta.url).href;
defineVoxlineAssistant();

export { VoxlineAssistant, defineVoxlineAssistant };
export { EVENTS } from '../voxline/events.js';
export { Voxline } from '../voxline/voxline.js';
