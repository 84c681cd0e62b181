"""Response headers every Voxline response carries.

onnxruntime-web needs SharedArrayBuffer for wasm threads, which the browser grants only to a cross-origin isolated
page: COOP `same-origin` and COEP `require-corp` on the document, and every subresource either same-origin or
marked loadable with CORP. `cross-origin` CORP lets a widget host on another origin load our scripts and models.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ISOLATION_HEADERS = {
    b"cross-origin-opener-policy": b"same-origin",
    b"cross-origin-embedder-policy": b"require-corp",
    b"cross-origin-resource-policy": b"cross-origin",
}


class IsolationHeadersMiddleware:
    """Pure ASGI middleware (no response buffering), so streamed and WebSocket responses are untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in ISOLATION_HEADERS.items() if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
