"""Site keys and the short-lived tokens signed with them: who may open a `/ws` session.

A site key belongs to one website (or app): an id, an HMAC secret, the origins its pages are served from, and what
its users get (a service tier for the scheduler, a cap on concurrent sessions). A page never holds the secret. It
holds a token, which whoever has the secret mints for one origin and a few minutes:

    v1.<key_id>.<expires_unix>.<nonce>.<signature>
    signature = base64url(HMAC-SHA256(secret, "v1.<key_id>.<expires_unix>.<nonce>.<origin>")), unpadded

The origin is signed but not written in the token: the server checks the signature against the `Origin` header of
the connection, which a browser page cannot forge, so a token taken from one site is useless on another. A token
minted without an origin (`origin=None`) is for clients that send no `Origin` (a native app, `voxline talk`); a
browser always sends one, so no page can use it.

Who mints: the host site's own backend, with `mint_token` or `voxline token mint` (the secret stays on the host's
servers and the host decides which users get tokens); or, for a key marked `public`, the Voxline server's `/token`
endpoint, for any page on one of the key's origins (see `token_endpoint.py`). Tokens are bearer tokens until they
expire: a page may reconnect with the same one.

Nothing here logs, and no error message repeats a token or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from voxline.errors import OriginNotAllowed, Unauthenticated, VoxlineError

TOKEN_VERSION = "v1"
DEFAULT_TOKEN_TTL_S = 300.0
"""Five minutes: long enough for a page to connect (and reconnect after a blip), short enough that a leaked token
soon stops working."""
MAX_TOKEN_TTL_S = 24 * 3600.0
"""A token that claims to live longer than this is refused, whoever signed it."""
MIN_SECRET_CHARS = 16
"""Shorter secrets are refused when keys are loaded (`new_secret` makes 43 characters, 256 bits)."""
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Key ids travel inside tokens, which are dot-separated: no dots, nothing that needs escaping."""
MAX_TOKEN_CHARS = 256
"""A real token is about 120 characters; a longer string is not parsed at all."""
TOKEN_PATTERN = re.compile(r"^v1\.([A-Za-z0-9_-]{1,64})\.([0-9]{1,12})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$")
"""A token's whole shape, in ASCII only: `str.isdigit()` also accepts "²³" (which `int()` refuses), and a JSON
string may carry lone surrogates (which cannot be encoded for the HMAC); neither gets past this. Twelve digits of
expiry reach the year 33658."""
_NONCE_BYTES = 9


class _KeySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One entry of the site key list, as configured."""

    id: str
    secret: str
    origins: list[str] = []
    tier: Annotated[int, msgspec.Meta(ge=1, le=5)] | None = None
    max_sessions: Annotated[int, msgspec.Meta(ge=0)] | None = None
    public: bool = False


@dataclass(frozen=True)
class SiteKey:
    """A website's (or an app's) credentials and what its users get."""

    id: str
    """Public: it is in every token and in the pages that ask `/token` for one."""
    secret: str = field(repr=False)
    """The HMAC-SHA256 key; never leaves the servers, never logged."""
    origins: frozenset[str] = frozenset()
    """Origins (`https://shop.example`, no path) whose pages may use the key."""
    tier: int | None = None
    """Service tier 1-5 of its sessions (the scheduler's priority input); None: the server's default."""
    max_sessions: int | None = None
    """Concurrent sessions on the key; None: `Settings.max_sessions_per_key`; 0: no cap."""
    public: bool = False
    """Whether the server's `/token` endpoint may mint tokens for it (to any page on one of `origins`)."""


def normalize_origin(origin: str) -> str:
    """`HTTPS://Shop.Example:443/` → `https://shop.example`: how browsers write an `Origin` header."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or (
            parts.query or parts.fragment or parts.username or parts.password):
        raise ValueError(f"{origin!r} is not an origin: write scheme://host[:port], e.g. https://shop.example")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default_port = 443 if parts.scheme == "https" else 80
    port = f":{parts.port}" if parts.port not in (None, default_port) else ""
    return f"{parts.scheme}://{host}{port}"


def parse_site_keys(text: str, source: str = "site keys") -> dict[str, SiteKey]:
    """Site keys from JSON: a list of `{"id", "secret", "origins", "tier"?, "max_sessions"?, "public"?}` objects
    (or `{"keys": [...]}`); anything wrong is a `VoxlineError` naming the entry (never its secret)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VoxlineError(f"{source} are not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(raw, dict) and set(raw) == {"keys"}:
        raw = raw["keys"]
    if not isinstance(raw, list):
        raise VoxlineError(f"{source} must be a JSON list of keys (or an object with a `keys` list)")
    keys: dict[str, SiteKey] = {}
    for index, entry in enumerate(raw):
        where = f"{source}, entry {index}" + (f" ({entry['id']!r})" if isinstance(entry, dict) and
                                                isinstance(entry.get("id"), str) else "")
        try:
            spec = msgspec.convert(entry, _KeySpec)
        except msgspec.ValidationError as exc:
            raise VoxlineError(f"{where}: {exc}") from None
        if not KEY_ID_PATTERN.match(spec.id):
            raise VoxlineError(f"{where}: the id may only have letters, digits, '-' and '_' (1-64 of them)")
        if spec.id in keys:
            raise VoxlineError(f"{where}: the id is used twice")
        if len(spec.secret) < MIN_SECRET_CHARS:
            raise VoxlineError(f"{where}: the secret is shorter than {MIN_SECRET_CHARS} characters "
                               "(make one with `voxline token secret`)")
        try:
            origins = frozenset(normalize_origin(o) for o in spec.origins)
        except ValueError as exc:
            raise VoxlineError(f"{where}: {exc}") from None
        if spec.public and not origins:
            raise VoxlineError(f"{where}: a public key needs origins (`/token` mints only for them)")
        keys[spec.id] = SiteKey(spec.id, spec.secret, origins, spec.tier, spec.max_sessions, spec.public)
    return keys


def load_site_keys(setting: str) -> dict[str, SiteKey]:
    """`Settings.site_keys`: empty (no keys), a JSON list inline, or the path of a JSON file."""
    setting = setting.strip()
    if not setting:
        return {}
    if setting.startswith(("[", "{")):
        return parse_site_keys(setting, "VOXLINE_SITE_KEYS")
    path = Path(setting).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise VoxlineError(f"VOXLINE_SITE_KEYS: cannot read {path} ({exc.strerror})") from None
    return parse_site_keys(text, str(path))


def new_secret() -> str:
    """A fresh 256-bit secret for a site key."""
    return secrets.token_urlsafe(32)


def mint_token(key: SiteKey, origin: str | None = None, *, ttl_s: float = DEFAULT_TOKEN_TTL_S,
               now: float | None = None) -> str:
    """A token for pages on `origin` (None: for clients that send no `Origin`), valid for `ttl_s` seconds."""
    if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
        raise ValueError(f"ttl_s must be in (0, {MAX_TOKEN_TTL_S:g}] seconds")
    expires = int((time.time() if now is None else now) + ttl_s)
    nonce = _b64(secrets.token_bytes(_NONCE_BYTES))
    claims = f"{TOKEN_VERSION}.{key.id}.{expires}.{nonce}"
    return f"{claims}.{_sign(key.secret, claims, origin)}"


def token_expiry(token: str) -> int:
    """The expiry (unix seconds) written in a token, unchecked; a malformed token is `Unauthenticated`."""
    return _split(token)[2]


def verify_token(keys: Mapping[str, SiteKey], token: str, origin: str | None, *, now: float | None = None) -> SiteKey:
    """The key a token was signed with, if it is valid for a connection from `origin` (None: no `Origin` header).

    Raises `Unauthenticated` (malformed, unknown key, expired, bad signature) or `OriginNotAllowed` (the key does
    not list `origin`).
    """
    version, key_id, expires, _nonce = _split(token)
    key = keys.get(key_id)
    if key is None:
        raise Unauthenticated(f"the token names site key {key_id!r}, which this server does not have")
    now = time.time() if now is None else now
    if expires < now:
        raise Unauthenticated(f"the token expired {now - expires:.0f} s ago: get a fresh one")
    if expires - now > MAX_TOKEN_TTL_S:
        raise Unauthenticated(f"the token claims to live {expires - now:.0f} s, over the {MAX_TOKEN_TTL_S:.0f} s "
                              "maximum")
    if origin is not None and origin not in key.origins:
        raise OriginNotAllowed(f"site key {key_id!r} does not allow pages from {origin}")
    claims, _, signature = token.rpartition(".")
    if not hmac.compare_digest(signature.encode(), _sign(key.secret, claims, origin).encode()):
        raise Unauthenticated(f"the token's signature does not match site key {key_id!r} for this origin "
                              "(signed with another secret, for another origin, or altered)")
    return key


def _split(token: str) -> tuple[str, str, int, str]:
    shape = TOKEN_PATTERN.fullmatch(token) if isinstance(token, str) and len(token) <= MAX_TOKEN_CHARS else None
    if shape is None:
        raise Unauthenticated(f"the token is malformed: expected {TOKEN_VERSION}.<key>.<expiry>.<nonce>.<signature>")
    key_id, expires, nonce, _signature = shape.groups()
    return TOKEN_VERSION, key_id, int(expires), nonce


def _sign(secret: str, claims: str, origin: str | None) -> str:
    message = f"{claims}.{origin or ''}".encode()
    return _b64(hmac.new(secret.encode(), message, hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
