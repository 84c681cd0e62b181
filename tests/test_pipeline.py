"""The turn pipeline on real models: one way to stop a turn (`interrupt`), and a turn counted in the metrics when
it ends, whether or not its `timings` frame ever reaches the client."""

from __future__ import annotations

import asyncio
import json

import pytest

from voxline.config import Settings
from voxline.errors import TurnError
from voxline.server import protocol as p
from voxline.server.engines import Engines
from voxline.server.outbox import Outbox
from voxline.server.pipeline import APOLOGY
from voxline.server.session import Session, SessionState

SMOLLM = "smollm2-135m-instruct-ct2"
COMMAND = "turn the volume down to 30%"
STORY = "Tell me a long story about a dragon who learns to fly, with many details."


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM), model_dir)


class Counts:
    """Turn metrics of one kind, read from the registry (a module's turns share the engines)."""

    def __init__(self, engines: Engines, kind: str, outcome: str = "ok") -> None:
        self.registry, self.kind, self.outcome = engines.metrics.registry, kind, outcome

    def read(self) -> tuple[float, float, float]:
        """(turns counted, turn durations observed, first audio times observed)"""
        get = self.registry.get_sample_value
        return (get("voxline_turns_total", {"kind": self.kind, "outcome": self.outcome}) or 0.0,
                get("voxline_turn_seconds_count", {"kind": self.kind}) or 0.0,
                get("voxline_turn_first_audio_seconds_count", {"kind": self.kind}) or 0.0)

    def since(self, before: tuple[float, float, float]) -> tuple[float, ...]:
        return tuple(now - then for now, then in zip(self.read(), before))


async def opened(engines: Engines, outbox: Outbox | None = None, **capabilities) -> tuple[Session, Outbox]:
    outbox = outbox or Outbox()
    session = Session(engines, outbox)
    await session.receive_text(json.dumps({"type": "hello", "v": 1, "capabilities": capabilities}))
    await outbox.get()  # the welcome
    return session, outbox


async def write_all(outbox: Outbox) -> list[dict | bytes]:
    """What ws.py's writer does with the queue, without a socket: encode each frame, then `on_sent`."""
    out: list[dict | bytes] = []
    while outbox._items:
        item = await outbox.get()
        data = item.data() if callable(item.data) else item.data
        if item.on_sent is not None:
            item.on_sent()
        out.append(data if isinstance(data, bytes) else json.loads(data))
    return out


async def finish_turn(session: Session) -> None:
    if session.turn is not None and session.turn.task is not None:
        await session.turn.task


async def until_audio_queued(session: Session, timeout_s: float = 60.0) -> None:
    turn = session.turn
    async with asyncio.timeout(timeout_s):
        while turn.audio_frames == 0:
            await asyncio.sleep(0.01)


def test_a_turn_without_audio_is_counted_when_it_ends_though_nothing_was_sent(engines):
    async def scenario():
        counts = Counts(engines, "intent")
        before = counts.read()
        session, outbox = await opened(engines, reply_audio=False)
        await session.dispatch(p.TextTurn(turn_id=1, text=COMMAND))
        await finish_turn(session)
        assert session.state is SessionState.LISTENING
        assert any(callable(item.data) for item in outbox._items)  # its timings frame, never encoded
        assert counts.since(before) == (1, 1, 0)

    asyncio.run(scenario())


def test_a_turn_whose_frames_never_leave_is_counted_when_the_connection_ends(engines):
    async def scenario():
        counts = Counts(engines, "intent")
        before = counts.read()
        session, outbox = await opened(engines)
        await session.dispatch(p.TextTurn(turn_id=1, text=COMMAND))
        await finish_turn(session)
        # Ended, but its first reply audio still waits in the outbox: the metrics wait for it to leave.
        assert session.last_turn.first_audio_waiting and counts.since(before) == (0, 0, 0)
        await session.close()  # the connection is gone: nothing queued will ever be sent
        assert counts.since(before) == (1, 1, 0)
        await session.close()
        assert counts.since(before) == (1, 1, 0)

    asyncio.run(scenario())


def test_a_turn_is_counted_once_with_its_first_audio_when_the_writer_sends_it(engines):
    async def scenario():
        counts = Counts(engines, "intent")
        before = counts.read()
        session, outbox = await opened(engines)
        await session.dispatch(p.TextTurn(turn_id=1, text=COMMAND))
        await finish_turn(session)
        frames = await write_all(outbox)
        assert [f["type"] for f in frames if isinstance(f, dict)] == ["intent", "reply.done", "timings"]
        assert frames[-1]["first_audio_sent_ms"] > 0 and frames[-1]["stages"]["transport"] >= 0
        assert counts.since(before) == (1, 1, 1)
        await session.close()
        assert counts.since(before) == (1, 1, 1)

    asyncio.run(scenario())


def test_a_turn_dropped_by_an_unread_outbox_is_still_counted(engines):
    async def scenario():
        counts = Counts(engines, "intent")
        before = counts.read()
        outbox = Outbox(max_bytes=2048)  # the first reply audio frame alone is more: the client reads nothing
        session, _ = await opened(engines, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text=COMMAND))
        await finish_turn(session)
        assert outbox.overflowed and not outbox._items
        assert counts.since(before) == (1, 1, 0)

    asyncio.run(scenario())


def test_a_barge_in_stops_generation_task_and_unsent_audio_through_one_interrupt(engines):
    async def scenario():
        counts = Counts(engines, "llm", "interrupted")
        before = counts.read()
        session, outbox = await opened(engines)
        await session.dispatch(p.TextTurn(turn_id=1, text=STORY))
        turn = session.turn
        await until_audio_queued(session)
        assert any(item.audio_turn == 1 for item in outbox._items)
        await session.dispatch(p.BargeIn(turn_id=1, played_ms=0.0))
        assert turn.cancel.is_set() and turn.task.done()
        assert not any(item.audio_turn == 1 for item in outbox._items)  # never left: dropped
        async with asyncio.timeout(10):  # the running request stops at its next token
            result = await asyncio.wrap_future(turn.ticket.future)
        assert result.stop_reason == "cancelled"
        frames = await write_all(outbox)
        done = next(f for f in frames if isinstance(f, dict) and f["type"] == "reply.done")
        assert done["interrupted"] and done["text"] == "" and not any(isinstance(f, bytes) for f in frames)
        assert counts.since(before) == (1, 1, 0)

    asyncio.run(scenario())


def test_a_turn_cut_by_the_server_keeps_its_queued_audio_before_the_apology(engines):
    async def scenario():
        session, outbox = await opened(engines)
        await session.dispatch(p.TextTurn(turn_id=1, text=STORY))
        turn = session.turn
        await until_audio_queued(session)
        queued = [item for item in outbox._items if item.audio_turn == 1]
        await session.abort_turn(TurnError("the server is restarting"))
        assert turn.cancel.is_set() and turn.task.done() and session.state is SessionState.LISTENING
        assert all(any(item is left for left in outbox._items) for item in queued)
        frames = await write_all(outbox)
        messages = [f for f in frames if isinstance(f, dict)]
        assert [m["type"] for m in messages][-3:] == ["error", "reply.done", "timings"]
        assert messages[-2]["text"] == APOLOGY

    asyncio.run(scenario())
