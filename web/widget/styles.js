// The widget's stylesheet, inside its shadow root. The page's rules cannot select anything in here, but they can
// style the host element itself, and whatever is inherited would flow in from there (even `* { font: ... !important }`
// matches the host). So the panel starts from `all: initial` and sets its own font and colours: nothing the page
// sets is inherited below it, and nothing here can reach the page. The page themes the widget only through the
// `--voxline-*` custom properties (which `all` leaves alone, so they still inherit) and the `::part()`s: panel,
// button, status, caption, answer. The host element's own box (position, margins) stays the page's to place.

export const STYLES = `
:host {
  display: inline-block;
  --_accent: var(--voxline-accent, #2563eb);
  --_on-accent: var(--voxline-on-accent, #ffffff);
  --_bg: var(--voxline-bg, #ffffff);
  --_fg: var(--voxline-fg, #1f2328);
  --_muted: var(--voxline-muted, #59636e);
  --_warn: var(--voxline-warn, #b45309);
  --_error: var(--voxline-error, #b91c1c);
  --_size: var(--voxline-size, 48px);
}
:host([hidden]) { display: none; }
:host([floating]) {
  position: fixed;
  right: var(--voxline-offset, 16px);
  bottom: var(--voxline-offset, 16px);
  z-index: var(--voxline-z-index, 2147483000);
}
* { box-sizing: border-box; }

.panel {
  all: initial;
  font: var(--voxline-font, 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif);
  color: var(--_fg);
  display: flex;
  align-items: center;
  gap: 12px;
  min-height: calc(var(--_size) + 16px);
  max-width: var(--voxline-max-width, 360px);
  padding: 8px 16px 8px 8px;
  background: var(--_bg);
  border-radius: var(--voxline-radius, 999px);
  box-shadow: var(--voxline-shadow, 0 2px 12px rgb(0 0 0 / 0.18));
}

.mic {
  all: unset;
  position: relative;
  flex: none;
  display: grid;
  place-items: center;
  width: var(--_size);
  height: var(--_size);
  border-radius: 50%;
  cursor: pointer;
  color: var(--_accent);
  background: color-mix(in srgb, var(--_accent) 12%, transparent);
  transition: background-color 150ms, color 150ms;
}
.mic:focus-visible { outline: 3px solid var(--voxline-focus, var(--_accent)); outline-offset: 3px; }
.mic:hover { background: color-mix(in srgb, var(--_accent) 22%, transparent); }
.icon { width: 55%; height: 55%; }
.icon .body { fill: currentColor; }
.icon .stand, .icon .slash { fill: none; stroke: currentColor; stroke-width: 2; stroke-linecap: round; }
.icon .slash { display: none; }
.ring {
  position: absolute;
  inset: -4px;
  border-radius: 50%;
  border: 3px solid transparent;
  pointer-events: none;
}

.text { min-width: 0; }
.status { margin: 0; font-weight: 600; }
.caption, .answer { margin: 2px 0 0; overflow-wrap: anywhere; }
.caption { color: var(--_muted); }
.caption.partial { font-style: italic; }
.caption:empty, .answer:empty { display: none; }
.sr-only {
  position: absolute;
  width: 1px;
  height: 1px;
  margin: -1px;
  padding: 0;
  overflow: hidden;
  clip-path: inset(50%);
  white-space: nowrap;
  border: 0;
}

/* loading: the ring fills with the download */
[data-state="loading"] .mic { color: var(--_muted); background: color-mix(in srgb, var(--_muted) 12%, transparent); }
[data-state="loading"] .ring {
  border: none;
  background: conic-gradient(var(--_accent) calc(var(--progress, 0) * 1turn), transparent 0);
  mask: radial-gradient(circle, transparent calc(50% - 3px), #000 calc(50% - 3px));
}
/* listening: filled, and pulsing while speech is heard */
[data-state="listening"] .mic { background: var(--_accent); color: var(--_on-accent); }
[data-state="listening"][data-hearing] .ring { border-color: var(--_accent); animation: pulse 900ms ease-out infinite; }
/* thinking: a spinning arc */
[data-state="thinking"] .mic { background: var(--_accent); color: var(--_on-accent); }
[data-state="thinking"] .ring { border-top-color: var(--_accent); animation: spin 900ms linear infinite; }
/* speaking: a breathing halo */
[data-state="speaking"] .mic { background: var(--_accent); color: var(--_on-accent); }
[data-state="speaking"] .ring { border-color: color-mix(in srgb, var(--_accent) 55%, transparent); animation: breathe 1200ms ease-in-out infinite; }
/* offline: still listening (local commands work), in the warning colour */
[data-state="offline"] .mic { background: var(--_warn); color: var(--_on-accent); }
[data-state="offline"] .status { color: var(--_warn); }
/* error: the microphone is off */
[data-state="error"] .mic { background: color-mix(in srgb, var(--_error) 14%, transparent); color: var(--_error); }
[data-state="error"] .icon .slash { display: inline; }
[data-state="error"] .status { color: var(--_error); }

@keyframes pulse { from { transform: scale(1); opacity: 1; } to { transform: scale(1.35); opacity: 0; } }
@keyframes spin { to { transform: rotate(1turn); } }
@keyframes breathe { 50% { transform: scale(1.15); } }
@media (prefers-reduced-motion: reduce) {
  .ring { animation: none !important; }
}
`;
