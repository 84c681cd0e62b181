"""A model failing inside a turn: the client gets the `error`, then a short apology as the turn's reply (spoken,
unless speech is what failed), and the session answers the next turn.

The failures are real ones, injected into real engines: the LLM's CTranslate2 model unloaded under it (CTranslate2
raises "the model for this translator was unloaded"), and espeak-ng's binary gone (the subprocess cannot start).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager

import pytest

from voxline.config import Settings
from voxline.server import protocol as p
from voxline.server.engines import Engines
from voxline.server.outbox import Outbox
from voxline.server.pipeline import APOLOGY
from voxline.server.session import Session, SessionState
from wsframes import drain

SMOLLM = "smollm2-135m-instruct-ct2"


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak", reply_max_tokens=24), model_dir)


@contextmanager
def llm_unloaded(engines: Engines):
    engines.llm.generator.unload_model()
    try:
        yield
    finally:
        engines.llm.generator.load_model()


@contextmanager
def espeak_missing(engines: Engines):
    binary, engines.tts.binary = engines.tts.binary, "/nonexistent/espeak-ng"
    try:
        yield
    finally:
        engines.tts.binary = binary


@contextmanager
def espeak_slowed(engines: Engines):
    """espeak-ng behind a one-second wait, so that the test can speak over a synthesis in progress."""
    import os
    import stat
    import tempfile

    binary = engines.tts.binary
    with tempfile.TemporaryDirectory() as folder:
        slow = os.path.join(folder, "espeak-ng")
        with open(slow, "w") as script:
            script.write(f'#!/bin/sh\nsleep 1\nexec {binary} "$@"\n')
        os.chmod(slow, stat.S_IRWXU)
        engines.tts.binary = slow
        try:
            yield
        finally:
            engines.tts.binary = binary


async def turn(session: Session, outbox: Outbox, message: dict) -> tuple[list[dict], list[p.ReplyAudioFrame]]:
    """Send one turn and wait for it to end; (messages, reply audio frames) it produced."""
    await session.receive_text(json.dumps(message))
    if session.turn is not None:
        await asyncio.wait_for(session.turn.task, 60)
    return await drain(outbox)


async def greeted(engines: Engines, **capabilities) -> tuple[Session, Outbox]:
    outbox = Outbox()
    session = Session(engines, outbox)
    await turn(session, outbox, {"type": "hello", "v": 1, "capabilities": capabilities})
    assert session.state is SessionState.LISTENING
    return session, outbox


def test_an_llm_failure_is_answered_with_a_spoken_apology_and_the_session_goes_on(engines):
    async def scenario():
        session, outbox = await greeted(engines)
        with llm_unloaded(engines):
            messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 1, "text": "tell me a joke"})
        assert [m["type"] for m in messages] == ["error", "reply.done", "timings"]
        error, done = messages[0], messages[1]
        assert (error["code"], error["turn_id"]) == ("llm_failed", 1) and "unloaded" in error["message"]
        assert done == {"type": "reply.done", "turn_id": 1, "text": APOLOGY, "interrupted": False}
        assert audio and {f.turn_id for f in audio} == {1} and audio[-1].clause_end
        assert sum(len(f.pcm) for f in audio) / 2 / p.REPLY_AUDIO_RATE_HZ > 1.0  # a sentence, not a click
        assert len(session.history) == 0, "a failed exchange stays out of the dialog"

        messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 2,
                                                       "text": "what is the capital of France"})
        assert "error" not in [m["type"] for m in messages]
        assert messages[-2]["type"] == "reply.done" and messages[-2]["text"] not in ("", APOLOGY)
        assert audio

    asyncio.run(scenario())


def test_a_tts_failure_is_answered_with_a_text_apology_and_the_session_goes_on(engines):
    async def scenario():
        session, outbox = await greeted(engines)
        with espeak_missing(engines):
            messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 1,
                                                           "text": "what is the capital of France"})
        errors = [m for m in messages if m["type"] == "error"]
        assert [e["code"] for e in errors] == ["tts_failed"] and "espeak-ng" in errors[0]["message"]
        assert [m["type"] for m in messages][-2:] == ["reply.done", "timings"]
        assert messages[-2]["text"] == APOLOGY
        assert audio == [], "speech failed: the apology is text only"

        messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 2, "text": "pause the music"})
        assert messages[0]["intent"] == "media.pause" and messages[-2]["text"] == "Paused."
        assert audio

    asyncio.run(scenario())


def test_a_failed_confirmation_is_still_a_whole_turn(engines):
    async def scenario():
        session, outbox = await greeted(engines)
        with espeak_missing(engines):
            messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 1, "text": "mute"})
        assert [m["type"] for m in messages] == ["intent", "error", "reply.done", "timings"]
        assert messages[1]["code"] == "tts_failed" and not audio

    asyncio.run(scenario())


def test_a_text_only_client_gets_the_apology_as_text(engines):
    async def scenario():
        session, outbox = await greeted(engines, reply_audio=False)
        with llm_unloaded(engines):
            messages, audio = await turn(session, outbox, {"type": "text", "turn_id": 1, "text": "tell me a joke"})
        assert [m["type"] for m in messages] == ["error", "reply.done", "timings"]
        assert messages[1]["text"] == APOLOGY and audio == []

    asyncio.run(scenario())


def test_a_barge_in_stops_the_spoken_apology(engines):
    async def scenario():
        session, outbox = await greeted(engines)
        engines.phrases.clear()  # a cached apology would be queued at once, with nothing left to stop
        with llm_unloaded(engines), espeak_slowed(engines):
            await session.receive_text(json.dumps({"type": "text", "turn_id": 1, "text": "tell me a joke"}))
            while session.state is SessionState.THINKING and not outbox._items:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the error is out; the apology is being synthesized
            await session.receive_text(json.dumps({"type": "barge_in", "turn_id": 1, "played_ms": 0}))
        assert session.state is SessionState.LISTENING
        messages, _ = await turn(session, outbox, {"type": "text", "turn_id": 2, "text": "next song"})
        kinds = [(m["type"], m.get("interrupted")) for m in messages]
        assert kinds[:3] == [("error", None), ("reply.done", True), ("timings", True)], kinds
        assert messages[3]["intent"] == "media.next"

    asyncio.run(scenario())
