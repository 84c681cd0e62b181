"""The turn pipeline: what happens between a turn's last message and its `reply.done`.

A turn runs as its own task, so the session keeps reading the socket while it thinks and speaks: that is how a
barge-in can stop it. The pipeline inside a turn overlaps its stages: the LLM thread streams text deltas, the
clause splitter hands each finished clause to TTS (in a worker thread) while the model keeps writing, and each
synthesized clause goes to the socket as soon as it exists. Everything bound for the socket passes through the
session's `Outbox`, so frames keep their order and a barge-in can drop the reply audio that has not left yet.

A turn is stopped in one way only, `TurnPipeline.interrupt`, whoever stops it (barge-in, `turn.cancel`, the server
draining, the connection gone), and ends in one way only, `TurnPipeline.end`: `reply.done`, `timings`, and the
turn's place in the metrics and the trace.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING

import numpy as np

from voxline.clauses import ClauseSplitter, speakable
from voxline.dialog import SpokenClause, heard_text
from voxline.errors import ASRError, Overloaded, TTSError, TurnError, VoxlineError
from voxline.intents import Match
from voxline.llm import GenerationRequest
from voxline.server import protocol as p
from voxline.server.intent_classifier import classifier_for
from voxline.server.outbox import Outbound
from voxline.server.timings import first_audio_stages, stage_spans, timings_message
from voxline.server.turn import Turn
from voxline.server_asr import Transcription, decode_opus, decode_pcm16
from voxline.tts import to_pcm16

if TYPE_CHECKING:
    from voxline.server.session import Session

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I could not answer that. Please try again."
"""The reply text when a model fails mid-turn; the `error` message beside it says what failed."""
BUSY_APOLOGY = "Sorry, I am busy right now. Please try again in a moment."
"""The reply text when the LLM queue is full (`overloaded`)."""
FIRST_CLAUSE_MAX_WORDS = 5
"""The first clause is cut after this many words (see `ClauseSplitter`): speech starts about one short phrase after
the first token, instead of one whole sentence (on a 2-core CPU, Qwen 0.5B writes ~20 tokens a second)."""
REPLY_FRAME_MS = 200
"""Reply audio is sent in frames of this length: small enough that a barge-in drops most of an unsent clause."""


class TurnPipeline:
    """Runs the turns of one session (one at a time): recognise, resolve, answer by command or LLM, speak, end.

    It reads the session's conversation (language, tier, history, capabilities) and tells the session when a turn
    starts speaking and when it ends (`Session.turn_speaking`, `Session.turn_ended`): the states are the session's.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.engines = session.engines
        self.settings = session.settings
        self.turns = 0
        """Turns observed, numbering them in the trace."""
        self._unobserved: list[Turn] = []
        """Ended turns whose first reply audio still waits in the outbox (observed once it leaves)."""

    def start(self, turn: Turn) -> None:
        turn.task = asyncio.create_task(self._run(turn), name=f"voxline-turn-{self.session.id}-{turn.turn_id}")

    # ------------------------------------------------------------------------------------------------ stopping

    async def interrupt(self, turn: Turn, *, drop_unsent_audio: bool = False) -> int:
        """Stop a turn now: its LLM request (at its next token if it runs, out of the queue if it waits), its
        task (cancelled and waited for, so nothing more of it is queued after this returns) and, with
        `drop_unsent_audio` (a barge-in: the user no longer listens), its reply audio that has not left yet;
        returns how many frames were dropped. How the turn then ends is the caller's: `end`, `fail`, or not at all
        (a cancelled speculative turn, a connection gone)."""
        self._stop_generation(turn)
        task = turn.task
        if task is not None and not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        return self.session.outbox.drop_audio(turn.turn_id) if drop_unsent_audio else 0

    async def barge_in(self, turn: Turn, played_ms: float) -> None:
        """The user spoke over the reply, `played_ms` into it: stop it, and end it with what was heard."""
        dropped = await self.interrupt(turn, drop_unsent_audio=True)
        log.info("turn %s of session %s interrupted at %.0f ms (%d frames unsent)",
                 turn.turn_id, self.session.id, played_ms, dropped)
        self.end(turn, heard_text(turn.clauses, played_ms), interrupted=True)

    def barge_in_late(self, turn: Turn, played_ms: float) -> None:
        """A barge-in for the turn that just ended: its reply was fully sent, but the page was still playing it.
        The turn stays over (its reply.done went out), yet the history forgets what the user never heard."""
        history = self.session.history
        if turn.kind == "llm" and history.exchanges:
            heard = heard_text(turn.clauses, played_ms)
            if heard != history.exchanges[-1].assistant:
                history.amend_last(heard)

    def confirm(self, turn: Turn) -> None:
        """A speculative turn is the user's: send what it held back, and go on (or end) as any turn."""
        turn.mark("confirmed_ms")
        if turn.ticket is not None:
            self.engines.scheduler.confirm(turn.ticket)
        held, turn.held = turn.held, None
        for item in held:
            self.session.outbox.put(item)
        self.engines.metrics.speculation("confirmed")
        if turn.held_end is not None:
            reply, interrupted = turn.held_end
            self.end(turn, reply, interrupted=interrupted)

    async def cancel(self, turn: Turn) -> None:
        """A speculative turn was not the user's after all: stop it, and forget what it held back."""
        await self.interrupt(turn)
        self.engines.metrics.speculation("cancelled", turn.deltas)
        turn.held = None

    async def abort(self, turn: Turn, error: TurnError) -> None:
        """Stop a turn and end it with `error` and the apology (the server is going away: the client must hear
        that the turn was cut, not lose it silently). Its audio already queued still goes, before the apology."""
        await self.interrupt(turn)
        if self.session.turn is turn:
            await self.fail(turn, error)  # a speculative turn's is held: the client hears it if it confirms

    def _stop_generation(self, turn: Turn) -> None:
        turn.cancel.set()  # stops its request at the next token if it is still running
        if turn.ticket is not None:
            self.engines.scheduler.withdraw(turn.ticket)  # or takes it out of the queue if it never started

    # ------------------------------------------------------------------------------------------------ running

    async def _run(self, turn: Turn) -> None:
        try:
            if self.session.refusal is not None:
                raise self.session.refusal
            text = turn.text
            if turn.audio is not None and turn.chunks and self._needs_server_asr(turn):
                heard = await self._recognise(turn)
                if heard.text and not heard.reliable:
                    # Neither a command nor a question to the LLM: what it would act on is likely not what was said.
                    raise ASRError(f"did not catch that: the server heard {heard.text!r} but is unsure of it "
                                   f"(confidence {heard.confidence:.2f}{', a decoding loop' if heard.garbled else ''})"
                                   "; please say it again")
                text = heard.text or text
            turn.text = text.strip()
            if not turn.text:
                self.end(turn, "")
                return
            match = self.engines.resolver.resolve(turn.text, self.session.lang).match
            turn.mark("intent_ms")
            classifier = classifier_for(self.engines) if match is None else None
            if classifier is not None:  # the grammar missed: is it still one of the intents?
                verdict = classifier.screen(turn.text, self.session.lang)
                if verdict is None and self._chat_beside_classifier():
                    await self._classify_beside_chat(turn, classifier)
                    return
                if verdict is None:
                    verdict = await asyncio.to_thread(classifier.classify, turn.text, self.session.lang)
                turn.mark("classify_ms")
                match = verdict.match
            if match is not None:
                await self._answer_command(turn, match)
            else:
                await self._answer_with_llm(turn)
        except asyncio.CancelledError:
            raise
        except VoxlineError as exc:
            await self.fail(turn, exc)
        except Exception as exc:  # a bug must not kill the session: the client still gets its turn closed
            log.exception("turn %s of session %s failed", turn.turn_id, self.session.id)
            await self.fail(turn, TurnError(f"internal error ({exc}); please try again"))

    def _chat_beside_classifier(self) -> bool:
        """Whether the chat may start beside the classifier: the setting, and a second LLM slot to run it on. With
        one slot (`--batching off`, one core) the two calls would queue on the same worker, and a verdict stuck behind
        a whole chat reply would make a command wait for it."""
        return self.settings.classify_beside_chat and self.settings.llm_parallel_count() > 1

    async def _classify_beside_chat(self, turn: Turn, classifier) -> None:
        """Ask the classifier and start the chat at once, beside it: everything the chat sends is held
        (`Turn.verdict_held`) until the verdict. No command: the held frames go out and the chat goes on, so the
        answer started when the classifier did rather than after it. A command: the chat is stopped and leaves
        nothing (no frame, no history, no reply marks), and the turn is answered as that intent."""
        turn.verdict_held = []
        marks_before = set(turn.marks)
        chat = asyncio.create_task(self._answer_with_llm(turn), name=f"{asyncio.current_task().get_name()}-chat")
        try:
            verdict = await asyncio.to_thread(classifier.classify, turn.text, self.session.lang)
        except BaseException:  # interrupted (barge-in, cancel, shutdown) or the classifier failed: the chat goes too
            await self._discard_chat(turn, chat, marks_before)
            raise
        turn.mark("classify_ms")
        if verdict.match is None:
            self.engines.metrics.chat_beside_classifier("kept")
            held, turn.verdict_held = turn.verdict_held, None
            for item in held:
                self.put(turn, item)
            if turn.verdict_end is not None:
                reply, interrupted = turn.verdict_end
                turn.verdict_end = None
                self.end(turn, reply, interrupted=interrupted)
            await chat  # its errors are the turn's, as when it runs alone
            return
        await self._discard_chat(turn, chat, marks_before | {"classify_ms"})
        self.engines.metrics.chat_beside_classifier("discarded", turn.deltas)
        turn.deltas = 0  # counted here; a speculative turn cancelled later has wasted nothing more
        await self._answer_command(turn, verdict.match)

    async def _discard_chat(self, turn: Turn, chat: asyncio.Task, keep_marks: set[str]) -> None:
        """Stop a chat whose verdict said "command" (or never came) and undo every trace of it on the turn, but for
        `deltas` (the work it wasted, which the caller counts)."""
        self._stop_generation(turn)
        chat.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await chat
        for item in turn.verdict_held or ():
            if item.on_dropped is not None:
                item.on_dropped()  # the first audio frame's bookkeeping: it will never be sent
        turn.verdict_held = turn.verdict_end = None
        turn.cancel = threading.Event()
        turn.ticket, turn.kind, turn.llm_tokens = None, None, None
        turn.reply_text, turn.clauses, turn.audio_frames = "", [], 0
        for name in set(turn.marks) - keep_marks:
            del turn.marks[name]

    def _needs_server_asr(self, turn: Turn) -> bool:
        return turn.want_server_asr or (turn.confidence or 0.0) < self.settings.asr_confidence_gate

    async def _recognise(self, turn: Turn) -> Transcription:
        def work() -> Transcription:
            if turn.audio == "opus":
                samples = decode_opus(turn.chunks, channels=turn.opus.channels,
                                      description=turn.opus.description_bytes())
            else:
                samples = decode_pcm16(turn.chunks)
            return self.engines.asr.transcribe(samples, self.session.lang)

        heard = await asyncio.to_thread(work)
        turn.mark("asr_ms")
        if heard.text:
            self.send(turn, p.Transcript(turn_id=turn.turn_id, text=heard.text, confidence=round(heard.confidence, 3)))
        return heard

    async def _answer_command(self, turn: Turn, match: Match) -> None:
        turn.kind = "intent"
        self.send(turn, p.IntentMessage(
            turn_id=turn.turn_id, intent=match.intent, slots=dict(match.slots), text=match.text,
            confirmation=match.confirmation, grammar_version=self.engines.grammar.version,
        ))
        if match.confirmation:
            turn.reply_text = match.confirmation
            await self._speak_clause(turn, match.confirmation, phrase=True)
        self.end(turn, match.confirmation or "")

    async def _answer_with_llm(self, turn: Turn) -> None:
        turn.kind = "llm"
        session = self.session
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str | None] = asyncio.Queue()
        request = GenerationRequest(
            session.history.messages(turn.text),
            on_text=lambda d: loop.call_soon_threadsafe(deltas.put_nowait, d),
            max_tokens=self.settings.reply_max_tokens,
            max_seconds=self.settings.reply_max_seconds,
            cancel=turn.cancel,
        )
        try:
            turn.ticket = self.engines.scheduler.submit(request, confidence=turn.confidence, tier=session.tier,
                                                        session_id=session.id, speculative=turn.speculative)
        except Overloaded:
            self.engines.metrics.reject("overloaded")
            raise
        turn.mark_at("llm_queued_ms", turn.ticket.queued_at)
        generation = asyncio.wrap_future(turn.ticket.future)
        # Runs after every delta the thread scheduled (same loop queue, scheduled later): None marks the end.
        generation.add_done_callback(lambda _: deltas.put_nowait(None))
        clauses: asyncio.Queue[str | None] = asyncio.Queue()
        speaker = asyncio.create_task(self._speak_clauses(turn, clauses))
        splitter = ClauseSplitter(first_clause_max_words=FIRST_CLAUSE_MAX_WORDS)
        try:
            while (delta := await deltas.get()) is not None:
                turn.mark("llm_first_token_ms")
                turn.reply_text += delta
                turn.deltas += 1
                self.send(turn, p.ReplyDelta(turn_id=turn.turn_id, text=delta))
                for clause in splitter.feed(delta):
                    turn.mark("first_clause_ms")
                    clauses.put_nowait(clause)
                if speaker.done():
                    speaker.result()  # TTS failed: raise its error now rather than after the whole reply
            result = await generation
            turn.marks["llm_ms"] = result.elapsed_s * 1000.0
            turn.llm_tokens = result.tokens
            for clause in splitter.flush():
                turn.mark("first_clause_ms")
                clauses.put_nowait(clause)
            clauses.put_nowait(None)
            await speaker
        finally:
            self._stop_generation(turn)  # a no-op once the reply is complete
            speaker.cancel()
            generation.add_done_callback(_consume_exception)
        self.end(turn, turn.reply_text.strip())

    async def _speak_clauses(self, turn: Turn, clauses: asyncio.Queue[str | None]) -> None:
        while (clause := await clauses.get()) is not None:
            await self._speak_clause(turn, clause)

    async def _speak_clause(self, turn: Turn, clause: str, *, phrase: bool = False) -> None:
        """Synthesize one clause and queue its audio; `phrase`: a fixed phrase, synthesized once per server."""
        text = speakable(clause)
        if not text or not self.session.capabilities.reply_audio:
            return
        engines = self.engines
        if phrase and text in engines.phrases:
            samples = engines.speak_phrase(text)  # no thread hop for a cached phrase
        else:
            samples = await asyncio.to_thread(engines.speak_phrase if phrase else engines.tts.synthesize, text)
        if samples.size == 0:
            return  # nothing pronounceable (an emoji): no frames, and no clause for played_ms to count
        turn.mark("tts_first_audio_ms")
        turn.marks["tts_done_ms"] = (time.perf_counter() - turn.started) * 1000.0
        self._queue_audio(turn, text, samples)

    def _queue_audio(self, turn: Turn, text: str, samples: np.ndarray) -> None:
        self.session.turn_speaking()
        index = len(turn.clauses)
        turn.clauses.append(SpokenClause(text, samples.size * 1000.0 / self.engines.tts.sample_rate))
        pcm = to_pcm16(samples)
        step = p.REPLY_AUDIO_RATE_HZ * REPLY_FRAME_MS // 1000 * 2
        for offset in range(0, len(pcm), step):
            seq = turn.audio_frames
            turn.audio_frames += 1
            frame = p.encode_reply_audio(turn.turn_id, seq, index, pcm[offset:offset + step],
                                         clause_end=offset + step >= len(pcm))
            if seq == 0:
                turn.first_audio_waiting = True
                self.put(turn, Outbound(frame, audio_turn=turn.turn_id, on_sent=lambda: self._first_audio_left(turn),
                                        on_dropped=lambda: self._first_audio_left(turn, sent=False)))
            else:
                self.put(turn, Outbound(frame, audio_turn=turn.turn_id))

    # ------------------------------------------------------------------------------------------------ endings

    def end(self, turn: Turn, reply: str, *, interrupted: bool = False) -> None:
        """Close the turn: reply.done, timings, history, back to LISTENING, into the metrics (all in one step: no
        await). A speculative turn not yet confirmed stays open, its ending kept for `turn.confirm`; so does a chat
        whose classifier verdict is still out, its ending kept for the verdict."""
        if turn.verdict_held is not None:
            turn.verdict_end = (reply, interrupted)
            return
        if turn.speculative:
            turn.held_end = (reply, interrupted)
            return
        turn.ended_ms = (time.perf_counter() - turn.started) * 1000.0
        turn.interrupted = interrupted
        if turn.ticket is not None and turn.ticket.dispatched_at is not None:
            turn.mark_at("llm_batch_ms", turn.ticket.dispatched_at)
        self.send(turn, p.ReplyDone(turn_id=turn.turn_id, text=reply, interrupted=interrupted))
        self.put(turn, Outbound(lambda: self._encode_timings(turn)))
        turn.chunks = []  # its audio is spent: `last_turn` outlives the turn, the uploaded audio must not
        self.session.turn_ended(turn, reply)
        if turn.first_audio_waiting:
            self._unobserved.append(turn)  # observed once its first audio frame is sent or dropped
        else:
            self._observe(turn)

    async def fail(self, turn: Turn, error: VoxlineError) -> None:
        """End a failed turn: the `error`, then the apology as its reply, spoken too unless speech itself failed."""
        log.warning("turn %s of session %s: %s: %s", turn.turn_id, self.session.id, error.code, error.message)
        turn.error = error.code
        turn.kind = None  # a failed exchange stays out of the history: the model would imitate its broken reply
        self.send(turn, p.ErrorMessage(code=error.code, message=error.message, turn_id=turn.turn_id,
                                       retry_after_ms=getattr(error, "retry_after_ms", None)))
        apology = BUSY_APOLOGY if isinstance(error, Overloaded) else APOLOGY
        if not isinstance(error, TTSError):
            try:
                await self._speak_clause(turn, apology, phrase=True)
            except Exception:  # the apology stays text-only; the turn must still end
                log.warning("turn %s of session %s: the apology could not be spoken", turn.turn_id, self.session.id)
        self.end(turn, apology)

    async def close(self, turn: Turn | None) -> None:
        """The session is over: stop `turn` (in progress: it goes unanswered), and put the ended turns whose first
        audio never left into the metrics without it."""
        if turn is not None:
            await self.interrupt(turn)
        for ended in list(self._unobserved):
            self._observe(ended)

    def _first_audio_left(self, turn: Turn, *, sent: bool = True) -> None:
        if sent:
            turn.mark("first_audio_sent_ms")
        turn.first_audio_waiting = False
        if turn.ended_ms is not None and not turn.observed:
            self._observe(turn)

    def _encode_timings(self, turn: Turn) -> str:
        """The `timings` message, encoded as it is sent (after the first audio went out)."""
        encoded = p.encode_message(timings_message(turn, (time.perf_counter() - turn.started) * 1000.0))
        log.debug("session %s turn timings %s", self.session.id, encoded)
        return encoded

    def _observe(self, turn: Turn) -> None:
        """Put an ended turn into the metrics and the trace, once."""
        if turn.observed:
            return
        turn.observed = True
        with suppress(ValueError):
            self._unobserved.remove(turn)
        kind = turn.kind or ("failed" if turn.error else "empty")
        outcome = "failed" if turn.error else "interrupted" if turn.interrupted else "ok"
        stages = first_audio_stages(turn.marks)
        first_audio = turn.marks.get("first_audio_sent_ms")
        if first_audio is not None and "confirmed_ms" in turn.marks:  # the user waited from the confirmation on
            first_audio = max(first_audio - turn.marks["confirmed_ms"], 0.0)
        session, engines = self.session, self.engines
        engines.metrics.observe_turn(
            kind=kind, outcome=outcome, total_ms=turn.ended_ms, first_audio_ms=first_audio, stages=stages,
            describe=lambda: f"{turn.turn_id} of session {session.id}")
        if engines.telemetry.enabled:
            self.turns += 1
            engines.telemetry.record_turn(
                session.span, number=self.turns, started_ns=turn.started_ns, duration_ms=turn.ended_ms,
                turn_type=kind, interrupted=turn.interrupted, error=turn.error,
                stages=stage_spans(turn, asr_model=engines.asr.folder.name, llm_model=engines.llm.name,
                                   tts_model=engines.tts.name),
                attributes={"voxline.turn_id": turn.turn_id, "voxline.session_id": session.id})

    # ------------------------------------------------------------------------------------------------ sending

    def send(self, turn: Turn, message: p.ServerMessage) -> None:
        self.put(turn, Outbound(p.encode_message(message)))

    def put(self, turn: Turn, item: Outbound) -> None:
        """Queue a frame of `turn` for the client, or hold it while the classifier's verdict is out or the turn is
        speculative."""
        if turn.verdict_held is not None:
            turn.verdict_held.append(item)
        elif turn.held is not None:
            turn.held.append(item)
        else:
            self.session.outbox.put(item)


def _consume_exception(future: asyncio.Future) -> None:
    """Retrieve the result of a generation nobody waits for any more (after a cancel), so asyncio does not warn."""
    if not future.cancelled():
        future.exception()
