"""Cross-origin access for the embedded widget: CORS on the assets it loads.

A page on another origin that embeds the widget loads everything else from the Voxline origin: module scripts,
module workers (imported from a same-origin blob, see web/voxline/workers.js), audio worklets, wasm, models and
the intent wheel. Browsers fetch all of these in CORS mode, so they need `Access-Control-Allow-Origin`.

What is safe: these assets are public and the same for everyone, the server sets no cookies and reads no HTTP
credentials, and the answer never carries `Access-Control-Allow-Credentials`. So `*` lets a page read nothing that
`curl` could not fetch. It is still given only to the widget's asset paths: `/healthz`, `/metrics` and the demo
page are not readable cross-origin, so a site the user visits cannot read the metrics of a Voxline server on the
user's own machine or network.

The WebSocket is different: browsers apply no CORS to it (any page may open `/ws` and the server only sees its
`Origin` header), so the server decides itself, after accepting the handshake so that the page sees why: the origin
allowlist and the site keys' origins in `admission.py` (`Settings.allowed_origins`, `Settings.site_keys`). `/token`
answers its own CORS (`token_endpoint.py`): the page's origin, only when its key allows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

WIDGET_ASSET_PREFIXES = ("/widget.js", "/voxline-widget.mjs", "/widget/", "/voxline/", "/vendor/",
                         "/wasm_models/", "/intents/")
"""Paths an embedded widget loads from the Voxline origin (the bundles, the unbundled modules, the workers and
worklets beside them, onnxruntime-web and Pyodide, the browser models, the intent engine wheel)."""
PREFLIGHT_MAX_AGE_S = 86_400
"""How long a browser may reuse a preflight answer: the policy changes only when the server restarts."""


@dataclass(frozen=True)
class CrossOriginPolicy:
    """What a browser page on another origin may read from this server."""

    asset_prefixes: tuple[str, ...] = WIDGET_ASSET_PREFIXES
    """Paths (folders end in `/`) that answer every origin with `Access-Control-Allow-Origin: *`."""

    def is_asset(self, path: str) -> bool:
        """A prefix ending in `/` is a folder; any other is one exact path."""
        return any(path.startswith(p) if p.endswith("/") else path == p for p in self.asset_prefixes)


class CrossOriginMiddleware:
    """Pure ASGI middleware: adds the CORS headers to widget assets and answers their preflights. Responses are
    never buffered; WebSockets pass through (admission.py decides who may connect)."""

    def __init__(self, app: ASGIApp, policy: CrossOriginPolicy | None = None) -> None:
        self.app = app
        self.policy = policy or CrossOriginPolicy()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.policy.is_asset(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method") is not None:
            await self._preflight(scope, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"access-control-allow-origin"]
                message = {**message, "headers": [*headers, (b"access-control-allow-origin", b"*")]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, scope: Scope, send: Send) -> None:
        # Simple GETs need none; a Range request or a custom header from a library (Pyodide, onnxruntime) does.
        headers = [
            (b"access-control-allow-origin", b"*"),
            (b"access-control-allow-methods", b"GET, HEAD, OPTIONS"),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
        ]
        requested = _header(scope, b"access-control-request-headers")
        if requested:
            headers.append((b"access-control-allow-headers", requested.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None
