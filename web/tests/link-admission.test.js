// The link's side of admission (docs/protocol.md): tokens in hello, close codes that end the link for good, the
// dormant link after an idle close, and a token source that fails. Over a fake WebSocket the test plays the server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BackendLink, FATAL_CLOSES, tokenFromUrl } from '../voxline/link.js';

class FakeSocket {
  static OPEN = 1;
  /** @type {FakeSocket[]} */
  static opened = [];

  constructor(url) {
    this.url = url;
    this.sent = [];
    this.readyState = 0;
    FakeSocket.opened.push(this);
    queueMicrotask(() => {
      this.readyState = FakeSocket.OPEN;
      this.onopen?.();
    });
  }

  send(data) { this.sent.push(JSON.parse(data)); }

  close(code = 1000) { this.serverCloses(code); }

  serverSends(message) { this.onmessage?.({ data: JSON.stringify(message) }); }

  serverCloses(code) {
    this.readyState = 3;
    this.onclose?.({ code });
  }
}
globalThis.WebSocket = FakeSocket;

const settle = (ms = 20) => new Promise((resolve) => setTimeout(resolve, ms));
const FAST = { firstMs: 5, maxMs: 5, jitter: 0 };

function newLink(options = {}) {
  FakeSocket.opened = [];
  const errors = [];
  const statuses = [];
  const states = [];
  const handlers = { onError: (code, message) => errors.push({ code, message }), onStatus: (s) => statuses.push(s),
    onState: (state, detail) => states.push(detail.reason ? `${state}:${detail.reason}` : state) };
  const link = new BackendLink('ws://voxline.test/ws', handlers, { reconnect: FAST, ...options });
  return { link, errors, statuses, states };
}

const welcome = { type: 'welcome', session_id: 's', v: 1, limits: {}, reply_audio: {}, models: {} };

test('hello carries a fresh token from the token source on every connection', async () => {
  let minted = 0;
  const { link } = newLink({ token: async () => `token-${++minted}` });
  await link.connect();
  await settle();
  assert.equal(FakeSocket.opened[0].sent[0].token, 'token-1');
  FakeSocket.opened[0].serverCloses(1012); // the server restarts
  await settle();
  assert.equal(FakeSocket.opened[1].sent[0].token, 'token-2');
  link.close();
});

test('a refused token ends the link with the server\'s own error, reported once', async () => {
  const { link, errors } = newLink({ token: 'v1.shop.1.x.y' });
  await link.connect();
  await settle();
  const socket = FakeSocket.opened[0];
  socket.serverSends({ type: 'error', code: 'unauthenticated', message: 'the token expired 3 s ago: get a fresh one' });
  socket.serverCloses(4401);
  await settle();
  assert.deepEqual(errors.map((e) => e.code), ['unauthenticated']);
  assert.match(errors[0].message, /expired/);
  assert.equal(FakeSocket.opened.length, 1, 'no reconnect after 4401');
  assert.equal(link.closed, true);
});

test('every fatal close code is reported by the link itself when no error came first', async () => {
  for (const [code, [name]] of FATAL_CLOSES) {
    const { link, errors } = newLink();
    await link.connect();
    await settle();
    FakeSocket.opened[0].serverCloses(code);
    await settle();
    assert.deepEqual(errors.map((e) => e.code), [name], String(code));
    assert.match(errors[0].message, /voxline\.test.*Local commands still work/);
    assert.equal(FakeSocket.opened.length, 1, `no reconnect after ${code}`);
  }
  assert.deepEqual([...FATAL_CLOSES.keys()], [4000, 4001, 4002, 4401, 4403]);
});

test('an idle close is quiet, and the link comes back when the page has a turn', async () => {
  const { link, errors, statuses } = newLink();
  await link.connect();
  await settle();
  FakeSocket.opened[0].serverSends(welcome);
  FakeSocket.opened[0].serverSends({ type: 'error', code: 'idle_timeout', message: 'closing in 10 s' });
  FakeSocket.opened[0].serverCloses(4408);
  await settle();
  assert.deepEqual(errors, []);
  assert.deepEqual(statuses, [true, false]);
  assert.equal(link.dormant, true);
  assert.equal(FakeSocket.opened.length, 1, 'no reconnect while nothing is to be said');
  const woken = link.wake();
  await settle();
  FakeSocket.opened[1].serverSends(welcome);
  assert.equal(await woken, true);
  assert.equal(link.connected, true);
  link.close();
});

test('a restart (1012) or a refused session (4429) reconnects with backoff', async () => {
  for (const code of [1012, 4429]) {
    const { link, errors } = newLink();
    await link.connect();
    await settle();
    FakeSocket.opened[0].serverCloses(code);
    await settle();
    assert.equal(FakeSocket.opened.length, 2, String(code));
    assert.deepEqual(errors.map((e) => e.code), ['backend_unreachable']);
    link.close();
  }
});

test('link states: each change once, through a restart, an idle close, a wake, a refusal and a stop', async () => {
  const { link, states } = newLink();
  await link.connect();
  await settle();
  FakeSocket.opened[0].serverSends(welcome);
  FakeSocket.opened[0].serverCloses(1012); // the server restarts: offline, then connecting again by itself
  await settle();
  FakeSocket.opened[1].serverSends(welcome);
  FakeSocket.opened[1].serverCloses(4408); // idle: closed until there is a turn to send
  await settle();
  const woken = link.wake();
  await settle();
  FakeSocket.opened[2].serverSends(welcome);
  await woken;
  link.close();
  await settle();
  assert.deepEqual(states, ['connecting', 'open', 'offline', 'connecting', 'open', 'closed:idle', 'connecting', 'open',
    'closed:stopped']);

  const refused = newLink();
  await refused.link.connect();
  await settle();
  FakeSocket.opened[0].serverCloses(4403);
  refused.link.close(); // already closed for good; the page lets go of it too
  await settle();
  assert.deepEqual(refused.states, ['connecting', 'closed:refused', 'closed:stopped']);

  const noToken = newLink({ token: async () => { throw new Error('HTTP 503'); } });
  await noToken.link.connect();
  noToken.link.close();
  assert.deepEqual(noToken.states, ['offline:token_unavailable', 'closed:stopped']);
});

test('a token source that fails is reported and tried again', async () => {
  let calls = 0;
  const { link, errors } = newLink({ token: async () => { calls += 1; if (calls === 1) throw new Error('HTTP 429'); return 't'; } });
  await link.connect();
  await settle();
  assert.deepEqual(errors.map((e) => e.code), ['token_unavailable']);
  assert.match(errors[0].message, /HTTP 429/);
  assert.equal(FakeSocket.opened.length, 1);
  assert.equal(FakeSocket.opened[0].sent[0].token, 't');
  link.close();
});

test('tokenFromUrl POSTs and reads the token from the JSON answer', async () => {
  const requests = [];
  globalThis.fetch = async (url, init) => {
    requests.push({ url, method: init.method });
    return { ok: true, json: async () => ({ token: 'v1.shop.9.n.s', expires_at: 9 }) };
  };
  assert.equal(await tokenFromUrl('https://voxline.test/token?key=shop')(), 'v1.shop.9.n.s');
  assert.deepEqual(requests, [{ url: 'https://voxline.test/token?key=shop', method: 'POST' }]);
  globalThis.fetch = async () => ({ ok: false, status: 403 });
  await assert.rejects(tokenFromUrl('https://voxline.test/token?key=shop')(), /HTTP 403/);
});

test('the widget shows a server that refuses the page as offline: local commands still work', async () => {
  const { INITIAL_STATUS, nextStatus, shownState } = await import('../widget/state.js');
  for (const code of ['unauthenticated', 'origin_not_allowed', 'unauthorized', 'token_unavailable']) {
    let status = nextStatus(INITIAL_STATUS, { type: 'voxline:ready' });
    status = nextStatus(status, { type: 'listen' });
    status = nextStatus(status, { type: 'voxline:error', detail: { code, message: '…' } });
    assert.equal(shownState(status), 'offline', code);
    assert.equal(status.listening, true, code);
  }
});
