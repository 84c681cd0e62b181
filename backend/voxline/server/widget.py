"""The built widget (`npm run build` writes `dist/`), served at `/widget.js` (one classic script) and at
`/voxline-widget.mjs` (the ES module).

The bundles are build output, not sources, so they are read at request time from `dist/` in a checkout (package
data in an installed wheel, `config.WIDGET_DIR`): a rebuild is served at once, and a missing build is a 404 that
says how to make it rather than a server that refuses to start (the demo page does not need the widget).
"""

from __future__ import annotations

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from voxline.config import WIDGET_DIR
from voxline.server.assets import Asset, AssetSender

DIST_DIR = WIDGET_DIR
WIDGET_BUNDLES = {"/widget.js": "widget.js", "/voxline-widget.mjs": "voxline-widget.mjs"}
"""URL path → file in `dist/`."""


def widget_routes(dist_dir: Path = DIST_DIR, sender: AssetSender | None = None) -> list[Route]:
    """One route per bundle; with a `sender`, sent compressed with a sha256 ETag (a 304 when unchanged)."""

    def serve(file_name: str):
        async def bundle(request: Request) -> Response:
            path = dist_dir / file_name
            if not path.is_file():
                raise HTTPException(404, f"the widget is not built ({path} is missing): run `npm run build` "
                                         "(scripts/setup.sh does it)")
            # Not content-addressed (one URL for every build): the browser revalidates, so a rebuild shows at once.
            if sender is not None:
                return await sender.respond(request, Asset.of(path.read_bytes(), "text/javascript"), immutable=False)
            return FileResponse(path, media_type="text/javascript", headers={"cache-control": "no-cache"})

        return bundle

    return [Route(url, serve(file_name), methods=["GET", "HEAD"]) for url, file_name in WIDGET_BUNDLES.items()]
