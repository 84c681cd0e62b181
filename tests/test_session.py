"""The session state machine on real models: legal transitions, every illegal one, and what each turn sends."""

from __future__ import annotations

import asyncio
import json

import pytest

from voxline.config import Settings
from voxline.dialog import heard_text
from voxline.server import protocol as p
from voxline.server.engines import Engines
from voxline.server.outbox import Outbound, Outbox
from voxline.server.session import ACCEPTS, Session, SessionState

SMOLLM = "smollm2-135m-instruct-ct2"
S = SessionState


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM), model_dir)


class RecordingOutbox(Outbox):
    """An outbox that also notes the session state at the moment each frame was queued."""

    def __init__(self) -> None:
        super().__init__()
        self.session: Session | None = None
        self.states: list[tuple[SessionState, Outbound]] = []

    def put(self, item: Outbound) -> None:
        self.states.append((self.session.state, item))
        super().put(item)


def new_session(engines: Engines) -> tuple[Session, RecordingOutbox]:
    outbox = RecordingOutbox()
    session = Session(engines, outbox)
    outbox.session = session
    return session, outbox


async def sent(outbox: Outbox) -> list[dict | bytes]:
    """Everything queued so far, decoded (JSON as dicts, audio as bytes); closes as {"close": code}."""
    out: list[dict | bytes] = []
    while outbox._items:
        item = await outbox.get()
        if item.close_code is not None:
            out.append({"close": item.close_code})
            continue
        data = item.data() if callable(item.data) else item.data
        out.append(data if isinstance(data, bytes) else json.loads(data))
    return out


def types(frames: list[dict | bytes]) -> list[str]:
    return ["audio" if isinstance(f, bytes) else f.get("type", "close") for f in frames]


async def hello(session: Session, outbox: Outbox, **fields) -> list[dict | bytes]:
    await session.receive_text(json.dumps({"type": "hello", "v": 1, **fields}))
    return await sent(outbox)


async def finish_turn(session: Session) -> None:
    if session.turn is not None and session.turn.task is not None:
        await session.turn.task


SAMPLES: dict[type, object] = {
    p.Hello: p.Hello(v=1),
    p.TurnStart: p.TurnStart(turn_id=100, transcript="pause", confidence=0.9),
    p.TextTurn: p.TextTurn(turn_id=100, text="pause"),
    p.AudioFrame: p.AudioFrame("pcm16", 100, b"\x00\x00"),
    p.AudioEnd: p.AudioEnd(turn_id=100),
    p.BargeIn: p.BargeIn(turn_id=100, played_ms=0.0),
    p.TurnConfirm: p.TurnConfirm(turn_id=100),
    p.TurnCancel: p.TurnCancel(turn_id=100),
    p.Bye: p.Bye(),
}
ILLEGAL = [(kind, state) for kind in SAMPLES for state in S if state not in ACCEPTS[kind]]


def test_every_message_type_has_one_handler_and_a_legal_state(engines):
    session, _ = new_session(engines)
    assert set(session._handlers) == set(ACCEPTS) == set(SAMPLES)
    assert all(ACCEPTS[kind] for kind in ACCEPTS)


@pytest.mark.parametrize(("kind", "state"), ILLEGAL, ids=[f"{k.__name__}-{s.value}" for k, s in ILLEGAL])
def test_a_message_in_a_state_that_does_not_accept_it_is_illegal_state(engines, kind, state):
    async def scenario():
        session, outbox = new_session(engines)
        session.state = state
        await session.dispatch(SAMPLES[kind])
        assert session.state is state
        (error,) = await sent(outbox)
        assert error["type"] == "error" and error["code"] == "illegal_state"

    asyncio.run(scenario())


def test_hello_welcomes_and_listens(engines):
    async def scenario():
        session, outbox = new_session(engines)
        (welcome,) = await hello(session, outbox, lang="en-US")
        assert session.state is S.LISTENING and session.lang == "en-US"
        assert welcome["type"] == "welcome" and welcome["v"] == p.PROTOCOL_VERSION
        assert welcome["session_id"] == session.id
        assert welcome["limits"]["asr_confidence_gate"] == engines.settings.asr_confidence_gate
        assert welcome["reply_audio"] == {"encoding": "pcm16le", "sample_rate": 24000, "channels": 1,
                                          "header_bytes": p.REPLY_HEADER_BYTES}

    asyncio.run(scenario())


def test_a_text_turn_goes_thinking_speaking_listening(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        outbox.states.clear()
        await session.dispatch(p.TextTurn(turn_id=1, text="What is the capital of France?"))
        assert session.state is S.THINKING
        await finish_turn(session)
        assert session.state is S.LISTENING
        frames = await sent(outbox)
        kinds = types(frames)
        assert kinds[-2:] == ["reply.done", "timings"] and "reply.delta" in kinds and "audio" in kinds
        deltas = [f["text"] for f in frames if isinstance(f, dict) and f["type"] == "reply.delta"]
        assert frames[-2]["text"] == "".join(deltas).strip() and "Paris" in frames[-2]["text"]
        # Text goes out while THINKING; the first audio frame is what moves the session to SPEAKING.
        assert outbox.states[0][0] is S.THINKING
        assert {state for state, item in outbox.states if isinstance(item.data, bytes)} == {S.SPEAKING}
        assert session.history.exchanges[-1].assistant == frames[-2]["text"]

    asyncio.run(scenario())


def test_a_command_is_answered_by_the_grammar_without_the_llm(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text="turn the volume down to 30%"))
        await finish_turn(session)
        frames = await sent(outbox)
        intent = frames[0]
        assert intent == {"type": "intent", "turn_id": 1, "intent": "media.volume_set", "slots": {"level": 30},
                          "text": intent["text"], "confirmation": "Volume 30.",
                          "grammar_version": engines.grammar.version}
        assert "reply.delta" not in types(frames)
        timings = frames[-1]
        assert "llm_first_token_ms" not in timings and "intent_ms" in timings
        assert len(session.history) == 0  # commands are not conversation

    asyncio.run(scenario())


def test_audio_turns_receive_until_audio_end(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TurnStart(turn_id=5, transcript="pause", confidence=0.95, audio="pcm16"))
        assert session.state is S.RECEIVING_AUDIO
        await session.dispatch(p.AudioFrame("pcm16", 5, b"\x00\x00" * 160))
        await session.dispatch(p.AudioFrame("pcm16", 4, b"\x00\x00"))  # another turn's audio
        await session.dispatch(p.AudioFrame("opus", 5, b"\xfc"))  # not the announced kind
        await session.dispatch(p.AudioEnd(turn_id=5))
        assert session.state is S.THINKING
        await finish_turn(session)
        frames = await sent(outbox)
        assert [(f["type"], f.get("code")) for f in frames[:2]] == [("error", "illegal_state"),
                                                                   ("error", "bad_message")]
        assert "transcript" not in types(frames)  # confident: the browser's transcript stands
        assert next(f for f in frames if isinstance(f, dict) and f["type"] == "intent")["intent"] == "media.pause"

    asyncio.run(scenario())


def test_audio_not_announced_in_hello_is_refused(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox, capabilities={"opus": False, "pcm16": True})
        await session.dispatch(p.TurnStart(turn_id=1, transcript="x", confidence=0.1, audio="opus"))
        assert session.state is S.LISTENING
        assert (await sent(outbox))[0]["code"] == "bad_message"

    asyncio.run(scenario())


def test_barge_in_while_receiving_audio_drops_the_turn(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TurnStart(turn_id=2, transcript="x", confidence=0.1, audio="pcm16"))
        await session.dispatch(p.BargeIn(turn_id=2))
        assert session.state is S.LISTENING
        assert [f["type"] for f in await sent(outbox)] == ["reply.done", "timings"]

    asyncio.run(scenario())


def test_barge_in_for_another_turn_is_illegal(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TurnStart(turn_id=2, transcript="x", confidence=0.1, audio="pcm16"))
        await session.dispatch(p.BargeIn(turn_id=1))
        assert session.state is S.RECEIVING_AUDIO
        assert (await sent(outbox))[0]["code"] == "illegal_state"

    asyncio.run(scenario())


def test_turn_ids_must_increase(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=7, text="pause"))
        await finish_turn(session)
        await sent(outbox)
        await session.dispatch(p.TextTurn(turn_id=7, text="pause"))
        assert session.state is S.LISTENING
        assert (await sent(outbox))[0]["code"] == "bad_message"

    asyncio.run(scenario())


def test_bye_closes_normally_and_stops_the_turn(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text="Tell me a long story about a dragon."))
        task = session.turn.task
        await session.dispatch(p.Bye())
        assert session.state is S.CLOSED and task.cancelled()
        frames = await sent(outbox)
        assert frames[-1] == {"close": p.CLOSE_NORMAL}
        assert "reply.done" not in types(frames)

    asyncio.run(scenario())


@pytest.mark.parametrize(("fields", "code", "close"), [
    ({"v": 2}, "unsupported_version", p.CLOSE_UNSUPPORTED_VERSION),
    ({"lang": "fr"}, "unsupported_language", p.CLOSE_UNSUPPORTED_LANGUAGE),
])
def test_a_hello_the_server_cannot_serve_closes_the_session(engines, fields, code, close):
    async def scenario():
        session, outbox = new_session(engines)
        frames = await hello(session, outbox, **fields)
        assert session.state is S.CLOSED
        assert frames[0]["code"] == code and frames[-1] == {"close": close}

    asyncio.run(scenario())


def test_a_bad_pcm16_rate_is_refused_but_the_client_may_retry(engines):
    async def scenario():
        session, outbox = new_session(engines)
        frames = await hello(session, outbox, capabilities={"pcm16": True, "sample_rate": 44100})
        assert frames[0]["code"] == "bad_message" and session.state is S.HANDSHAKE
        assert types(await hello(session, outbox)) == ["welcome"]

    asyncio.run(scenario())


def test_too_many_bad_frames_in_a_row_close_the_session(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        for _ in range(p.MAX_CONSECUTIVE_BAD_FRAMES - 1):
            await session.receive_text("nonsense")
        await session.receive_text('{"type": "text", "turn_id": 1, "text": "pause"}')  # a good one resets the count
        await finish_turn(session)
        for _ in range(p.MAX_CONSECUTIVE_BAD_FRAMES - 1):
            await session.receive_bytes(b"\x00")
        assert session.state is S.LISTENING
        await session.receive_bytes(b"\x00")
        assert session.state is S.CLOSED
        assert (await sent(outbox))[-1] == {"close": p.CLOSE_POLICY_VIOLATION}

    asyncio.run(scenario())


def test_a_bad_opus_description_is_refused_at_turn_start(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox, capabilities={"opus": True})
        await session.receive_text(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "", "confidence": 0,
                                               "audio": "opus", "opus": {"description": "%%%"}}))
        assert session.state is S.LISTENING
        assert (await sent(outbox))[0]["code"] == "bad_message"

    asyncio.run(scenario())


STORY = "Tell me a long story about a brave knight and a dragon."


async def until_first_clause_queued(session: Session, timeout_s: float = 60.0) -> None:
    """Wait (on the event loop, not a wall-clock guess) until the turn's first clause of audio is queued."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (session.turn and session.turn.clauses):
        assert loop.time() < deadline, "no reply audio was queued"
        await asyncio.sleep(0.005)


def test_barge_in_while_generating_stops_it_and_keeps_what_was_heard(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text=STORY))
        await until_first_clause_queued(session)
        turn = session.turn
        assert session.state in {S.THINKING, S.SPEAKING} and not turn.task.done()
        first = turn.clauses[0]
        # The user heard the first clause and a little of the next one (not a whole word of it), then spoke.
        await session.dispatch(p.BargeIn(turn_id=1, played_ms=first.duration_ms + 1.0))
        assert session.state is S.LISTENING and session.turn is None and turn.task.done()
        frames = await sent(outbox)
        (done,) = [f for f in frames if isinstance(f, dict) and f["type"] == "reply.done"]
        assert done == {"type": "reply.done", "turn_id": 1, "text": first.text, "interrupted": True}
        assert frames[-1]["type"] == "timings" and frames[-1]["interrupted"] is True
        assert session.history.exchanges[-1].assistant == first.text
        assert turn.cancel.is_set()
        # Nothing of the turn is sent after its reply.done.
        await asyncio.sleep(0.2)
        assert await sent(outbox) == []

    asyncio.run(scenario())


def test_barge_in_after_reply_done_trims_the_history_to_what_was_heard(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text=STORY))
        await finish_turn(session)
        frames = await sent(outbox)
        done = [f for f in frames if isinstance(f, dict) and f["type"] == "reply.done"][0]
        clauses = session.last_turn.clauses
        assert done["interrupted"] is False and len(clauses) >= 3, done
        assert session.history.exchanges[-1].assistant == done["text"]
        # Generation is over, but the page was still playing the reply: halfway through the second clause.
        played_ms = clauses[0].duration_ms + clauses[1].duration_ms / 2
        await session.dispatch(p.BargeIn(turn_id=1, played_ms=played_ms))
        heard = heard_text(clauses, played_ms)
        assert heard.startswith(clauses[0].text) and len(heard) < len(clauses[0].text) + 1 + len(clauses[1].text)
        assert session.history.exchanges[-1].assistant == heard
        assert session.state is S.LISTENING
        assert await sent(outbox) == []  # the turn's reply.done went out already: nothing more is said about it
        # The next reply is written on what was heard, not on what was generated.
        assert session.history.messages("go on")[-2].content == heard

    asyncio.run(scenario())


def test_barge_in_after_the_whole_reply_played_keeps_all_of_it(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text="What is the capital of France?"))
        await finish_turn(session)
        reply = session.history.exchanges[-1].assistant
        total_ms = sum(c.duration_ms for c in session.last_turn.clauses)
        await session.dispatch(p.BargeIn(turn_id=1, played_ms=total_ms))
        assert session.history.exchanges[-1].assistant == reply

    asyncio.run(scenario())


# ------------------------------------------------------------------------------------------------ speculative turns


def speculative(turn_id: int, text: str) -> p.TurnStart:
    return p.TurnStart(turn_id=turn_id, transcript=text, confidence=0.9, speculative=True)


def test_a_speculative_turn_sends_nothing_until_confirmed_then_everything_in_order(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(speculative(1, "What is the capital of France?"))
        turn = session.turn
        await finish_turn(session)  # it answered in full while the user might still have been speaking
        assert await sent(outbox) == [] and len(session.history) == 0
        assert session.state in {S.THINKING, S.SPEAKING} and session.turn is turn
        await session.dispatch(p.TurnConfirm(turn_id=1))
        assert session.state is S.LISTENING and session.turn is None and session.last_turn is turn
        frames = await sent(outbox)
        kinds = types(frames)
        assert kinds[-2:] == ["reply.done", "timings"] and "reply.delta" in kinds and "audio" in kinds
        assert "Paris" in frames[-2]["text"] and session.history.exchanges[-1].assistant == frames[-2]["text"]
        assert frames[-1]["confirmed_ms"] >= frames[-1]["llm_ms"]  # confirmed after the whole reply was ready
        # The next turn is an ordinary one.
        await session.dispatch(p.TextTurn(turn_id=2, text="And of Italy?"))
        await finish_turn(session)
        assert types(await sent(outbox))[-2:] == ["reply.done", "timings"]

    asyncio.run(scenario())


def test_a_confirmed_speculative_turn_streams_on_after_its_held_frames(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(speculative(1, STORY))
        await until_first_clause_queued(session)
        await session.dispatch(p.TurnConfirm(turn_id=1))
        held = await sent(outbox)
        assert "audio" in types(held) and "reply.done" not in types(held)
        await finish_turn(session)
        rest = types(await sent(outbox))
        assert rest[-2:] == ["reply.done", "timings"] and session.state is S.LISTENING

    asyncio.run(scenario())


def test_a_cancelled_speculative_turn_leaves_no_trace(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        metrics = engines.metrics
        cancelled = metrics.registry.get_sample_value("voxline_speculative_turns_total", {"outcome": "cancelled"}) or 0
        await session.dispatch(speculative(1, STORY))
        turn = session.turn
        await until_first_clause_queued(session)
        await session.dispatch(p.TurnCancel(turn_id=1))
        assert session.state is S.LISTENING and session.turn is None and turn.task.done() and turn.cancel.is_set()
        assert await sent(outbox) == [] and len(session.history) == 0 and session.last_turn is None
        assert metrics.registry.get_sample_value("voxline_speculative_turns_total",
                                                 {"outcome": "cancelled"}) == cancelled + 1
        assert metrics.registry.get_sample_value("voxline_speculative_wasted_tokens_total") >= turn.deltas > 0
        await asyncio.sleep(0.2)
        assert await sent(outbox) == []
        # The user's real turn comes next, with a later id.
        await session.dispatch(p.TextTurn(turn_id=2, text="What is the capital of France?"))
        await finish_turn(session)
        frames = await sent(outbox)
        assert {f["turn_id"] for f in frames if isinstance(f, dict)} == {2}
        assert [e.user for e in session.history.exchanges] == ["What is the capital of France?"]

    asyncio.run(scenario())


def test_a_speculative_command_is_held_too(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(speculative(1, "turn the volume down to 30%"))
        await finish_turn(session)
        assert await sent(outbox) == []
        await session.dispatch(p.TurnConfirm(turn_id=1))
        frames = await sent(outbox)
        assert types(frames)[0] == "intent" and frames[0]["intent"] == "media.volume_set"

    asyncio.run(scenario())


@pytest.mark.parametrize("message", [
    p.TurnStart(turn_id=1, transcript="hi", confidence=0.9, speculative=True, audio="pcm16"),
    p.TurnStart(turn_id=1, transcript="hi", confidence=0.9, speculative=True, want_server_asr=True),
])
def test_a_speculative_turn_with_audio_is_refused(engines, message):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox, capabilities={"pcm16": True, "sample_rate": 16000})
        await session.dispatch(message)
        (error,) = await sent(outbox)
        assert error["code"] == "bad_message" and "speculative" in error["message"]
        assert session.state is S.LISTENING

    asyncio.run(scenario())


@pytest.mark.parametrize("message", [p.BargeIn(turn_id=1), p.TurnConfirm(turn_id=2), p.TurnCancel(turn_id=2)])
def test_only_confirm_or_cancel_ends_a_speculative_turn(engines, message):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(speculative(1, STORY))
        await session.dispatch(message)
        (error,) = await sent(outbox)
        assert error["code"] == "illegal_state" and error["turn_id"] == message.turn_id
        assert session.turn.turn_id == 1 and session.turn.speculative
        await session.dispatch(p.TurnCancel(turn_id=1))
        assert session.state is S.LISTENING

    asyncio.run(scenario())


def test_confirm_of_an_ordinary_turn_is_illegal(engines):
    async def scenario():
        session, outbox = new_session(engines)
        await hello(session, outbox)
        await session.dispatch(p.TextTurn(turn_id=1, text=STORY))
        await session.dispatch(p.TurnConfirm(turn_id=1))
        frames = await sent(outbox)
        assert any(isinstance(f, dict) and f.get("code") == "illegal_state" for f in frames)
        await session.dispatch(p.BargeIn(turn_id=1))

    asyncio.run(scenario())
