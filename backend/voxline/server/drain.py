"""Shutting down without losing a turn silently: on SIGTERM, finish the turns in flight, then close.

uvicorn's own shutdown closes every WebSocket at once with 1012 and only then runs the app's lifespan shutdown, so a
reply being spoken would be cut off mid-word. The drain runs first instead. The app's lifespan installs it as the
SIGTERM handler (`Drain.install_on_sigterm`, main thread only, so in every `voxline serve` worker process); on the
signal it:

1. refuses new connections (accepted, then `error {code: "server_restarting"}` and close 1012) and new turns (each
   gets `error server_restarting` and the apology as its `reply.done`, so no turn goes unanswered);
2. waits up to `Settings.drain_timeout_s` for the turns in progress to end on their own (their audio and
   `reply.done` are queued for the client as usual);
3. cuts any turn still running: `error server_restarting` and the apology `reply.done`;
4. closes every session with 1012 once what is queued for it has been sent (at most `CLOSE_GRACE_S` more);
5. hands the signal to the handler it replaced (uvicorn's), which shuts the server down as usual.

A second SIGTERM during the drain, or SIGINT (Ctrl-C) at any time, goes straight to uvicorn.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING

from voxline.errors import ServerRestarting
from voxline.server import protocol as p

if TYPE_CHECKING:
    from voxline.server.session import Session

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.05
"""How often the drain looks whether the turns in flight are over."""
CLOSE_GRACE_S = 5.0
"""After the last turn, how long the writers may take to send what is queued and the close."""


class Drain:
    """The shutdown sequence of one server process over its live sessions."""

    def __init__(self, sessions: Mapping[str, Session], timeout_s: float) -> None:
        self.sessions = sessions
        self.timeout_s = timeout_s
        self.draining = False
        """Set when the drain starts: no new session, no new turn."""
        self.task: asyncio.Task | None = None
        self._uninstall: Callable[[], None] = lambda: None

    def refusal(self) -> ServerRestarting:
        """What a connection opened during the drain is told before it is closed with 1012."""
        return ServerRestarting("the server is restarting: connect again in a moment")

    async def run(self) -> None:
        """Steps 1-4 of the module docstring; returns once every session is closed or the time is up."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        turn_refusal = ServerRestarting("the server is restarting, so this turn was not started: ask again in a "
                                        "moment")
        for session in list(self.sessions.values()):
            session.refusal = turn_refusal
        busy = [s.id for s in self.sessions.values() if _in_flight(s)]
        log.info("draining: %d sessions, %d turns in flight, up to %.1f s", len(self.sessions), len(busy),
                 self.timeout_s)
        while any(_in_flight(s) for s in self.sessions.values()) and loop.time() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        for session in list(self.sessions.values()):
            if session.turn is not None:
                log.warning("draining: cutting turn %s of session %s after %.1f s", session.turn.turn_id,
                            session.id, self.timeout_s)
                await session.abort_turn(ServerRestarting(
                    f"the server is restarting and this reply did not finish within {self.timeout_s:g} s: ask "
                    "again in a moment"))
            session.end(self.refusal(), p.CLOSE_SERVICE_RESTART)
        close_by = loop.time() + CLOSE_GRACE_S
        while self.sessions and loop.time() < close_by:
            await asyncio.sleep(DRAIN_POLL_S)
        log.info("drained: %d sessions still open", len(self.sessions))

    def install_on_sigterm(self) -> None:
        """Make SIGTERM start the drain, then pass on to the handler it replaces. Only in the main thread (a
        server run in a thread, as tests do, has no signal handlers of its own to chain)."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            if self.draining:  # a second SIGTERM: stop waiting
                _forward(previous, signum, frame)
                return
            loop.call_soon_threadsafe(self._start, lambda: _forward(previous, signum, None))

        signal.signal(signal.SIGTERM, on_sigterm)

        def uninstall() -> None:
            if signal.getsignal(signal.SIGTERM) is on_sigterm:
                signal.signal(signal.SIGTERM, previous)

        self._uninstall = uninstall

    def uninstall(self) -> None:
        """Put the replaced SIGTERM handler back (the lifespan's shutdown)."""
        self._uninstall()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def _start(self, then: Callable[[], None]) -> None:
        if self.task is not None:
            return
        self.task = asyncio.create_task(self.run(), name="voxline-drain")

        def done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("the drain failed; shutting down at once", exc_info=task.exception())
            then()

        self.task.add_done_callback(done)


def _in_flight(session: Session) -> bool:
    """A turn the server is working on. One still receiving its audio is not waited for: it would be refused
    (`session.refusal`) when its audio ends anyway, and a client that never ends it must not hold the shutdown."""
    return session.turn is not None and session.state.value != "receiving_audio"


def _forward(handler: object, signum: int, frame: FrameType | None) -> None:
    """Deliver a signal to the handler that was installed before ours."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
