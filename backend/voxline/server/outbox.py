"""The ordered, bounded queue between a session and its socket writer (ws.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from voxline.errors import SlowConsumer
from voxline.server import protocol as p

log = logging.getLogger(__name__)

OUTBOUND_ENCODED_LATER_BYTES = 512
"""What a frame encoded only when it is sent (`timings`) is counted as while it waits."""


@dataclass
class Outbound:
    """One frame waiting for the socket writer."""

    data: str | bytes | Callable[[], str]
    """A callable is encoded when it is sent (timings, which end with the send time of the first audio)."""
    audio_turn: int | None = None
    """The turn this reply audio belongs to (dropped if that turn is interrupted before it is sent)."""
    on_sent: Callable[[], None] | None = None
    """Called by the writer once the frame is on the socket."""
    on_dropped: Callable[[], None] | None = None
    """Called when the outbox discards the frame unsent (barge-in, slow or absent reader)."""
    close_code: int | None = None
    """Set on the last item: close the connection with this code after everything before it is sent."""


class Outbox:
    """The ordered queue between a session and its socket writer, bounded for a reader that falls behind.

    The slow-reader policy (docs/protocol.md): reply audio waiting beyond `max_audio_bytes` means the client does
    not keep up with the speech. That turn's unsent audio is dropped, the client gets `error {code:
    "slow_consumer"}`, and no more of the turn's audio is queued; its text still is, so `reply.done` comes as
    always. Anything waiting beyond `max_bytes` means the client does not read at all: the queue is emptied, nothing
    more is queued, and `on_overflow` is called (the connection is dropped). None: no bound.
    """

    def __init__(self, max_audio_bytes: int | None = None, max_bytes: int | None = None,
                 on_overflow: Callable[[], None] | None = None) -> None:
        self._items: deque[Outbound] = deque()
        self._ready = asyncio.Event()
        self.closing = False
        """A close was queued: the writer should be left to send what is before it."""
        self.max_audio_bytes = max_audio_bytes
        self.max_bytes = max_bytes
        self.on_overflow = on_overflow
        self.queued_bytes = 0
        self.queued_audio_bytes = 0
        self.starved_turn: int | None = None
        """The turn whose audio was dropped for a slow reader: its later audio is not queued either."""
        self.overflowed = False

    def put(self, item: Outbound) -> None:
        if self.overflowed:
            _dropped(item)
            return
        size = _outbound_bytes(item)
        if item.audio_turn is not None:
            if item.audio_turn == self.starved_turn:
                _dropped(item)
                return
            if self.max_audio_bytes is not None and self.queued_audio_bytes and (
                    self.queued_audio_bytes + size > self.max_audio_bytes):
                self._starve(item.audio_turn)
                _dropped(item)
                return
        if self.max_bytes is not None and self.queued_bytes + size > self.max_bytes:
            self._overflow()
            _dropped(item)
            return
        self.queued_bytes += size
        if item.audio_turn is not None:
            self.queued_audio_bytes += size
        self._items.append(item)
        self._ready.set()

    def _starve(self, turn_id: int) -> None:
        dropped = self.drop_audio(turn_id)
        self.starved_turn = turn_id
        log.warning("slow reader: dropped the reply audio of turn %s (%d frames unsent, over %d bytes waiting)",
                    turn_id, dropped, self.max_audio_bytes)
        self.put(Outbound(p.encode_message(p.ErrorMessage(
            code=SlowConsumer.code, turn_id=turn_id,
            message=f"the reply audio was not read fast enough ({self.max_audio_bytes} bytes waiting): the rest "
                    "of this turn's audio is dropped; its text still follows"))))

    def _overflow(self) -> None:
        log.warning("reader does not read: %d bytes waiting; dropping the connection", self.queued_bytes)
        self.overflowed = True
        items, self._items = self._items, deque()
        self.queued_bytes = self.queued_audio_bytes = 0
        for item in items:
            _dropped(item)
        if self.on_overflow is not None:
            self.on_overflow()

    def put_close(self, code: int) -> None:
        """Close the connection with `code` once everything queued so far is sent; later items are never sent."""
        if not self.closing:
            self.closing = True
            self.put(Outbound("", close_code=code))

    async def get(self) -> Outbound:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        size = _outbound_bytes(item)
        self.queued_bytes -= size
        if item.audio_turn is not None:
            self.queued_audio_bytes -= size
        return item

    def drop_audio(self, turn_id: int) -> int:
        """Remove the queued reply audio of a turn; returns how many frames never left."""
        kept: deque[Outbound] = deque()
        dropped: list[Outbound] = []
        for item in self._items:
            (dropped if item.audio_turn == turn_id else kept).append(item)
        freed = sum(_outbound_bytes(i) for i in dropped)
        self._items = kept
        self.queued_bytes -= freed
        self.queued_audio_bytes -= freed
        for item in dropped:
            _dropped(item)
        return len(dropped)


def _outbound_bytes(item: Outbound) -> int:
    return OUTBOUND_ENCODED_LATER_BYTES if callable(item.data) else len(item.data)


def _dropped(item: Outbound) -> None:
    if item.on_dropped is not None:
        item.on_dropped()
