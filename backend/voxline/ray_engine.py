"""Scale-out: the LLM, TTS and server re-recognition as Ray Serve deployments, behind the interfaces a Session uses.

`voxline serve --engine ray` keeps the Starlette front (WebSockets, protocol, grammar, clause splitting) in its own
process and runs the models as three Ray Serve applications, each with its own replicas, resources and autoscaling
(`Settings.ray_llm`, `ray_tts`, `ray_asr`). Without `--ray-address` a local Ray instance is started, so the same
command works on a laptop. Only this module imports Ray, and only when it is used (`pip install voxline[ray]`).

Where batching happens: inside each LLM replica. One CTranslate2 `generate_batch` call needs every prompt of the
batch in one process, so each `LLMWorker` runs its own `TurnScheduler` in front of its model. The front forwards
each request's ASR confidence and the user's tier, so the priority lanes mean what they mean in the embedded
server, per replica. With several replicas, Serve's router sends each request to the replica with fewer ongoing
requests (power of two choices) and every replica batches what it receives: a free model starts a request at once,
and what reaches it while the model is busy is batched by lane when it frees (work-conserving, see scheduler.py); a
replica accepts up to its scheduler's `queue_limit` plus one full batch, so Serve never holds back what could join.

Streaming: `LLMWorker.generate` is an async generator; the front reads it through `handle.options(stream=True)`
and hands each text delta to the turn as it arrives, so the first clause is spoken as early as in the embedded
server. A barge-in cancels the streaming response; the replica sees `asyncio.CancelledError` in the generator and
stops the request at its next token.

Failure: a replica lost mid-reply (killed, its node gone) ends the turn with `error {code: "llm_failed"}` and the
apology, and the session goes on; Serve starts a replacement. The reply is retried on another (or the restarted)
replica only when no token has reached the front yet: whatever the user was already sent cannot be taken back,
and a second answer glued onto half of the first would not make sense. TTS and re-recognition are retried once
the same way (a clause or an utterance is produced whole, so a retry can never repeat anything). A replica that
hangs without dying is cut off by `STREAM_STALL_S`, so no failure leaves a session waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from voxline import paths
from voxline.config import Settings
from voxline.dialog import Message
from voxline.errors import ASRError, LLMError, Overloaded, TTSError, TurnError, VoxlineError
from voxline.llm import GenerationRequest, GenerationResult
from voxline.scheduler import BatchRecord, SchedulerConfig, Ticket, TurnScheduler
from voxline.server_asr import Transcription

log = logging.getLogger(__name__)

LLM_APP = "voxline-llm"
TTS_APP = "voxline-tts"
ASR_APP = "voxline-asr"
"""Serve application names: a front attaches to applications of these names that already run (a RayService)."""
STREAM_STALL_S = 30.0
"""A reply whose next piece has not come for this long is given up (`llm_failed`): covers a replica that hangs
without dying, and a restart that takes longer than a user would wait."""
TTS_TIMEOUT_S = 30.0
"""One clause's synthesis (espeak-ng's own limit is the same)."""
ASR_TIMEOUT_S = 60.0
"""One utterance's re-recognition, including Whisper's first load in a fresh replica."""
RETRIES_BEFORE_OUTPUT = 1
"""Retries of a call whose replica was lost before it produced anything the user could have seen."""
APP_READY_TIMEOUT_S = 600.0
"""Deploying (or waiting for) the three applications: a GPU node may have to be provisioned first."""
REPLICA_LOGGING = {"enable_access_log": False}
"""Serve logs every call by default: with a TTS call per clause that is a log line per spoken phrase."""
ONGOING_HEADROOM = 2
"""TTS and ASR replicas accept this many times their autoscaling target before Serve queues at the router."""
LLM_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


# ------------------------------------------------------------------------------------------------ worker specs

@dataclass(frozen=True)
class WorkerSpec:
    """Replicas, resources and autoscaling of one deployment, parsed from a `Settings.ray_*` string."""

    min_replicas: int = 1
    max_replicas: int = 1
    """Above `min_replicas`, Serve autoscales between the two on ongoing requests per replica."""
    cpus: float = 1.0
    """Ray's logical CPUs per replica; the model's thread count too (rounded up)."""
    gpus: float = 0.0
    """GPUs per replica; fractions share a GPU between replicas."""
    target_ongoing: float = 8.0
    """Ongoing requests per replica the autoscaler aims at."""

    FIELDS = ("replicas", "cpus", "gpus", "target_ongoing")

    @classmethod
    def parse(cls, text: str) -> WorkerSpec:
        """`replicas=1-4 cpus=2 gpus=0.5 target_ongoing=8` (any order, spaces or commas); omitted keys keep the
        defaults. Raises `VoxlineError` naming the bad part."""
        values: dict[str, float | int] = {}
        for part in text.replace(",", " ").split():
            key, sep, raw = part.partition("=")
            if not sep or key not in cls.FIELDS:
                raise VoxlineError(f"bad Ray worker spec {text!r}: {part!r} is not one of "
                                   f"{', '.join(k + '=' for k in cls.FIELDS)}")
            try:
                if key == "replicas":
                    low, _, high = raw.partition("-")
                    values["min_replicas"], values["max_replicas"] = int(low), int(high or low)
                else:
                    values[key] = float(raw)
            except ValueError:
                raise VoxlineError(f"bad Ray worker spec {text!r}: {part!r} is not a number") from None
        spec = cls(**values)
        if not 0 <= spec.min_replicas <= spec.max_replicas or spec.max_replicas < 1:
            raise VoxlineError(f"bad Ray worker spec {text!r}: replicas must be N or MIN-MAX with 0 ≤ MIN ≤ MAX, "
                               "MAX ≥ 1")
        if spec.cpus < 0 or spec.gpus < 0 or spec.target_ongoing <= 0:
            raise VoxlineError(f"bad Ray worker spec {text!r}: cpus and gpus must be ≥ 0, target_ongoing > 0")
        return spec

    @property
    def threads(self) -> int:
        """Model threads: the CPUs Ray reserved for the replica (0 lets the runtime choose, with no CPU reserved)."""
        return math.ceil(self.cpus) if self.cpus > 0 else 0

    def deployment_options(self, max_ongoing_requests: int) -> dict[str, Any]:
        """`serve.deployment(...)` options."""
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.cpus, "num_gpus": self.gpus},
            "max_ongoing_requests": max_ongoing_requests,
        }
        if self.max_replicas > self.min_replicas:
            options["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                             "target_ongoing_requests": self.target_ongoing}
        else:
            options["num_replicas"] = self.min_replicas
        return options


# ------------------------------------------------------------------------------------------------ replica side

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


def _worker_settings(settings: Settings) -> Settings:
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


# ------------------------------------------------------------------------------------------------ applications

def llm_application(settings: Settings):
    """The LLM deployment as a Serve application."""
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_llm)
    config = SchedulerConfig.from_settings(settings)
    options = spec.deployment_options(config.queue_limit + config.max_batch)
    options["max_queued_requests"] = config.queue_limit  # past it the router refuses: `overloaded`, not a hang
    return serve.deployment(LLMWorker, name="LLMWorker", **options).bind(_worker_settings(settings), spec.threads)


def tts_application(settings: Settings):
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_tts)
    options = spec.deployment_options(math.ceil(spec.target_ongoing * ONGOING_HEADROOM))
    return serve.deployment(TTSWorker, name="TTSWorker", **options).bind(_worker_settings(settings))


def asr_application(settings: Settings):
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_asr)
    options = spec.deployment_options(math.ceil(spec.target_ongoing * ONGOING_HEADROOM))
    return serve.deployment(ASRWorker, name="ASRWorker", **options).bind(_worker_settings(settings), spec.threads)


def _settings_from_args(args: dict[str, Any] | None) -> Settings:
    """Settings for an application built from a Serve config: `VOXLINE_*` variables, then the config's `args`
    (field names, e.g. `llm_model: qwen2.5-0.5b-instruct-ct2`)."""
    import os

    environ = dict(os.environ)
    environ.update({f"VOXLINE_{key.upper()}": str(value) for key, value in (args or {}).items()})
    return Settings.from_env(environ)


def llm_app(args: dict[str, Any] | None = None):
    """Builder for a Serve config's `import_path: voxline.ray_engine:llm_app` (deploy/kuberay/rayservice.yaml)."""
    return llm_application(_settings_from_args(args))


def tts_app(args: dict[str, Any] | None = None):
    return tts_application(_settings_from_args(args))


def asr_app(args: dict[str, Any] | None = None):
    return asr_application(_settings_from_args(args))


# ------------------------------------------------------------------------------------------------ the cluster

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


@dataclass
class RayCluster:
    """The front's connection to Ray: started here (no address) or joined; deploys the applications it misses."""

    owns_ray: bool
    """This process started the local Ray instance, so it stops it when the front closes."""

    @classmethod
    def connect(cls, settings: Settings) -> RayCluster:
        import ray
        from ray import serve

        owns = False
        if not ray.is_initialized():
            if settings.ray_address:
                ray.init(address=settings.ray_address)
            else:
                ray.init(num_cpus=settings.ray_local_cpus or None, include_dashboard=False)
                owns = True
        # The front calls the deployments through handles: no HTTP proxy is needed (a RayService starts its own).
        serve.start(proxy_location="Disabled")
        return cls(owns)

    def handles(self, settings: Settings) -> dict[str, Any]:
        """Handles to the three applications, deploying those that do not run yet; waits until all run."""
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        builders = {LLM_APP: llm_application, TTS_APP: tts_application, ASR_APP: asr_application}
        running = serve.status().applications
        for name, build in builders.items():
            status = running.get(name)
            if status is None or status.status in (ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.DELETING):
                log.info("deploying Ray Serve application %s", name)
                serve.run(build(settings), name=name, route_prefix=None, logging_config=REPLICA_LOGGING)
            else:
                log.info("attaching to Ray Serve application %s (%s)", name, status.status)
        self._wait_running(list(builders))
        return {name: serve.get_app_handle(name) for name in builders}

    @staticmethod
    def _wait_running(names: list[str]) -> None:
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        deadline = time.monotonic() + APP_READY_TIMEOUT_S
        while True:
            apps = serve.status().applications
            pending = {n: apps[n].status if n in apps else "missing" for n in names
                       if n not in apps or apps[n].status != ApplicationStatus.RUNNING}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise VoxlineError(f"Ray Serve applications not running after {APP_READY_TIMEOUT_S:g} s: {pending}")
            time.sleep(0.5)

    def release(self) -> None:
        """Stop what this front started: the local Ray instance and its Serve applications; a shared cluster's
        applications stay for the other fronts."""
        if not self.owns_ray:
            return
        import ray
        from ray import serve

        try:
            serve.shutdown()
        finally:
            ray.shutdown()


# ------------------------------------------------------------------------------------------------ front side

class RayTurnScheduler:
    """The TurnScheduler's interface over the LLM deployment: `submit` streams the reply from a replica.

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
    from voxline.intents import builtin_grammar
    from voxline.server.metrics import ServerMetrics
    from voxline.server.resolver import IntentResolver
    from voxline.server.session import Engines
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
    grammar = builtin_grammar()
    scheduler = RayTurnScheduler(handles[LLM_APP], SchedulerConfig.from_settings(settings),
                                 on_overloaded=lambda: metrics.reject("overloaded"), on_close=cluster.release)
    return Engines(settings, grammar, IntentResolver(grammar), RemoteLLM(llm["name"]),
                   RemoteTTS(handles[TTS_APP], tts["name"], tts["sample_rate"]),
                   RemoteASR(handles[ASR_APP], asr["folder"]), metrics, telemetry or Telemetry(),
                   scheduler=scheduler)


__all__ = ["ASRWorker", "LLMWorker", "RayCluster", "RayTurnScheduler", "RemoteASR", "RemoteLLM",
           "RemoteTTS", "ReplyEnd", "TTSWorker", "WorkerFailure", "WorkerSpec", "load_engines"]
