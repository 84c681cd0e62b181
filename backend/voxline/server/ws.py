"""The `/ws` endpoint: moves frames between a WebSocket and a `Session`, nothing else.

Two loops per connection. The reader hands every inbound frame to the session in order (a barge-in must be read
while a reply is being sent, so the turn itself runs in its own task). The writer drains the session's `Outbox`
into the socket, so one slow client never blocks a turn's pipeline, and frames keep the order they were queued in.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxline.server import protocol as p
from voxline.server.session import Engines, Outbox, Session, SessionState

log = logging.getLogger(__name__)

WRITER_DRAIN_TIMEOUT_S = 5.0
"""After the session ends on purpose (bye, fatal error), how long the writer may take to send what is queued."""


async def websocket_endpoint(websocket: WebSocket) -> None:
    """Serve one client; the app's `state.engines` holds the loaded models, `state.sessions` the live sessions."""
    engines: Engines = websocket.app.state.engines
    sessions: dict[str, Session] = websocket.app.state.sessions
    await websocket.accept()
    outbox = Outbox()
    session = Session(engines, outbox)
    sessions[session.id] = session
    writer = asyncio.create_task(_write(websocket, outbox), name=f"voxline-writer-{session.id}")
    try:
        await _read(websocket, session, writer)
    except Exception:
        log.exception("session %s failed outside a turn", session.id)
        outbox.put_close(p.CLOSE_INTERNAL_ERROR)
    finally:
        await session.close()
        sessions.pop(session.id, None)
        if writer.done() or not outbox.closing:
            writer.cancel()
        with suppress(asyncio.CancelledError, asyncio.TimeoutError, WebSocketDisconnect, RuntimeError):
            await asyncio.wait_for(writer, WRITER_DRAIN_TIMEOUT_S)


async def _read(websocket: WebSocket, session: Session, writer: asyncio.Task) -> None:
    while session.state is not SessionState.CLOSED and not writer.done():
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await session.receive_text(message["text"])
        elif message.get("bytes") is not None:
            await session.receive_bytes(message["bytes"])


async def _write(websocket: WebSocket, outbox: Outbox) -> None:
    while True:
        item = await outbox.get()
        if item.close_code is not None:
            await websocket.close(item.close_code)
            return
        data = item.data() if callable(item.data) else item.data
        if isinstance(data, bytes):
            await websocket.send_bytes(data)
        else:
            await websocket.send_text(data)
        if item.on_sent is not None:
            item.on_sent()
