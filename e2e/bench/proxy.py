"""A byte-counting (and optionally shaping) HTTP proxy between Chromium and a Voxline server, for `bench load-page`.

Why a proxy rather than DevTools Network events: it sees every byte on the wire, whoever asked for it (the page,
its module workers, onnxruntime-web's own thread workers, Pyodide in the intents worker), headers included, and
nothing served from a browser cache; DevTools events belong to one target each (a worker is a target of its own)
and report cached answers with sizes that are not bytes from the server. For the same reason the throttled
profile is applied here, to all traffic at once: one shared link of the profile's bandwidth, and its round trip
added once to every new connection and once to every request.

Plain HTTP only (Chromium is started with `--proxy-server` and `--proxy-bypass-list=<-loopback>`); WebSockets come
through CONNECT and are tunnelled and counted as one record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CHUNK_BYTES = 64 * 1024
"""Bytes forwarded at a time (and the shaping granularity: 10 ms at 50 Mbit/s)."""


@dataclass(frozen=True)
class NetworkProfile:
    """A named link: downstream bandwidth and round-trip time."""

    name: str
    down_bits_per_s: float
    rtt_s: float


PROFILES = {"50mbit-40ms": NetworkProfile("50mbit-40ms", 50e6, 0.040)}
"""Named throttled profiles (`--profile NAME`)."""


@dataclass
class Transfer:
    """One request through the proxy: its URL and the bytes the server sent for it (status line and headers too)."""

    url: str
    status: int
    bytes: int
    encoding: str | None = None
    started_s: float = 0.0
    """Seconds since the proxy started, when the request arrived."""


@dataclass
class _Link:
    """The shared downstream link of a profile: at most `bytes_per_s`, whoever sends."""

    bytes_per_s: float
    free_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, n: int) -> None:
        async with self.lock:
            now = time.monotonic()
            self.free_at = max(now, self.free_at) + n / self.bytes_per_s
            wait = self.free_at - now
        await asyncio.sleep(wait)


class CountingProxy:
    """The proxy, in a thread of its own, on a free loopback port. Use as a context manager."""

    def __init__(self, profile: NetworkProfile | None = None) -> None:
        self.profile = profile
        self.transfers: list[Transfer] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()
        self.port = 0

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the counting proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    @property
    def chromium_args(self) -> list[str]:
        return [f"--proxy-server=http://127.0.0.1:{self.port}", "--proxy-bypass-list=<-loopback>"]

    def take(self) -> list[Transfer]:
        """The transfers so far, and start a new list."""
        taken, self.transfers = self.transfers, []
        return taken

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._link = _Link(self.profile.down_bits_per_s / 8) if self.profile else None
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _delay(self, fraction: float) -> None:
        if self.profile:
            await asyncio.sleep(self.profile.rtt_s * fraction)

    async def _down(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        for at in range(0, len(data), CHUNK_BYTES):
            chunk = data[at:at + CHUNK_BYTES]
            if self._link:
                await self._link.send(len(chunk))
            writer.write(chunk)
            await writer.drain()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        upstream_host = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                started = time.monotonic() - self._started
                line, *lines = head.decode("latin-1").split("\r\n")
                method, target, version = line.split(" ", 2)
                if method == "CONNECT":
                    await self._tunnel(target, reader, writer, started)
                    return
                url = urlsplit(target)
                host = (url.hostname, url.port or 80)
                headers = [h for h in lines if h and not h.lower().startswith(("proxy-connection:", "proxy-"))]
                length = _header(headers, "content-length")
                body = await reader.readexactly(int(length)) if length else b""
                if upstream is None or upstream_host != host or upstream[1].is_closing():
                    if upstream:
                        upstream[1].close()
                    await self._delay(1.0)  # the new connection's handshake
                    upstream = await asyncio.open_connection(*host)
                    upstream_host = host
                path = url.path + (f"?{url.query}" if url.query else "")
                await self._delay(0.5)
                upstream[1].write(f"{method} {path} {version}\r\n".encode("latin-1")
                                  + "".join(f"{h}\r\n" for h in headers).encode("latin-1") + b"\r\n" + body)
                await upstream[1].drain()
                sent, status, encoding, close = await self._response(method, upstream[0], writer)
                self.transfers.append(Transfer(target, status, sent, encoding, started))
                if close:
                    upstream[1].close()
                    upstream = None
        except (OSError, asyncio.IncompleteReadError, ValueError):
            return  # a connection reset, or a host that does not resolve (Chromium's own background requests)
        finally:
            if upstream:
                upstream[1].close()
            writer.close()

    async def _response(self, method: str, up: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """Forward one response; returns (bytes sent, status, content-encoding, whether the server closes)."""
        head = await up.readuntil(b"\r\n\r\n")
        line, *lines = head.decode("latin-1").split("\r\n")
        status = int(line.split(" ", 2)[1])
        await self._delay(0.5)
        await self._down(writer, head)
        sent = len(head)
        close = (_header(lines, "connection") or "").lower() == "close"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return sent, status, _header(lines, "content-encoding"), close
        length = _header(lines, "content-length")
        if length is not None:
            remaining = int(length)
            while remaining:
                chunk = await up.read(min(CHUNK_BYTES, remaining))
                if not chunk:
                    raise ConnectionError("the server closed mid-body")
                remaining -= len(chunk)
                await self._down(writer, chunk)
                sent += len(chunk)
        elif "chunked" in (_header(lines, "transfer-encoding") or "").lower():
            while True:
                size_line = await up.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                data = await up.readexactly(size + 2) if size else await _trailer(up)
                await self._down(writer, size_line + data)
                sent += len(size_line) + len(data)
                if not size:
                    break
        else:
            while chunk := await up.read(CHUNK_BYTES):
                await self._down(writer, chunk)
                sent += len(chunk)
            close = True
        return sent, status, _header(lines, "content-encoding"), close

    async def _tunnel(self, target: str, reader, writer, started: float) -> None:
        host, _, port = target.rpartition(":")
        await self._delay(1.0)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            return
        reply = b"HTTP/1.1 200 Connection Established\r\n\r\n"
        writer.write(reply)
        record = Transfer(f"CONNECT {target}", 200, len(reply), None, started)
        self.transfers.append(record)

        async def pipe(src, dst, count: bool) -> None:
            try:
                while chunk := await src.read(CHUNK_BYTES):
                    if count:
                        record.bytes += len(chunk)
                        await self._down(dst, chunk)
                    else:
                        dst.write(chunk)
                        await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))


async def _trailer(up: asyncio.StreamReader) -> bytes:
    """The end of a chunked body: optional trailer lines, then an empty line."""
    data = b""
    while (line := await up.readuntil(b"\r\n")) != b"\r\n":
        data += line
    return data + line


def _header(lines: list[str], name: str) -> str | None:
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None
