"""How the page's files are sent: validators and cache lifetimes, and precompressed brotli/gzip variants.

Caching. A URL that names its content (a model with `?sha256=<digest>`, a runtime at `/vendor/<pkg>/<version>/`)
is sent with `Cache-Control: immutable` and a year's lifetime: a returning visit does not even ask. Any other URL
(the web app's scripts, the widget bundle) is sent with `no-cache` and a strong ETag (the sha256 of its bytes):
the browser asks each time and a 304 costs headers only.

Compression. Each asset may have a brotli and a gzip variant; the encoding is chosen from `Accept-Encoding`
(brotli first), sent with `Content-Encoding` and `Vary: Accept-Encoding`, and each variant has its own ETag. The
big assets (models, runtimes) are compressed once, at `voxline models fetch` time (`precompress`), into
`<cache>/compressed/<sha256>.<br|gz>` (content-addressed, outside git, built only when missing); a variant is
checked once, by decompressing it against its sha256, before it is first sent, so an altered file on disk is
never sent (the identity bytes go out instead). A server that finds a variant missing builds it in the background
(a quicker, larger brotli: a *provisional* variant, `<sha256>.provisional.<br|gz>`) and meanwhile sends the identity
bytes; the next `voxline models fetch` builds the variant proper and deletes the provisional one, so a server that
ran before the models were precompressed does not leave a bigger download behind for good (the Whisper decoder:
17.7 MB provisional, 15.9 MB built). Small assets (the scripts) are compressed at first serve and kept in
memory.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import brotli
from starlette.requests import Request
from starlette.responses import Response

from voxline import paths

log = logging.getLogger(__name__)

IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of a content-addressed URL: its bytes can never change, so never ask again (one year)."""
REVALIDATE = "no-cache"
"""Cache-Control of a URL whose bytes may change (the scripts): keep it, but ask (a 304 costs headers only)."""
ENCODINGS = ("br", "gzip")
"""Content-Encodings offered, in order of preference (brotli is ~15-35 % smaller than gzip on the wasm)."""
SUFFIX = {"br": "br", "gzip": "gz"}
BUILD_BROTLI_QUALITY = 10
"""Brotli quality of what `voxline models fetch` precompresses, once (~2.3 s per MB on one core). On 8 MB of the
int8 Whisper decoder: quality 9 gave 4.61 MB in 7.5 s, 10 gave 4.01 MB in 18.4 s, 11 gave 4.04 MB in 31.5 s."""
BACKGROUND_BROTLI_QUALITY = 9
"""Brotli quality of a variant a running server builds because it was missing (~0.5 s per MB; 2-15 % larger)."""
GZIP_LEVEL = 9
BROTLI_WINDOW_BITS = 24
"""The largest brotli window (16 MiB): the model files are tens of MB."""
INLINE_MAX_BYTES = 512 * 1024
"""Assets up to this size are compressed at first serve (a few ms to ~0.5 s), bigger ones in the background."""
MIN_COMPRESS_BYTES = 1024
"""Smaller assets go out as they are: the headers would cost more than compression saves."""
COMPRESSIBLE_TYPES = ("text/", "application/javascript", "application/json", "application/wasm",
                      "application/octet-stream", "application/zip")
"""Media types worth compressing (octet-stream: the ONNX models; zip: Python's stdlib archive gains ~2 %)."""


@dataclass(frozen=True)
class Asset:
    """One file the page loads: its bytes, their sha256 and its media type."""

    data: bytes
    sha256: str
    media_type: str

    @classmethod
    def of(cls, data: bytes, media_type: str, sha256: str | None = None) -> Asset:
        return cls(data, sha256 or hashlib.sha256(data).hexdigest(), media_type)

    @property
    def compressible(self) -> bool:
        return len(self.data) >= MIN_COMPRESS_BYTES and self.media_type.startswith(COMPRESSIBLE_TYPES)


def compress(data: bytes, encoding: str, brotli_quality: int = BUILD_BROTLI_QUALITY) -> bytes:
    if encoding == "br":
        return brotli.compress(data, quality=brotli_quality, lgwin=BROTLI_WINDOW_BITS)
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    raise ValueError(f"unknown content-encoding {encoding!r}")


def decompress(data: bytes, encoding: str) -> bytes:
    return brotli.decompress(data) if encoding == "br" else gzip.decompress(data)


def compressed_dir() -> Path:
    """Where precompressed variants live: `<cache>/compressed/`, named by the sha256 of the identity bytes."""
    return paths.cache_dir() / "compressed"


def variant_path(sha256: str, encoding: str, provisional: bool = False) -> Path:
    return compressed_dir() / f"{sha256}.{'provisional.' if provisional else ''}{SUFFIX[encoding]}"


def build_variants(asset: Asset, brotli_quality: int = BUILD_BROTLI_QUALITY, provisional: bool = False) -> list[Path]:
    """Write the missing variants of one asset (temp file, then rename: a reader never sees half a file).

    Returns the paths written; an asset whose variants all exist costs a stat per encoding. A variant built for good
    (not `provisional`) replaces a provisional one, which is deleted.
    """
    written = []
    for encoding in ENCODINGS:
        path = variant_path(asset.sha256, encoding, provisional)
        if path.exists() or (provisional and variant_path(asset.sha256, encoding).exists()):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        body = compress(asset.data, encoding, brotli_quality)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".part") as tmp:
            tmp.write(body)
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, path)
        written.append(path)
        if not provisional:
            variant_path(asset.sha256, encoding, provisional=True).unlink(missing_ok=True)
    return written


def precompress(assets: Iterable[tuple[str, Asset]], log_line=print) -> int:
    """Build every missing variant of the named assets at the build quality; returns how many files were written.

    Run by `voxline models fetch` for the browser models and runtimes, so `scripts/setup.sh` skips it once done.
    """
    count = 0
    for name, asset in assets:
        if not asset.compressible:
            continue
        written = build_variants(asset)
        if written:
            sizes = ", ".join(f"{p.suffix[1:]} {p.stat().st_size / 1e6:.2f} MB" for p in written)
            log_line(f"{name}: {len(asset.data) / 1e6:.2f} MB precompressed ({sizes})")
        count += len(written)
    return count


def accepted_encodings(request: Request) -> set[str]:
    """The encodings of `Accept-Encoding` with a non-zero q-value (`*` is ignored: never guess)."""
    accepted = set()
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        if coding and q > 0:
            accepted.add(coding.lower())
    return accepted


class AssetSender:
    """Sends assets with their validators, lifetimes and the best variant the request accepts.

    Variants found on disk are checked (decompressed and hashed, in a thread) once per process before first use
    and then kept in memory; a variant that fails the check is deleted and rebuilt in the background. Missing
    variants of big assets are built in the background, one at a time, so serving never waits for compression.
    """

    def __init__(self) -> None:
        self._variants: dict[tuple[str, str], bytes | None] = {}
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="voxline-precompress")

    def close(self) -> None:
        self._builder.shutdown(wait=False, cancel_futures=True)

    async def respond(self, request: Request, asset: Asset, *, immutable: bool) -> Response:
        cache_control = IMMUTABLE if immutable else REVALIDATE
        encoding = None
        body = asset.data
        if asset.compressible:
            accepted = accepted_encodings(request)
            for candidate in ENCODINGS:
                if candidate in accepted and (variant := await self._variant(asset, candidate)) is not None:
                    encoding, body = candidate, variant
                    break
        etag = f'"{asset.sha256[:32]}{"." + SUFFIX[encoding] if encoding else ""}"'
        headers = {"cache-control": cache_control, "etag": etag}
        if asset.compressible:
            headers["vary"] = "Accept-Encoding"
        if _matches(request.headers.get("if-none-match", ""), asset.sha256[:32]):
            return Response(status_code=304, headers=headers)
        if encoding:
            headers["content-encoding"] = encoding
        headers["content-length"] = str(len(body))
        if request.method == "HEAD":
            return Response(b"", media_type=asset.media_type, headers=headers)
        return Response(body, media_type=asset.media_type, headers=headers)

    async def _variant(self, asset: Asset, encoding: str) -> bytes | None:
        key = (asset.sha256, encoding)
        if key in self._variants:
            return self._variants[key]
        if len(asset.data) <= INLINE_MAX_BYTES:
            body = await asyncio.to_thread(compress, asset.data, encoding)
            self._variants[key] = body
            return body
        path = variant_path(asset.sha256, encoding)
        if not path.exists():
            path = variant_path(asset.sha256, encoding, provisional=True)
        if not path.exists():
            self._build_later(asset)
            return None
        body = await asyncio.to_thread(_checked_variant, path, asset, encoding)
        if body is None:
            self._build_later(asset)
            return None
        self._variants[key] = body
        return body

    def _build_later(self, asset: Asset) -> None:
        with self._lock:
            if asset.sha256 in self._pending:
                return
            self._pending.add(asset.sha256)

        def build() -> None:
            try:
                build_variants(asset, BACKGROUND_BROTLI_QUALITY, provisional=True)
            except OSError as error:
                log.warning("could not precompress %s… (%s): it is sent uncompressed", asset.sha256[:12], error)
            finally:
                with self._lock:
                    self._pending.discard(asset.sha256)

        try:
            self._builder.submit(build)
        except RuntimeError:  # shut down
            pass


def _checked_variant(path: Path, asset: Asset, encoding: str) -> bytes | None:
    """The variant's bytes if they decompress to the asset's; otherwise delete the file and return None."""
    try:
        body = path.read_bytes()
        problem = None if hashlib.sha256(decompress(body, encoding)).hexdigest() == asset.sha256 else \
            f"it does not decompress to sha256 {asset.sha256[:12]}…"
    except Exception as error:  # noqa: BLE001 (unreadable or undecodable: brotli.error, BadGzipFile, EOFError, ...)
        problem = f"it is unreadable ({error})"
    if problem:
        log.warning("precompressed %s not sent: %s; deleted, rebuilt in the background", path, problem)
        path.unlink(missing_ok=True)
        return None
    return body


def _matches(if_none_match: str, tag: str) -> bool:
    """Whether `If-None-Match` names this content in any encoding (weak or strong; `*` matches anything)."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip().removeprefix("W/").strip('"')
        if candidate == "*" or candidate.split(".", 1)[0] == tag:
            return True
    return False


def precompress_browser_assets(manifest, node_modules: Path | None = None, log_line=print) -> int:
    """Precompress the browser models and the runtimes (pinned digests) whose variants are not built yet.

    The runtimes as served: from the cache, or from `node_modules` when given (`RuntimePackage.directory`).

    A file is read and hashed only when one of its variants is missing, and compressed only when it matches its pin
    (a variant is named by the digest it decompresses to). Returns how many variant files were written.
    """
    from voxline.server.runtimes import RUNTIMES

    pinned: list[tuple[str, Path, str]] = []
    for spec in manifest.models:
        if spec.browser:
            pinned += [(f"{spec.name}/{a}", paths.model_dir(spec.name) / a, d) for a, d in spec.artifacts.items()]
    for package in RUNTIMES:
        pinned += [(f"{package.name}/{f}", package.directory(node_modules) / f, d) for f, d in package.files.items()]

    def wanted() -> Iterable[tuple[str, Asset]]:
        for name, path, digest in pinned:
            if all(variant_path(digest, e).exists() for e in ENCODINGS) or not path.is_file():
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                log_line(f"{name}: differs from its pin, not precompressed (run `voxline models verify`)")
                continue
            yield name, Asset(data, digest, "application/octet-stream")

    return precompress(wanted(), log_line)
