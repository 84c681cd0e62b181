// Settings from a page URL (settings.js settingsFromQuery): numbers, flags, and an object setting as JSON.
import test from 'node:test';
import assert from 'node:assert/strict';

import { DEFAULTS, resolveSettings, settingsFromQuery } from '../voxline/settings.js';

test('a URL sets numbers, flags and an object setting', () => {
  const model = { bias: 1, spelled: 0.5, margin: 0.5, freeConfidence: 0.5, wordRatio: 2 };
  const query = `?vx.hangoverSecs=0.5&vx.fullWindow=1&vx.commandConfidenceModel=${encodeURIComponent(JSON.stringify(model))}&other=1`;
  const settings = resolveSettings(settingsFromQuery(query));
  assert.equal(settings.hangoverSecs, 0.5);
  assert.equal(settings.fullWindow, true);
  assert.deepEqual(settings.commandConfidenceModel, model);
  assert.equal(resolveSettings({}).commandConfidenceModel, DEFAULTS.commandConfidenceModel);
});

test('an object setting that is not a JSON object is refused by name', () => {
  assert.throws(() => settingsFromQuery('?vx.commandConfidenceModel={bias'), /vx\.commandConfidenceModel must be JSON/);
  assert.throws(() => settingsFromQuery('?vx.commandConfidenceModel=3'), /must be a JSON object or null/);
  assert.equal(settingsFromQuery('?vx.commandConfidenceModel=null').commandConfidenceModel, null);
});
