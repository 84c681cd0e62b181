"""The `/ws` endpoint: admits a connection, then moves frames between the WebSocket and a `Session`, nothing else.

Admission (admission.py) runs right after the handshake is accepted: a refused client gets an `error` and a named
close code (4403, 4429, 1012 while draining); refused before the accept, a browser would only see 1006. The token
is checked later, at `hello`, by the session.

Three tasks per connection. The reader hands every inbound frame to the session in order, within the frame budget
(limits.py); a barge-in must be read while a reply is being sent, so the turn itself runs in its own task. The
writer drains the session's `Outbox` into the socket, so one slow client never blocks a turn's pipeline, and frames
keep the order they were queued in; the outbox is bounded, and a client that does not read at all is dropped. The
idle watch closes a session that stays silent (no `hello`, or nothing while listening).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import suppress

from starlette.datastructures import State
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxline.config import Settings
from voxline.errors import IdleTimeout, ProtocolError, RateLimited, ServerRestarting, VoxlineError
from voxline.server import protocol as p
from voxline.server.admission import Gate, Peer
from voxline.server.drain import Drain
from voxline.server.engines import Engines
from voxline.server.limits import FrameBudget, IdleClock, Silence, Verdict
from voxline.server.outbox import Outbound, Outbox
from voxline.server.session import Session, SessionState

log = logging.getLogger(__name__)

WRITER_DRAIN_TIMEOUT_S = 5.0
"""After the session ends on purpose (bye, fatal error), how long the writer may take to send what is queued."""


async def websocket_endpoint(websocket: WebSocket) -> None:
    """Serve one client. The app's state holds `engines` (the loaded models), `sessions` (the live ones), and
    optionally `gate` (admission; built from the settings when absent) and `drain` (the shutdown in progress)."""
    state = websocket.app.state
    engines: Engines = state.engines
    gate = _gate(state, engines.settings)
    drain: Drain | None = getattr(state, "drain", None)
    peer = Peer(origin=websocket.headers.get("origin"), address=websocket.client.host if websocket.client else None,
                host=websocket.headers.get("host"))
    await websocket.accept()
    session_id = uuid.uuid4().hex[:16]
    try:
        if drain is not None and drain.draining:
            raise drain.refusal()
        gate.admit(session_id, peer)
    except (ProtocolError, ServerRestarting) as exc:
        engines.metrics.reject(exc.code)
        await _refuse(websocket, exc)
        return
    try:
        await _serve(websocket, engines, state.sessions, Session(engines, _outbox(engines.settings), session_id,
                                                                 gate=gate, peer=peer))
    finally:
        gate.release(session_id)


async def _serve(websocket: WebSocket, engines: Engines, sessions: dict[str, Session], session: Session) -> None:
    outbox = session.outbox
    sessions[session.id] = session
    budget = FrameBudget(engines.settings)
    writer = asyncio.create_task(_write(websocket, outbox), name=f"voxline-writer-{session.id}")
    reader = asyncio.create_task(_read(websocket, session, budget), name=f"voxline-reader-{session.id}")
    watch = asyncio.create_task(_watch_idle(session, budget, IdleClock.from_settings(engines.settings)),
                                name=f"voxline-idle-{session.id}")

    def drop_connection() -> None:
        # The client reads nothing: a close frame would wait behind the backlog too, so stop both loops now.
        log.warning("session %s dropped: the client does not read (outbox over %s bytes)", session.id,
                    outbox.max_bytes)
        engines.metrics.reject("unread_outbox")
        writer.cancel()
        reader.cancel()

    outbox.on_overflow = drop_connection
    try:
        await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done() and not reader.cancelled():
            reader.result()
    except Exception:
        log.exception("session %s failed outside a turn", session.id)
        outbox.put_close(p.CLOSE_INTERNAL_ERROR)
    finally:
        # Nothing is awaited before the session is closed and forgotten: under a cancel (the ASGI server or a test
        # client ending the connection) every await here may raise again.
        watch.cancel()
        reader.cancel()
        sessions.pop(session.id, None)
        await session.close()
        await asyncio.wait({watch, reader})  # a cancelled receive() returns at once
        if writer.done() or not outbox.closing:
            writer.cancel()
        with suppress(asyncio.CancelledError, asyncio.TimeoutError, WebSocketDisconnect, RuntimeError):
            await asyncio.wait_for(writer, WRITER_DRAIN_TIMEOUT_S)


async def _read(websocket: WebSocket, session: Session, budget: FrameBudget) -> None:
    while session.state is not SessionState.CLOSED:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text, data = message.get("text"), message.get("bytes")
        binary = text is None
        verdict = budget.admit(binary)
        if verdict is Verdict.PASS:
            if text is not None:
                await session.receive_text(text)
            elif data is not None:
                await session.receive_bytes(data)
        elif verdict is Verdict.DROP_AND_WARN:
            session.engines.metrics.reject(RateLimited.code)
            kind, limit = ("audio frames", budget.audio) if binary else ("text frames", budget.text)
            _notify(session, RateLimited(
                f"more than {limit.rate_per_s:g} {kind} a second (burst {limit.burst}): this frame and the next "
                f"ones over the rate are dropped unread; {p.MAX_RATE_LIMITED_FRAMES} dropped in a row close the "
                "connection"), retry_after_ms=budget.retry_after_ms(binary))
        elif verdict is Verdict.CLOSE:
            log.warning("session %s closed: %d frames in a row over its rate (address %s)", session.id,
                        budget.dropped_in_a_row, session.peer.address)
            session.end(RateLimited(f"{budget.dropped_in_a_row} frames in a row over the rate limit: closing"),
                        p.CLOSE_POLICY_VIOLATION)
            return


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


async def _watch_idle(session: Session, budget: FrameBudget, clock: IdleClock) -> None:
    while session.state is not SessionState.CLOSED:
        await asyncio.sleep(clock.poll_s)
        verdict = clock.check(session.state.value, budget, time.monotonic())
        if verdict is Silence.WARN:
            _notify(session, IdleTimeout(
                f"no message for {clock.idle_timeout_s:g} s: the connection closes in {clock.idle_grace_s:g} s "
                "unless the client sends one (reconnect when there is a turn to send)"))
        elif verdict is Silence.CLOSE:
            state = session.state
            log.info("session %s closed: idle (%s)", session.id, {
                SessionState.HANDSHAKE: "no hello", SessionState.RECEIVING_AUDIO: "audio upload stalled"}.get(
                state, "silent listener"))
            session.engines.metrics.reject(IdleTimeout.code)
            if state is SessionState.HANDSHAKE:
                reason = f"no hello within {clock.hello_timeout_s:g} s of connecting"
            elif state is SessionState.RECEIVING_AUDIO:
                # The turn never finished arriving, so it goes unanswered; closing the session drops it.
                reason = (f"no audio frame of turn {session.turn.turn_id} for {clock.audio_idle_timeout_s:g} s: "
                          "the turn is dropped and the connection closed (send turn.audio_end when the audio ends)")
            else:
                reason = f"no message for {clock.idle_timeout_s + clock.idle_grace_s:g} s: closing"
            session.end(IdleTimeout(reason), p.CLOSE_IDLE_TIMEOUT)
            return


async def _refuse(websocket: WebSocket, error: VoxlineError) -> None:
    """Tell an accepted but refused client why, then close with the error's code."""
    with suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.send_text(p.encode_message(p.ErrorMessage(code=error.code, message=error.message)))
        await websocket.close(p.CLOSING_ERRORS[error.code])


def _notify(session: Session, error: VoxlineError, retry_after_ms: int | None = None) -> None:
    """An `error` that changes nothing in the session (not counted as a bad frame)."""
    session.outbox.put(Outbound(p.encode_message(p.ErrorMessage(code=error.code, message=error.message,
                                                                retry_after_ms=retry_after_ms))))


def _outbox(settings: Settings) -> Outbox:
    return Outbox(max_audio_bytes=settings.outbox_max_audio_bytes or None, max_bytes=settings.outbox_max_bytes or None)


def _gate(state: State, settings: Settings) -> Gate:
    gate = getattr(state, "gate", None)
    if gate is None:
        gate = state.gate = Gate(settings)
    return gate
