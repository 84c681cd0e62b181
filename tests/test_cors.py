"""Cross-origin access for the embedded widget: CORS on its assets only, preflights; WebSockets untouched."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

from voxline.server.cors import CrossOriginMiddleware, CrossOriginPolicy

HOST_PAGE = "http://shop.example:8080"


async def ok(request):
    return PlainTextResponse("ok")


async def echo(websocket: WebSocket):
    await websocket.accept()
    await websocket.send_text("welcome")
    await websocket.close()


def make_client(policy: CrossOriginPolicy | None = None) -> TestClient:
    routes = [Route(path, ok) for path in ("/widget.js", "/voxline/vad-worker.js", "/wasm_models/x/model.onnx",
                                           "/vendor/pyodide/pyodide.asm.wasm", "/intents/w.whl", "/metrics",
                                           "/healthz", "/", "/widget.json")]
    app = Starlette(routes=[*routes, WebSocketRoute("/ws", echo)],
                    middleware=[Middleware(CrossOriginMiddleware, policy=policy)])
    return TestClient(app)


@pytest.mark.parametrize("path", ["/widget.js", "/voxline/vad-worker.js", "/wasm_models/x/model.onnx",
                                  "/vendor/pyodide/pyodide.asm.wasm", "/intents/w.whl"])
def test_widget_assets_are_readable_from_any_origin(path):
    response = make_client().get(path, headers={"origin": HOST_PAGE})
    assert response.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in response.headers


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/", "/widget.json"])
def test_operational_endpoints_and_the_demo_page_are_not(path):
    response = make_client().get(path, headers={"origin": HOST_PAGE})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_preflight_of_an_asset_is_answered_without_reaching_the_app():
    response = make_client().options("/wasm_models/x/model.onnx", headers={
        "origin": HOST_PAGE, "access-control-request-method": "GET", "access-control-request-headers": "range"})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-allow-headers"] == "range"
    assert "GET" in response.headers["access-control-allow-methods"]


def test_websockets_pass_through_whatever_their_origin():
    # Who may connect is decided by the endpoint (tests/test_auth.py), which can tell the page why.
    with make_client().websocket_connect("/ws", headers={"origin": HOST_PAGE}) as ws:
        assert ws.receive_text() == "welcome"
    with make_client().websocket_connect("/ws") as ws:  # the Python client sends no Origin
        assert ws.receive_text() == "welcome"
