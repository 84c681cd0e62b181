"""The front side: the Session's scheduler, TTS and ASR as calls to the deployments, and the engines built on them.

A replica lost before it produced anything the user could have seen is retried once; after that, or when it hangs
(`STREAM_STALL_S`), the turn ends with the model's error code and the apology, and the session goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voxline import paths
from voxline.config import Settings
from voxline.errors import ASRError, LLMError, Overloaded, TTSError, TurnError, VoxlineError
from voxline.llm import GenerationRequest, GenerationResult
from voxline.ray.apps import ASR_APP, LLM_APP, TTS_APP
from voxline.ray.cluster import APP_READY_TIMEOUT_S, RayCluster
from voxline.ray.replicas import ReplyEnd, WorkerFailure
from voxline.ray.spec import WorkerSpec
from voxline.scheduler import SchedulerConfig, Ticket, TurnScheduler
from voxline.server_asr import Transcription

log = logging.getLogger(__name__)

STREAM_STALL_S = 30.0
"""A reply whose next piece has not come for this long is given up (`llm_failed`): covers a replica that hangs
without dying, and a restart that takes longer than a user would wait."""
TTS_TIMEOUT_S = 30.0
"""One clause's synthesis (espeak-ng's own limit is the same)."""
ASR_TIMEOUT_S = 60.0
"""One utterance's re-recognition, including Whisper's first load in a fresh replica."""
RETRIES_BEFORE_OUTPUT = 1
"""Retries of a call whose replica was lost before it produced anything the user could have seen."""


def _replica_lost() -> tuple[type[BaseException], ...]:
    """Errors that mean the replica (or its node) went away, not that the model failed."""
    import ray.exceptions as rex
    from ray.serve.exceptions import ReplicaUnavailableError

    return (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError,
            ReplicaUnavailableError)


def _ray_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex
    from ray.serve.exceptions import RayServeException

    return (rex.RayError, RayServeException)


class RayTurnScheduler:
    """The `Scheduler` protocol over the LLM deployment: `submit` streams the reply from a replica.

    A ticket's `future` gets the `GenerationResult` (or the `LLMError` / `Overloaded`) and its `request.on_text`
    every delta, as with the embedded scheduler. Its lane is computed here from the same `SchedulerConfig` the
    replicas use (so `depth` is per lane), and its `batch_size`, `dispatched_at` and final lane come from the replica
    at the end. `dispatched_at` is on this process's clock: the end of the reply minus the generation time the
    replica reports, so the network hop to the replica counts as queueing.

    The streams run on one event loop thread of their own, so `submit` and `withdraw` work from any thread.
    """

    def __init__(self, handle: Any, config: SchedulerConfig, *, clock: Callable[[], float] = time.perf_counter,
                 on_overloaded: Callable[[], None] = lambda: None, on_close: Callable[[], None] = lambda: None,
                 stall_s: float = STREAM_STALL_S, retries: int = RETRIES_BEFORE_OUTPUT) -> None:
        self.config = config
        self._handle = handle.options(stream=True)
        self._clock = clock
        self._on_overloaded = on_overloaded
        self._on_close = on_close
        self._stall_s = stall_s
        self._retries = retries
        self._lock = threading.Lock()
        self._waiting: dict[Ticket, str] = {}
        """Submitted tickets that have no token yet, and the lane each was counted in."""
        self._streaming: set[Ticket] = set()
        self._closed = False
        self._seq = itertools.count()
        self._tasks: dict[Ticket, asyncio.Task] = {}
        """The stream of each ticket; only touched on the loop thread."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="voxline-ray-front", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> dict[str, int]:
        """Requests per lane that have no token yet: on their way to a replica, or waiting in its lanes."""
        with self._lock:
            counts = {lane.name: 0 for lane in self.config.lanes}
            for name in self._waiting.values():
                counts[name] = counts.get(name, 0) + 1
            return counts

    @property
    def running(self) -> int:
        """Replies streaming now."""
        return len(self._streaming)

    def submit(self, request: GenerationRequest, *, confidence: float | None, tier: int,
               session_id: str = "", speculative: bool = False) -> Ticket:
        """Send one reply to the LLM deployment; never blocks. `confidence` None means a typed turn.
        `speculative` (the user may still be speaking): the replica's lowest lane until `confirm`."""
        with self._lock:
            if self._closed:
                raise Overloaded("the server is shutting down; please reconnect in a moment",
                                 TurnScheduler.RETRY_MAX_MS)
            certain = 1.0 if confidence is None else confidence
            lane = self.config.lane_for(certain, tier, speculative)
            ticket = Ticket(request, certain, tier, lane, self._clock(), session_id, next(self._seq),
                            speculative=speculative)
            self._waiting[ticket] = lane.name
        self._loop.call_soon_threadsafe(self._start, ticket, confidence)
        return ticket

    def confirm(self, ticket: Ticket) -> None:
        """A speculative reply's turn was confirmed. It is already on its way to a replica, whose queue orders
        by the lane it was sent with: only the local record changes (the lane counted in `depth`)."""
        with self._lock:
            ticket.speculative = False
            if ticket in self._waiting:
                ticket.lane = self.config.lane_for(ticket.confidence, ticket.tier)
                self._waiting[ticket] = ticket.lane.name

    def withdraw(self, ticket: Ticket) -> None:
        """The turn was interrupted (or is over): cancel its stream, which stops the replica's request too."""
        ticket.request.cancel.set()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing streams any more
            self._loop.call_soon_threadsafe(self._cancel, ticket)

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, let the streaming ones finish (up to `timeout`), then stop and release Ray."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = [t.future for t in (*self._waiting, *self._streaming)]
        concurrent.futures.wait(pending, timeout)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._on_close()

    def _start(self, ticket: Ticket, confidence: float | None) -> None:
        if ticket.request.cancel.is_set():  # withdrawn before its stream began
            self._forget(ticket)
            return
        task = self._loop.create_task(self._serve(ticket, confidence))
        self._tasks[ticket] = task
        task.add_done_callback(lambda _: self._forget(ticket))

    def _cancel(self, ticket: Ticket) -> None:
        task = self._tasks.get(ticket)
        if task is not None:
            task.cancel()

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget(self, ticket: Ticket) -> None:
        self._tasks.pop(ticket, None)
        with self._lock:
            self._waiting.pop(ticket, None)
            self._streaming.discard(ticket)
        # A stream withdrawn before it began has settled nothing itself.
        _settle(ticket.future, GenerationResult("", 0, None, 0.0, "cancelled"))

    def _started(self, ticket: Ticket) -> None:
        with self._lock:
            if self._waiting.pop(ticket, None) is not None:
                self._streaming.add(ticket)

    async def _serve(self, ticket: Ticket, confidence: float | None) -> None:
        text: list[str] = []
        outcome: GenerationResult | BaseException
        try:
            outcome = await self._stream(ticket, confidence, text)
        except asyncio.CancelledError:
            outcome = GenerationResult("".join(text), 0, None, 0.0, "cancelled")
        except Overloaded as exc:
            self._on_overloaded()
            outcome = exc
        except VoxlineError as exc:
            outcome = exc
        except Exception as exc:  # a bug here must still end the turn
            log.exception("LLM stream of session %s failed", ticket.session_id)
            outcome = LLMError(f"the LLM stream failed: {exc}")
        _settle(ticket.future, outcome)

    async def _stream(self, ticket: Ticket, confidence: float | None, text: list[str]) -> GenerationResult:
        from ray.serve.exceptions import BackPressureError

        request = ticket.request
        messages = [(m.role, m.content) for m in request.messages]
        for attempt in itertools.count():
            response = self._handle.generate.remote(
                messages, confidence=confidence, tier=ticket.tier, max_tokens=request.max_tokens,
                max_seconds=request.max_seconds, session_id=ticket.session_id)
            try:
                async for item in _items(response, self._stall_s):
                    if isinstance(item, str):
                        self._started(ticket)
                        text.append(item)
                        request.on_text(item)
                    elif isinstance(item, WorkerFailure):
                        raise item.error()
                    else:
                        return self._ended(ticket, item)
                raise LLMError("the LLM worker ended the reply without its result")
            except asyncio.CancelledError:
                response.cancel()
                raise
            except BackPressureError as exc:
                raise Overloaded(f"every LLM replica is busy ({exc.num_queued_requests} replies waiting); please "
                                 "try again in a moment", TurnScheduler.RETRY_MIN_MS) from None
            except _replica_lost() as exc:
                if text or attempt >= self._retries or request.cancel.is_set():
                    raise LLMError(f"the LLM replica was lost mid-reply ({type(exc).__name__}); please ask "
                                   "again") from exc
                log.warning("LLM replica lost before the first token of session %s (%s); retrying",
                            ticket.session_id, type(exc).__name__)
            except _ray_errors() as exc:
                raise LLMError(f"the LLM deployment failed: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _ended(self, ticket: Ticket, end: ReplyEnd) -> GenerationResult:
        lane = next((lane for lane in self.config.lanes if lane.name == end.lane), None)
        if lane is not None:
            ticket.lane = lane
        if end.batch_size is not None:
            ticket.batch_size = end.batch_size
            ticket.dispatched_at = max(ticket.queued_at, self._clock() - end.result.elapsed_s)
        return end.result


async def _items(response: Any, stall_s: float):
    """The stream's items; `LLMError` when none comes for `stall_s`."""
    while True:
        try:
            item = await asyncio.wait_for(response.__anext__(), stall_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            response.cancel()
            raise LLMError(f"the LLM replica sent nothing for {stall_s:g} s; please ask again") from None
        yield item


def _settle(future: concurrent.futures.Future, outcome: GenerationResult | BaseException) -> None:
    """Give the ticket its outcome unless it has one (a stream and a withdrawal may both try)."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass


@dataclass(frozen=True)
class RemoteLLM:
    """What the front needs to know of the LLM: its name (the model runs in the replicas)."""

    name: str


class RemoteTTS:
    """The `Synthesizer` interface over the TTS deployment (called from a worker thread, as in the embedded case)."""

    def __init__(self, handle: Any, name: str, sample_rate: int, *, timeout_s: float = TTS_TIMEOUT_S,
                 retries: int = RETRIES_BEFORE_OUTPUT) -> None:
        self._handle, self.name, self.sample_rate = handle, name, sample_rate
        self._timeout_s, self._retries = timeout_s, retries

    def synthesize(self, text: str) -> np.ndarray:
        return _call(self._handle.synthesize, (text,), self._timeout_s, self._retries, TTSError, "TTS")


class RemoteASR:
    """The `ServerASR` interface over the re-recognition deployment."""

    def __init__(self, handle: Any, folder_name: str, *, timeout_s: float = ASR_TIMEOUT_S,
                 retries: int = RETRIES_BEFORE_OUTPUT) -> None:
        self._handle = handle
        self.folder = Path(folder_name)
        """Only its name is used on the front (the model lives in the replicas)."""
        self._timeout_s, self._retries = timeout_s, retries

    def transcribe(self, samples: np.ndarray, lang: str) -> Transcription:
        return _call(self._handle.transcribe, (samples, lang), self._timeout_s, self._retries, ASRError, "ASR")


def _call(method: Any, args: tuple, timeout_s: float, retries: int, error: type[TurnError], what: str) -> Any:
    """One unary call to a deployment from a worker thread, retried when its replica is lost."""
    from ray.serve.exceptions import BackPressureError

    for attempt in itertools.count():
        response = method.remote(*args)
        try:
            out = response.result(timeout_s=timeout_s)
        except TimeoutError:
            response.cancel()
            raise error(f"the {what} replica did not answer within {timeout_s:g} s") from None
        except BackPressureError:
            raise Overloaded(f"every {what} replica is busy; please try again in a moment",
                             TurnScheduler.RETRY_MIN_MS) from None
        except _replica_lost() as exc:
            if attempt >= retries:
                raise error(f"the {what} replica was lost ({type(exc).__name__})") from exc
            log.warning("%s replica lost (%s); retrying", what, type(exc).__name__)
            continue
        except _ray_errors() as exc:
            raise error(f"the {what} deployment failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(out, WorkerFailure):
            raise out.error()
        return out
    raise AssertionError("unreachable")


def load_engines(settings: Settings, model_dir: Callable[[str], object] = paths.model_dir,
                 on_loaded: Callable[[str], None] = lambda name: None, *, metrics=None, telemetry=None):
    """`Engines.load` for `--engine ray`: connect to (or start) Ray, deploy or attach to the three applications,
    and return Engines whose models are stand-ins for them. `model_dir` is unused: replicas find their models in
    their own cache."""
    from voxline.server.engines import Engines
    from voxline.server.metrics import ServerMetrics
    from voxline.server.resolver import IntentResolver
    from voxline.telemetry import Telemetry

    for spec in (settings.ray_llm, settings.ray_tts, settings.ray_asr):
        WorkerSpec.parse(spec)  # a bad spec is refused before Ray starts
    cluster = RayCluster.connect(settings)
    try:
        handles = cluster.handles(settings)
        llm = handles[LLM_APP].describe.remote().result(timeout_s=APP_READY_TIMEOUT_S)
        on_loaded(settings.llm_model)
        tts = handles[TTS_APP].describe.remote().result(timeout_s=APP_READY_TIMEOUT_S)
        if tts["name"] == "hibari":
            on_loaded(settings.tts_model)
        asr = handles[ASR_APP].describe.remote().result(timeout_s=APP_READY_TIMEOUT_S)
    except BaseException:
        cluster.release()
        raise
    metrics = metrics or ServerMetrics()
    grammar = settings.grammar()
    scheduler = RayTurnScheduler(handles[LLM_APP], SchedulerConfig.from_settings(settings),
                                 on_overloaded=lambda: metrics.reject("overloaded"), on_close=cluster.release)
    return Engines(settings, grammar, IntentResolver(grammar), RemoteLLM(llm["name"]),
                   RemoteTTS(handles[TTS_APP], tts["name"], tts["sample_rate"]),
                   RemoteASR(handles[ASR_APP], asr["folder"]), metrics, telemetry or Telemetry(),
                   scheduler=scheduler)
