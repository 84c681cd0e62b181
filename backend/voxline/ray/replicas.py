"""The replica side: the LLM, TTS and re-recognition workers that Ray Serve runs, and what they send back.

A model failure inside a replica travels as data (`WorkerFailure`): the replica lives on, and the front raises the
same error the embedded server would. Only a lost replica raises on the front (see front.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from voxline import paths
from voxline.config import Settings
from voxline.dialog import Message
from voxline.errors import ASRError, LLMError, Overloaded, TTSError, TurnError, VoxlineError
from voxline.llm import GenerationRequest, GenerationResult
from voxline.scheduler import BatchRecord, SchedulerConfig, TurnScheduler
from voxline.server_asr import Transcription

LLM_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class ReplyEnd:
    """The last item of an LLM stream: the result and how the replica's scheduler ran it."""

    result: GenerationResult
    lane: str
    batch_size: int | None
    """None when the replica never ran it (withdrawn while queued)."""
    queue_ms: float | None
    """Time in the replica's scheduler before its batch started."""


@dataclass(frozen=True)
class WorkerFailure:
    """A model failure inside a replica, sent as data (the replica lives on; only lost replicas raise)."""

    code: str
    message: str
    retry_after_ms: int | None = None

    @classmethod
    def of(cls, error: VoxlineError) -> WorkerFailure:
        return cls(error.code, error.message, getattr(error, "retry_after_ms", None))

    def error(self) -> TurnError:
        """The front's exception for it, with the replica's code and message."""
        if self.code == Overloaded.code:
            return Overloaded(self.message, self.retry_after_ms or TurnScheduler.RETRY_MIN_MS)
        kind = {LLMError.code: LLMError, TTSError.code: TTSError, ASRError.code: ASRError}.get(self.code, TurnError)
        return kind(self.message)


def worker_settings(settings: Settings) -> Settings:
    """What replicas are given: the settings without the front's secrets."""
    return replace(settings, auth_token="", site_keys="")


class LLMWorker:
    """An LLM replica: the model and its own TurnScheduler, so requests that meet here share batches."""

    def __init__(self, settings: Settings, threads: int = 0) -> None:
        from ray.serve.metrics import Histogram

        from voxline.llm import LLM

        self.llm = LLM(paths.model_dir(settings.llm_model), threads=threads,
                       parallel=settings.llm_parallel_count())
        self.llm.warm_up()
        self._batch_size = Histogram("voxline_llm_batch_size", description="Requests per LLM batch",
                                     boundaries=list(LLM_BATCH_BUCKETS), tag_keys=("lane",))
        self.scheduler = TurnScheduler(self.llm.generate, SchedulerConfig.from_settings(settings),
                                       on_batch=self._observe_batch, prompt_tokens=self.llm.prompt_tokens)

    def _observe_batch(self, record: BatchRecord) -> None:
        self._batch_size.observe(record.size, tags={"lane": record.lane})

    def describe(self) -> dict[str, str]:
        return {"name": self.llm.name}

    def activity(self) -> dict[str, Any]:
        """This replica's scheduler: requests waiting per lane, and running."""
        return {"depth": self.scheduler.depth, "running": self.scheduler.running}

    async def generate(self, messages: Sequence[tuple[str, str]], *, confidence: float | None, tier: int,
                       max_tokens: int, max_seconds: float | None, session_id: str = ""):
        """Text deltas as the model writes them (several joined when they come faster than they are read), then
        a `ReplyEnd`, or a `WorkerFailure` as the only or last item."""
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str | None] = asyncio.Queue()
        request = GenerationRequest([Message(role, content) for role, content in messages],  # type: ignore[arg-type]
                                    on_text=lambda d: loop.call_soon_threadsafe(deltas.put_nowait, d),
                                    max_tokens=max_tokens, max_seconds=max_seconds)
        try:
            ticket = self.scheduler.submit(request, confidence=confidence, tier=tier, session_id=session_id)
        except Overloaded as exc:
            yield WorkerFailure.of(exc)
            return
        done = asyncio.wrap_future(ticket.future)
        done.add_done_callback(lambda _: deltas.put_nowait(None))  # after every delta scheduled before it
        try:
            while (delta := await deltas.get()) is not None:
                ended = False
                while not deltas.empty():
                    more = deltas.get_nowait()
                    if more is None:
                        ended = True
                        break
                    delta += more
                yield delta
                if ended:
                    break
            try:
                result = await done
            except LLMError as exc:
                yield WorkerFailure.of(exc)
                return
            yield ReplyEnd(result, ticket.lane.name, ticket.batch_size, ticket.queue_ms)
        finally:
            # Normal end, or the front cancelled the stream (barge-in, front gone): CancelledError lands here.
            self.scheduler.withdraw(ticket)
            done.add_done_callback(_consume_exception)


class TTSWorker:
    """A TTS replica: one clause in, float32 samples out."""

    def __init__(self, settings: Settings) -> None:
        from voxline.tts import load_synthesizer

        self.tts = load_synthesizer(settings.tts_engine, paths.model_dir(settings.tts_model))

    def describe(self) -> dict[str, Any]:
        return {"name": self.tts.name, "sample_rate": self.tts.sample_rate}

    async def synthesize(self, text: str) -> np.ndarray | WorkerFailure:
        try:
            return await asyncio.to_thread(self.tts.synthesize, text)
        except TTSError as exc:
            return WorkerFailure.of(exc)


class ASRWorker:
    """A server re-recognition replica (Whisper loads on the replica's first utterance)."""

    def __init__(self, settings: Settings, threads: int = 0) -> None:
        from voxline.server_asr import ServerASR

        self.asr = ServerASR(paths.model_dir(settings.server_asr_model), threads=threads)

    def describe(self) -> dict[str, str]:
        return {"folder": self.asr.folder.name}

    async def transcribe(self, samples: np.ndarray, lang: str) -> Transcription | WorkerFailure:
        try:
            return await asyncio.to_thread(self.asr.transcribe, samples, lang)
        except VoxlineError as exc:  # ASRError, or ModelError when Whisper cannot load
            return WorkerFailure(ASRError.code, exc.message)


def _consume_exception(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()
