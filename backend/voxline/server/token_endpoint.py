"""`POST /token?key=<key id>`: a short-lived token for the page that asks, when its site key is `public`.

The simple deployment: the host page (or the widget's `token-url`) asks the Voxline server itself. The server mints
a token only for the request's `Origin`, and only if the key lists it; a browser cannot forge `Origin`, so another
site's page cannot get a token for this key. What it does not prove is who the user is, and a script outside a
browser can send any `Origin`: a public key is as open as its origins' pages, bounded by the rate limit here, the
key's session cap and the per-address caps. When that is not enough, keep the key private (not `public`) and let the
host site's backend mint tokens for its signed-in users (`voxline.server.auth.mint_token`, `voxline token mint`).

Answers (JSON, `Cache-Control: no-store`, `Vary: Origin`; `Access-Control-Allow-Origin` is the page's origin when
the key allows it, so the page can read the answer; no credentials):

    200 {"token", "key_id", "expires_at", "ttl_s"}
    403 {"code": "origin_not_allowed", "message"}     no Origin, or one the key does not list
    404 {"code": "unknown_key", "message"}            no such key, or it is not public
    429 {"code": "rate_limited", "message"} + Retry-After: over `token_requests_per_minute` for the address
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from voxline.config import Settings
from voxline.server.admission import Gate
from voxline.server.auth import mint_token
from voxline.server.limits import TokenBucket

log = logging.getLogger(__name__)

MAX_TRACKED_ADDRESSES = 4096
"""Rate-limit state is kept for this many client addresses (least recently seen forgotten first)."""


class TokenEndpoint:
    """The `/token` handler: mints for public keys, per-address rate-limited."""

    def __init__(self, gate: Gate, settings: Settings) -> None:
        self.gate = gate
        self.ttl_s = settings.token_ttl_s
        self.per_minute = settings.token_requests_per_minute
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    async def handle(self, request: Request) -> JSONResponse:
        origin = request.headers.get("origin")
        address = request.client.host if request.client else "?"
        key_id = request.query_params.get("key", "")
        key = self.gate.keys.get(key_id)
        allowed = key is not None and key.public and origin is not None and origin in key.origins
        headers = {"cache-control": "no-store", "vary": "Origin"}
        if allowed:
            headers["access-control-allow-origin"] = origin

        def refuse(status: int, code: str, message: str, **extra: str) -> JSONResponse:
            log.warning("refused a token: %s key=%s origin=%s address=%s", code, key_id[:64], origin, address)
            return JSONResponse({"code": code, "message": message}, status, headers={**headers, **extra})

        bucket = self._bucket(address)
        if bucket is not None and not bucket.take():
            retry_s = max(1, round(bucket.wait_s() + 0.5))
            return refuse(429, "rate_limited", f"more than {self.per_minute:g} token requests a minute from this "
                          f"address: retry in {retry_s} s", **{"retry-after": str(retry_s)})
        if key is None or not key.public:
            return refuse(404, "unknown_key", "no public site key by that name: tokens for a private key come from "
                                              "the host site's own backend")
        if not allowed:
            return refuse(403, "origin_not_allowed", "this site key does not allow pages from this origin"
                          if origin else "no Origin header: /token serves browser pages; mint tokens for other "
                          "clients with `voxline token mint`")
        now = time.time()
        token = mint_token(key, origin, ttl_s=self.ttl_s, now=now)
        return JSONResponse({"token": token, "key_id": key.id, "expires_at": int(now + self.ttl_s),
                             "ttl_s": self.ttl_s}, headers=headers)

    def _bucket(self, address: str) -> TokenBucket | None:
        if self.per_minute <= 0:
            return None
        bucket = self._buckets.pop(address, None)
        if bucket is None:
            bucket = TokenBucket(self.per_minute / 60.0, max(1, int(self.per_minute)))
            while len(self._buckets) >= MAX_TRACKED_ADDRESSES:
                self._buckets.popitem(last=False)
        self._buckets[address] = bucket
        return bucket


def token_routes(gate: Gate, settings: Settings) -> list[Route]:
    return [Route("/token", TokenEndpoint(gate, settings).handle, methods=["POST"])]
