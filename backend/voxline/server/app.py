"""The Voxline web app: the demo page, the browser models, health and metrics.

Browser models are served from memory, as hashed against the manifest at startup (`StartupVerification`), and only
the files the manifest pins, so the URL space cannot reach anything else in the cache and an altered file is never
sent. The server models are hashed before they are loaded. Static files are served only where the page or the
widget loads them: the web app without its tests, and only the pinned files of onnxruntime-web and Pyodide
(`runtimes.py`), hashed at startup too. Every one of them goes out with validators, a cache lifetime and, where it
compresses, a brotli or gzip variant (`assets.py`): content-addressed URLs (models with `?sha256=`, runtimes at
`/vendor/<package>/<version>/`) are immutable, the scripts are revalidated (a 304 costs headers only).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import mimetypes
import os
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from voxline import __version__, paths
from voxline.config import Settings
from voxline.errors import VoxlineError
from voxline.models import Manifest, load_manifest
from voxline.models.supply import StartupVerification, require_models
from voxline.server.admission import Gate
from voxline.server.assets import Asset, AssetSender
from voxline.server.cors import CrossOriginMiddleware
from voxline.server.drain import Drain
from voxline.server.engines import Engines
from voxline.server.headers import IsolationHeadersMiddleware
from voxline.server.metrics import ServerMetrics
from voxline.server.runtimes import (ONNXRUNTIME_WEB, PYODIDE, RUNTIMES, RuntimeFile, browser_runtimes,
                                     load_runtime_files)
from voxline.server.token_endpoint import token_routes
from voxline.server.widget import widget_routes
from voxline.server.ws import websocket_endpoint
from voxline.telemetry import Telemetry

log = logging.getLogger(__name__)

# Module scripts and wasm must carry these types or browsers refuse them (Python 3.11 does not know .mjs).
mimetypes.add_type("text/javascript", ".mjs")
mimetypes.add_type("application/wasm", ".wasm")


def browser_manifest(manifest: Manifest) -> dict:
    """What the page needs to fetch and check its models and runtimes: URL, size and sha256 of each file, and the
    level onnxruntime's optimizer already ran at when the model was built (`graph_optimization`, or null).

    A model's URL carries its digest (`?sha256=`), which makes it content-addressed: it is sent as immutable.
    """
    models = []
    for spec in manifest.models:
        if not spec.browser:
            continue
        folder = paths.model_dir(spec.name)
        files = [
            {
                "name": artifact,
                "url": f"/wasm_models/{spec.name}/{artifact}?sha256={digest}",
                "sha256": digest,
                "size": (folder / artifact).stat().st_size if (folder / artifact).exists() else None,
            }
            for artifact, digest in spec.artifacts.items()
        ]
        models.append({"name": spec.name, "role": spec.role, "files": files,
                       "graph_optimization": spec.graph_optimization})
    return {"version": __version__, "models": models, "runtimes": browser_runtimes()}


@dataclass(frozen=True)
class IntentsWheel:
    """The intent engine and built-in grammar as a wheel for Pyodide, built once at startup (deterministic)."""

    file_name: str
    data: bytes
    sha256: str
    grammar_version: str

    @classmethod
    def build(cls, settings: Settings) -> IntentsWheel:
        from voxline.intents.wheel import build_wheel

        with tempfile.TemporaryDirectory() as tmp:
            path = build_wheel(tmp, settings.skill_paths())
            data = path.read_bytes()
        return cls(path.name, data, hashlib.sha256(data).hexdigest(), settings.grammar().version)

    def manifest(self) -> dict:
        """The wheel and the Pyodide runtime the intents worker loads. The wheel's URL is its file name only (tests
        and proxies match on it): it is revalidated by its sha256 ETag, a 304 for 38 KB."""
        return {"url": f"/intents/{self.file_name}", "sha256": self.sha256,
                "size": len(self.data), "grammar_version": self.grammar_version,
                "runtime": browser_runtimes((PYODIDE,))[PYODIDE.name]}


ONNXRUNTIME_FILES = frozenset(ONNXRUNTIME_WEB.files)
"""What the page's onnxruntime-web (web/voxline/ort.js: the wasm build, its threaded glue and binary) fetches."""
PYODIDE_FILES = frozenset(PYODIDE.files)
"""What `loadPyodide` fetches for the intents worker (no packages: the engine comes as our own wheel). Pyodide's
`console.html` and the rest of its folder are not served."""
WEB_EXCLUDED_FOLDERS = frozenset({"tests"})
"""Folders of web/ that no page loads (node's unit tests of the modules)."""


class WebFiles(StaticFiles):
    """The web app's folder, without the folders no page loads; each file revalidated and compressed.

    Files are read at request time (an edit shows at once); their sha256 and compressed variants are kept per
    (path, mtime, size), so an unchanged file is hashed and compressed once per process.
    """

    def __init__(self, *, directory: Path, sender: AssetSender, html: bool = True) -> None:
        super().__init__(directory=directory, html=html)
        self.sender = sender
        self._assets: dict[str, tuple[tuple[int, int], Asset]] = {}

    async def get_response(self, path: str, scope: Scope) -> Response:
        if path.replace("\\", "/").split("/", 1)[0] in WEB_EXCLUDED_FOLDERS:
            raise HTTPException(404, "not served")
        response = await super().get_response(path, scope)
        if not isinstance(response, FileResponse) or response.status_code != 200:
            return response
        return await self.sender.respond(Request(scope), self._asset(Path(response.path), response.media_type),
                                         immutable=False)

    def _asset(self, path: Path, media_type: str) -> Asset:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._assets.get(str(path))
        if cached is None or cached[0] != key:
            cached = (key, Asset.of(path.read_bytes(), media_type))
            self._assets[str(path)] = cached
        return cached[1]


def runtime_routes(runtime_files: dict[str, dict[str, RuntimeFile]], sender: AssetSender) -> list[Route]:
    """`/vendor/<package>/<version>/<file>` (immutable) and, for pages of older builds, `/vendor/<package>/<file>`
    (revalidated): only the pinned files, only as hashed at startup."""

    def serve(package_name: str, immutable: bool):
        async def runtime_file(request: Request) -> Response:
            file = runtime_files[package_name].get(request.path_params["file"])
            if file is None:
                raise HTTPException(404, "not served")
            if file.data is None:
                raise HTTPException(503, f"not served: {file.problem}, then restart the server")
            return await sender.respond(request, Asset(file.data, file.sha256, file.media_type), immutable=immutable)

        return runtime_file

    routes = []
    for package in RUNTIMES:
        routes.append(Route(package.url_prefix + "{file}", serve(package.name, True), methods=["GET", "HEAD"]))
        routes.append(Route(f"/vendor/{package.name}/{{file}}", serve(package.name, False), methods=["GET", "HEAD"]))
    return routes


def _require_dirs(settings: Settings) -> None:
    if not settings.web_dir.is_dir():
        raise VoxlineError(f"{settings.web_dir} (the demo page) does not exist: set VOXLINE_WEB_DIR to a folder "
                           "holding it, or reinstall Voxline")


def create_app(settings: Settings | None = None, manifest: Manifest | None = None, *,
               telemetry: Telemetry | None = None) -> Starlette:
    """Build the app; refuses (ModelMissing) when a model it serves or needs is not built and verified.

    `telemetry` defaults to what the settings configure (tracing off unless an OTLP endpoint is set).
    """
    settings = settings or Settings.from_env()
    manifest = manifest or load_manifest()
    browser_models = [m.name for m in manifest.models if m.browser]
    require_models(manifest, browser_models + settings.server_models())  # present at all (fast, by the stamps)
    verification = StartupVerification(manifest, served=browser_models, loaded=settings.server_models())
    _require_dirs(settings)
    started = time.time()
    telemetry = telemetry or Telemetry.from_settings(settings.otlp_endpoint)
    server_metrics = ServerMetrics()
    registry = server_metrics.registry
    server_metrics.gauge("voxline_up_seconds", "Seconds since the server started", lambda: time.time() - started)
    sender = AssetSender()
    runtime_files = load_runtime_files()
    # Set by the lifespan as each model is loaded into memory (the server ASR only when a turn first needs it).
    loaded: dict[str, bool] = {}

    async def healthz(request: Request) -> JSONResponse:
        # Public: anyone can read it, so by default only what a load balancer needs (no pid, version or digests).
        models = []
        for spec in manifest.models:
            if spec.name not in browser_models and spec.name not in settings.server_models():
                continue
            model = {"name": spec.name, "verified": verification.verified(spec.name),
                     "loaded": loaded.get(spec.name, False)}
            if settings.health_details:
                model.update(role=spec.role, artifacts=spec.artifacts, served_to_browser=spec.browser)
            models.append(model)
        verified = [m["verified"] for m in models]
        status = "ok" if all(verified) else "starting" if None in verified and False not in verified else "degraded"
        body = {"status": status, "models": models}
        if settings.health_details:
            body.update(version=__version__, pid=os.getpid())
        return JSONResponse(body, status_code=200 if status == "ok" else 503, headers={"cache-control": "no-store"})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # The manifests are fixed for the life of the process: revalidated by ETag (a returning page gets a 304).
    models_manifest_asset = Asset.of(json.dumps(browser_manifest(manifest)).encode(), "application/json")

    async def models_manifest(request: Request) -> Response:
        return await sender.respond(request, models_manifest_asset, immutable=False)

    async def model_file(request: Request) -> Response:
        name, artifact = request.path_params["name"], request.path_params["artifact"]
        if name not in browser_models or artifact not in manifest.model(name).artifacts:
            raise HTTPException(404, f"no browser model file {name}/{artifact}")
        check = await asyncio.wrap_future(verification.futures[name])
        if not check.verified:
            raise HTTPException(503, f"model {name} differs from its pinned digest and is not served: run "
                                     "`voxline models fetch`, then restart the server")
        # Content-addressed by the manifest digest when the URL names it: then the browser never asks again.
        media_type = mimetypes.guess_type(artifact)[0] or "application/octet-stream"
        digest = manifest.model(name).artifacts[artifact]
        return await sender.respond(request, Asset(check.contents[artifact], digest, media_type),
                                    immutable=request.query_params.get("sha256") == digest)

    intents_wheel = IntentsWheel.build(settings)

    intents_manifest_asset = Asset.of(json.dumps(intents_wheel.manifest()).encode(), "application/json")

    async def intents_manifest(request: Request) -> Response:
        return await sender.respond(request, intents_manifest_asset, immutable=False)

    async def intents_wheel_file(request: Request) -> Response:
        if request.path_params["file"] != intents_wheel.file_name:
            raise HTTPException(404, "no such wheel")
        asset = Asset(intents_wheel.data, intents_wheel.sha256, "application/zip")
        return await sender.respond(request, asset,
                                    immutable=request.query_params.get("sha256") == intents_wheel.sha256)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Loaded once per process, before the first connection is accepted, and shared by every session.
        # The server models are loaded only as hashed: an altered file stops startup here, naming the fix.
        waited = time.monotonic()
        checks = await asyncio.to_thread(verification.require, settings.server_models())
        log.info("models hashed %.2f s after create_app began; startup waited %.2f s for them (%s)",
                 time.monotonic() - verification.started, time.monotonic() - waited,
                 ", ".join(f"{c.name} {c.size_bytes >> 20} MiB in {c.seconds:.2f} s" for c in checks))
        load = Engines.load
        if settings.engine == "ray":  # the models as Ray Serve deployments (docs/deploy.md)
            from voxline.ray import load_engines as load
        engines = await asyncio.to_thread(
            load, settings, paths.model_dir, lambda name: loaded.__setitem__(name, True),
            metrics=server_metrics, telemetry=telemetry,
        )
        app.state.engines = engines
        app.state.sessions = {}
        app.state.drain = Drain(app.state.sessions, settings.drain_timeout_s)
        app.state.drain.install_on_sigterm()  # SIGTERM: finish the turns in flight before uvicorn closes sockets
        scheduler = engines.scheduler
        server_metrics.gauge("voxline_active_sessions", "Open WebSocket sessions", lambda: len(app.state.sessions))
        server_metrics.watch_scheduler(scheduler)
        yield
        app.state.drain.uninstall()
        await asyncio.to_thread(scheduler.close, 5.0)
        sender.close()
        telemetry.shutdown()

    gate = Gate(settings)  # reads the site keys: a bad key file stops startup here
    routes = [
        WebSocketRoute("/ws", websocket_endpoint),
        Route("/healthz", healthz),
        Route("/intents/manifest.json", intents_manifest),
        Route("/intents/{file}", intents_wheel_file),
        Route("/metrics", metrics),
        Route("/wasm_models/manifest.json", models_manifest),
        Route("/wasm_models/{name}/{artifact}", model_file),
        *widget_routes(sender=sender),
        *token_routes(gate, settings),
        *runtime_routes(runtime_files, sender),
        Mount("/", WebFiles(directory=settings.web_dir, sender=sender)),
    ]
    middleware = [Middleware(IsolationHeadersMiddleware), Middleware(CrossOriginMiddleware)]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.gate = gate
    return app


def app_from_env() -> Starlette:
    """The app of one worker process of `voxline serve --workers N` (settings from `VOXLINE_*` variables)."""
    return create_app(Settings.from_env())
