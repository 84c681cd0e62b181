"""Who may open a `/ws` session, and how many at once: the origin allowlist, tokens, and the session caps.

Two moments decide. At the handshake (`Gate.admit`) the server knows the page's `Origin` and the client's address:
an origin off the allowlist is refused (4403), and so is an address already holding its share of sessions (4429).
The allowlist always holds the server's own origin (the `Origin` whose host and port are the request's `Host`: its
demo page), then `Settings.allowed_origins`, or without it the site keys' origins; `*` admits every origin. So a
server started with no settings serves its own page and native clients (no `Origin`), and no page of another site
can drive a user's local server. Against DNS rebinding (a hostile name resolved to 127.0.0.1, whose pages are then
"same origin"), a server bound to a loopback address takes as its own only origins on a loopback host.
At `hello` (`Gate.authenticate`) it has the token: with site keys configured it must be valid for that origin
(4401, or 4403 when the key does not list the origin), and the key must have a session to spare (4429). A server
with no site keys and no `auth_token` is open, as for local use; with only `auth_token` (the single shared token
of earlier versions) a wrong one closes with 4001, as before.

The browser only sees a close code if the handshake was accepted, so refusals accept first, send an `error`, then
close with the code (`ws.py`). Every refusal is logged with its reason, key id, origin and address; never with the
token or a secret.
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from voxline.config import Settings
from voxline.errors import OriginNotAllowed, TooManySessions, Unauthenticated, Unauthorized
from voxline.server.auth import KEY_ID_PATTERN, SiteKey, load_site_keys, normalize_origin, verify_token

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Peer:
    """Where a connection comes from, as the handshake says."""

    origin: str | None = None
    """The `Origin` header: the page's origin for a browser, None for other clients."""
    address: str | None = None
    """The client's IP address (the proxy's, unless uvicorn trusts its forwarded headers: `forwarded_allow_ips`)."""
    host: str | None = None
    """The request's `Host` header (`127.0.0.1:8000`): what the server's own origin is for this connection."""


ANY_ORIGIN = "*"
"""`Settings.allowed_origins` entry that admits pages of every origin."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
"""Host names a loopback-bound server answers to as itself (any 127.x.y.z address too)."""


def _hostname(origin: str) -> str:
    return urlsplit(origin).hostname or ""


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def own_origin(origin: str, host: str | None, *, loopback_only: bool = False) -> bool:
    """Whether `origin` is the server's own for a request with this `Host` header (same scheme-default port)."""
    if not host:
        return False
    try:
        mine = normalize_origin(origin)
        scheme = mine.split("://", 1)[0]
        theirs = normalize_origin(f"{scheme}://{host}")
    except ValueError:
        return False
    return mine == theirs and (not loopback_only or _is_loopback(_hostname(mine)))


class Gate:
    """The admission policy of one server process, and the count of the sessions it admitted."""

    def __init__(self, settings: Settings, keys: Mapping[str, SiteKey] | None = None) -> None:
        self.settings = settings
        self.keys = dict(load_site_keys(settings.site_keys) if keys is None else keys)
        entries = [o.strip() for o in settings.allowed_origins.split(",") if o.strip()]
        listed = frozenset(normalize_origin(o) for o in entries if o != ANY_ORIGIN)
        self.origins: frozenset[str] | None = None if ANY_ORIGIN in entries else listed or frozenset().union(
            *(k.origins for k in self.keys.values()))
        """Origins whose pages may connect besides the server's own; None admits any."""
        self.loopback_only = _is_loopback(settings.host)
        """Bound to a loopback address: only a loopback `Host` makes an origin the server's own (DNS rebinding)."""
        self._sessions: dict[str, tuple[Peer, str | None]] = {}
        self._per_address: Counter[str] = Counter()
        self._per_key: Counter[str] = Counter()

    @property
    def requires_token(self) -> bool:
        return bool(self.keys or self.settings.auth_token)

    def admit(self, session_id: str, peer: Peer) -> None:
        """A new connection: refuse it (`OriginNotAllowed`, `TooManySessions`) or count it in."""
        if peer.origin is not None and not self.allows_origin(peer):
            self._refuse(OriginNotAllowed(f"pages from {peer.origin} may not use this server"), peer)
        cap = self.settings.max_sessions_per_address
        if peer.address is not None and cap and self._per_address[peer.address] >= cap:
            self._refuse(TooManySessions(f"{cap} sessions are already open from this address: close one first"),
                         peer)
        self._sessions[session_id] = (peer, None)
        if peer.address is not None:
            self._per_address[peer.address] += 1

    def allows_origin(self, peer: Peer) -> bool:
        """Whether a page of `peer.origin` may open a session (a client without an `Origin` is not asked)."""
        if self.origins is None or peer.origin in self.origins:
            return True
        return own_origin(peer.origin, peer.host, loopback_only=self.loopback_only)

    def authenticate(self, session_id: str, token: str | None) -> SiteKey | None:
        """The `hello` of an admitted session: its site key (None when the server has none, or for the shared
        `auth_token`); raises `Unauthorized` (or its subclasses) or `TooManySessions`, never echoing the token."""
        peer, bound = self._sessions.get(session_id, (Peer(), None))
        if bound is not None:  # a second hello (the first was refused for its language, say): count it once
            _decrement(self._per_key, bound)
            self._sessions[session_id] = (peer, None)
        if not self.requires_token:
            return None
        shared = self.settings.auth_token
        if token and shared and hmac.compare_digest(token.encode(), shared.encode()):
            return None
        if not self.keys:
            self._refuse(Unauthorized("hello.token is missing or wrong"), peer)
        if not token:
            self._refuse(Unauthenticated("hello.token is missing: this server needs a token of a site key "
                                         "(from the host site's backend, or from /token)"), peer)
        try:
            key = verify_token(self.keys, token, peer.origin)
        except (Unauthenticated, OriginNotAllowed) as exc:
            self._refuse(exc, peer, key_id=_key_id(token))
        cap = self.settings.max_sessions_per_key if key.max_sessions is None else key.max_sessions
        if cap and self._per_key[key.id] >= cap:
            self._refuse(TooManySessions(f"site key {key.id!r} has its {cap} sessions open: try again later"),
                         peer, key_id=key.id)
        self._sessions[session_id] = (peer, key.id)
        self._per_key[key.id] += 1
        return key

    def release(self, session_id: str) -> None:
        """The session is over: it no longer counts against its address and key."""
        peer, key_id = self._sessions.pop(session_id, (None, None))
        if peer is not None and peer.address is not None:
            _decrement(self._per_address, peer.address)
        if key_id is not None:
            _decrement(self._per_key, key_id)

    def open_sessions(self, *, address: str | None = None, key_id: str | None = None) -> int:
        """Sessions counted now: all, or those of one address or one key."""
        if address is not None:
            return self._per_address[address]
        if key_id is not None:
            return self._per_key[key_id]
        return len(self._sessions)

    def _refuse(self, error: Exception, peer: Peer, key_id: str | None = None):
        log.warning("refused a session: %s (%s) key=%s origin=%s address=%s", getattr(error, "code", "?"),
                    error, key_id, peer.origin, peer.address)
        raise error


def _key_id(token: str) -> str | None:
    """The key id a token claims (for the log), if it has the token's shape at all."""
    parts = token.split(".")
    return parts[1] if len(parts) == 5 and KEY_ID_PATTERN.match(parts[1]) else None


def _decrement(counter: Counter[str], name: str) -> None:
    counter[name] -= 1
    if counter[name] <= 0:
        del counter[name]
