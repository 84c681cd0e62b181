// Types of `voxline-widget/widget.js`, the one-script-tag bundle (a classic script, not a module): what it puts on
// `window.VoxlineWidget`. A TypeScript page that embeds it with <script src> writes
// `import type {} from 'voxline-widget/widget.js';` once (a type-only import: nothing is loaded) to get these.
import type { EVENTS, VoxlineAssistant, defineVoxlineAssistant } from './voxline-widget.js';

export interface VoxlineWidgetGlobal {
  /** The page's first <voxline-assistant>, or the floating one the script added when the page had none. */
  assistant: Promise<VoxlineAssistant>;
  VoxlineAssistant: typeof VoxlineAssistant;
  defineVoxlineAssistant: typeof defineVoxlineAssistant;
  EVENTS: typeof EVENTS;
}

declare global {
  var VoxlineWidget: VoxlineWidgetGlobal;
}

export type * from './voxline-widget.js';
