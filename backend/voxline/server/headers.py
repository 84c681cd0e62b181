"""Response headers every Voxline response carries, and the demo page's Content-Security-Policy.

onnxruntime-web needs SharedArrayBuffer for wasm threads, which the browser grants only to a cross-origin isolated
page: COOP `same-origin` and COEP `require-corp` on the document, and every subresource either same-origin or
marked loadable with CORP. `cross-origin` CORP lets a widget host on another origin load our scripts and models.

The CSP goes on HTML documents only (the demo page; a page that embeds the widget has its own). It allows exactly
what the page does: module scripts, worklets and workers from this origin (`blob:` workers too: onnxruntime-web and
`workers.js` may start one), compiling wasm (`'wasm-unsafe-eval'`, not `'unsafe-eval'`), fetching models and the
`/ws` WebSocket on this origin (CSP 3 `'self'` covers `ws:`/`wss:` to the same host), its stylesheet, and the
`data:` favicon. No inline script or style, no plugins, no framing, no `<base>`. A worker's own policy comes from
its script's response, which has none, so onnxruntime-web and Pyodide run unchanged inside their workers.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ISOLATION_HEADERS = {
    b"cross-origin-opener-policy": b"same-origin",
    b"cross-origin-embedder-policy": b"require-corp",
    b"cross-origin-resource-policy": b"cross-origin",
    b"x-content-type-options": b"nosniff",
}
DEMO_PAGE_CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self' 'wasm-unsafe-eval'",
    "worker-src 'self' blob:",
    "connect-src 'self'",
    "img-src 'self' data:",
    "style-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
])
"""The Content-Security-Policy of HTML documents (the demo page)."""


class IsolationHeadersMiddleware:
    """Pure ASGI middleware (no response buffering), so streamed and WebSocket responses are untouched."""

    def __init__(self, app: ASGIApp, csp: str = DEMO_PAGE_CSP) -> None:
        self.app = app
        self.csp = csp.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                present = {name.lower() for name, _ in headers}
                extra = [(k, v) for k, v in ISOLATION_HEADERS.items() if k not in present]
                html = any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers)
                if html and b"content-security-policy" not in present:
                    extra.append((b"content-security-policy", self.csp))
                message = {**message, "headers": [*headers, *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
