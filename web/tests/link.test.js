// Reconnect backoff of the link to the backend: doubling, capped, jittered. The link itself (a real WebSocket to a
// server killed and restarted) is exercised in real Chromium by e2e/test_faults.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RECONNECT_DEFAULTS, reconnectDelayMs } from '../voxline/link.js';
import { DEFAULTS } from '../voxline/settings.js';

const noJitterDrawn = () => 0;
const mostJitterDrawn = () => 0.999999;

test('the wait doubles with each failed attempt, up to the cap', () => {
  const delays = Array.from({ length: 8 }, (_, n) => reconnectDelayMs(n, RECONNECT_DEFAULTS, noJitterDrawn));
  assert.deepEqual(delays, [500, 1000, 2000, 4000, 8000, 10000, 10000, 10000]);
});

test('jitter takes at most its fraction off each wait', () => {
  const backoff = { firstMs: 1000, maxMs: 8000, jitter: 0.5 };
  for (let attempt = 0; attempt < 6; attempt++) {
    const ceiling = Math.min(8000, 1000 * 2 ** attempt);
    const least = reconnectDelayMs(attempt, backoff, mostJitterDrawn);
    assert.ok(least >= ceiling * 0.5 && least < ceiling * 0.51, `attempt ${attempt}: ${least}`);
    assert.equal(reconnectDelayMs(attempt, backoff, noJitterDrawn), ceiling);
  }
});

test('random draws spread pages that dropped together', () => {
  const delays = new Set(Array.from({ length: 50 }, () => Math.round(reconnectDelayMs(3, RECONNECT_DEFAULTS))));
  assert.ok(delays.size > 10);
  for (const delay of delays) assert.ok(delay >= 2000 && delay <= 4000, String(delay));
});

test('no jitter is deterministic, and a jitter outside 0..1 is clamped', () => {
  assert.equal(reconnectDelayMs(2, { firstMs: 100, maxMs: 1000, jitter: 0 }), 400);
  assert.equal(reconnectDelayMs(2, { firstMs: 100, maxMs: 1000, jitter: -1 }, mostJitterDrawn), 400);
  assert.ok(reconnectDelayMs(2, { firstMs: 100, maxMs: 1000, jitter: 7 }, mostJitterDrawn) >= 0);
});

test('a page that has been offline for hours still waits the cap, not Infinity', () => {
  assert.equal(reconnectDelayMs(10_000, RECONNECT_DEFAULTS, noJitterDrawn), RECONNECT_DEFAULTS.maxMs);
});

test("the link's defaults are the named settings' defaults", () => {
  assert.deepEqual(RECONNECT_DEFAULTS, { firstMs: DEFAULTS.reconnectFirstMs, maxMs: DEFAULTS.reconnectMaxMs,
    jitter: DEFAULTS.reconnectJitter });
});
