"""The TurnScheduler: a priority queue with dynamic batching in front of the LLM.

CTranslate2 runs a batch of prompts in one `generate_batch` call for little more than the cost of one on a CPU (the
weights are read once per step for the whole batch), so under load the server answers several sessions per call.
Every request in a batch still streams its own tokens to its own session (`LLM.generate` calls each request's
callback as its tokens arrive); batching changes when a reply starts, never how it is delivered.

Priority of a request, after the design this project comes from:

    priority = 0.6 · ASR confidence + 0.25 · (tier − 1) / 4 − 0.001 · max(0, waited ms − 200)

A typed turn has confidence 1. At admission (waited 0) the priority picks a lane; each lane has a batch size and
a window (how soon it goes before the other lanes once the model frees):

    lane             admitted when               batch up to   window
    high             priority ≥ 0.85             4             80 ms
    normal           0.6 ≤ priority < 0.85       8             150 ms
    bulk             priority < 0.6              16            300 ms
    low_confidence   ASR confidence < 0.4        2             20 ms

(low confidence first: such a turn was probably misheard, and answering it fast lets the user correct it fast.)

Dispatch is work-conserving, as in Triton's dynamic batcher (no queue delay by default): a free model never waits
for company. A request that finds a model slot free starts at once, alone; the lanes, the priorities and the lane
windows only decide how the requests that queued while every slot was busy are grouped when one frees. Then a
lane is ready when it holds a full batch or its oldest request has waited its lane's window, and the free slot
runs the ready lane with the earliest deadline (oldest arrival + window), or, when none is ready yet, the waiting
lane with the earliest deadline: the window orders lanes against each other, it never holds an idle model back,
and no lane starves another. (Measured before this rule, at one session an idle model waited out its lane's
80-300 ms window for company that never came: P95 first audio 1.59x that of batching off.) Inside a lane the
batch is the oldest request plus the others by current priority, so the waiting penalty reorders requests without
ever holding back the one that has waited longest, and a session has at most one request queued (one turn at a
time), which keeps the queue fair between sessions. All numbers are `SchedulerConfig` fields, set from
`Settings.scheduler_*`.

Two limits shape a batch besides its lane. Its prompts may hold at most `max_batch_prompt_tokens` tokens to prefill
(the oldest request runs regardless): on a CPU the prefill is compute-bound and every request of a batch waits for
all of them before its first token, so long histories make smaller batches. And `parallel_batches` batches may run
at once (CTranslate2's `inter_threads`): a running batch cannot take in a newcomer; a second free slot starts it at
once.

Admission is bounded: past `queue_limit` waiting requests, `submit` raises `Overloaded` with a retry hint
estimated from recent batch times; the client gets `error {code: "overloaded", retry_after_ms}`, never a hang.

`BatchPlanner` holds the decisions and takes the clock as an argument, so tests replay arrivals exactly (its
`take(now)` means "a model slot is free at `now`"); `TurnScheduler` adds one thread per slot that runs the planned
batches on the model and asks for the next batch the moment its slot frees.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from voxline.config import Settings
from voxline.errors import LLMError, Overloaded
from voxline.llm import GenerationRequest, GenerationResult

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[GenerationRequest]], list[GenerationResult]]
"""Runs one batch on the model and returns one result per request, in order (`LLM.generate`)."""


@dataclass(frozen=True)
class Lane:
    """One class of service: how many requests may share a batch, and the window after which its oldest waiting
    request goes before other lanes' when a model slot frees (an idle slot never waits it out)."""

    name: str
    max_batch: int
    max_wait_ms: float

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0:
            raise ValueError(f"lane {self.name}: max_batch must be ≥ 1 and max_wait_ms ≥ 0")


@dataclass(frozen=True)
class SchedulerConfig:
    """Priority weights, lanes and admission limit; the defaults are the design's."""

    confidence_weight: float = 0.6
    tier_weight: float = 0.25
    wait_penalty_per_ms: float = 0.001
    wait_grace_ms: float = 200.0
    high_min_priority: float = 0.85
    normal_min_priority: float = 0.6
    low_confidence_below: float = 0.4
    high: Lane = Lane("high", 4, 80.0)
    normal: Lane = Lane("normal", 8, 150.0)
    bulk: Lane = Lane("bulk", 16, 300.0)
    low_confidence: Lane | None = Lane("low_confidence", 2, 20.0)
    queue_limit: int = 64
    """Requests waiting (not yet running) beyond which new ones are refused with `Overloaded`."""
    max_queue_wait_s: float = 20.0
    """A request whose estimated wait for the model is longer is refused with `Overloaded` at once (0: no bound):
    saying "busy, try again" beats half a minute of silence. The estimate is batches ahead × recent batch time."""
    max_batch_prompt_tokens: int = 2048
    """Prompt tokens one batch may prefill (the oldest request always runs, whatever its length). On a CPU the
    prefill is compute-bound and every request in a batch waits for all of them before its first token: eight
    sessions with long histories (~530 tokens each) took SmolLM2 10 s to a first token as one batch, 1 s alone."""
    fifo: bool = False
    """One lane of one request at a time, in arrival order: the baseline without batching."""
    parallel_batches: int = 1
    """Batches that may run on the model at once (each on its own CPU thread; the `LLM` must be loaded with as
    many `parallel` replicas). Always 1 for `one_at_a_time`, whose point is one request at a time."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SchedulerConfig:
        """The server's `Settings.scheduler_*` values (`batching` off gives `one_at_a_time`)."""
        s = settings
        if not s.batching:
            return cls.one_at_a_time(s.scheduler_queue_limit)
        return cls(
            confidence_weight=s.scheduler_confidence_weight,
            tier_weight=s.scheduler_tier_weight,
            wait_penalty_per_ms=s.scheduler_wait_penalty_per_ms,
            wait_grace_ms=s.scheduler_wait_grace_ms,
            high_min_priority=s.scheduler_high_min_priority,
            normal_min_priority=s.scheduler_normal_min_priority,
            low_confidence_below=s.scheduler_low_confidence_below,
            high=Lane("high", s.scheduler_high_max_batch, s.scheduler_high_max_wait_ms),
            normal=Lane("normal", s.scheduler_normal_max_batch, s.scheduler_normal_max_wait_ms),
            bulk=Lane("bulk", s.scheduler_bulk_max_batch, s.scheduler_bulk_max_wait_ms),
            low_confidence=Lane("low_confidence", s.scheduler_low_confidence_max_batch,
                                s.scheduler_low_confidence_max_wait_ms),
            queue_limit=s.scheduler_queue_limit,
            max_batch_prompt_tokens=s.scheduler_max_batch_prompt_tokens,
            max_queue_wait_s=s.scheduler_max_queue_wait_s,
            parallel_batches=s.llm_parallel_count(),
        )

    @classmethod
    def one_at_a_time(cls, queue_limit: int = 64) -> SchedulerConfig:
        """No batching and no priorities: each request runs alone, first come first served."""
        single = Lane("fifo", 1, 0.0)
        return cls(high=single, normal=single, bulk=single, low_confidence=None, queue_limit=queue_limit, fifo=True)

    @property
    def lanes(self) -> tuple[Lane, ...]:
        if self.fifo:
            return (self.high,)
        return tuple(lane for lane in (self.high, self.low_confidence, self.normal, self.bulk) if lane is not None)

    @property
    def max_batch(self) -> int:
        return max(lane.max_batch for lane in self.lanes)

    def priority(self, confidence: float, tier: int, waited_ms: float = 0.0) -> float:
        """The design's priority; `tier` is 1 (lowest) to 5 (highest)."""
        tier_share = (min(max(tier, 1), 5) - 1) / 4
        penalty = self.wait_penalty_per_ms * max(0.0, waited_ms - self.wait_grace_ms)
        return self.confidence_weight * confidence + self.tier_weight * tier_share - penalty

    def lane_for(self, confidence: float, tier: int, speculative: bool = False) -> Lane:
        """The lane a new request joins; a speculative one (the user may still be speaking) the lowest."""
        if self.fifo:
            return self.high
        if speculative:
            return self.bulk
        if self.low_confidence is not None and confidence < self.low_confidence_below:
            return self.low_confidence
        priority = self.priority(confidence, tier)
        if priority >= self.high_min_priority:
            return self.high
        if priority >= self.normal_min_priority:
            return self.normal
        return self.bulk


@dataclass(eq=False)
class Ticket:
    """One queued request and, once it has run, where its time went (perf_counter seconds)."""

    request: GenerationRequest
    confidence: float
    tier: int
    lane: Lane
    queued_at: float
    session_id: str = ""
    seq: int = 0
    prompt_tokens: int = 0
    dispatched_at: float | None = None
    batch_size: int | None = None
    speculative: bool = False
    """Started before the user's turn was over (see `BatchPlanner.add`), until `confirm`."""
    future: Future[GenerationResult] = field(default_factory=Future)

    def waited_ms(self, now: float) -> float:
        return (now - self.queued_at) * 1000.0

    def deadline(self) -> float:
        """Arrival plus the lane's window: the order between lanes when a slot frees (earliest first)."""
        return self.queued_at + self.lane.max_wait_ms / 1000.0

    @property
    def queue_ms(self) -> float | None:
        return None if self.dispatched_at is None else (self.dispatched_at - self.queued_at) * 1000.0


class BatchPlanner:
    """The queue and the batching decisions, without threads or a model: every method takes `now`."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._lanes: dict[str, list[Ticket]] = {lane.name: [] for lane in config.lanes}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._lanes.values())

    def depth(self) -> dict[str, int]:
        """Waiting requests per lane."""
        return {name: len(queue) for name, queue in self._lanes.items()}

    def add(self, request: GenerationRequest, *, confidence: float, tier: int, now: float,
            session_id: str = "", prompt_tokens: int = 0, speculative: bool = False) -> Ticket:
        """Queue a request in its lane; raises `Overloaded` when `queue_limit` requests are already waiting.

        Speculative requests (the user may still be speaking; most are confirmed, some are cancelled) give way
        under load: one is refused once half the queue is taken, and a confirmed request that finds the queue
        full takes the place of the newest speculative one waiting, which fails with `Overloaded`.
        """
        waiting = len(self)
        if speculative and waiting >= max(1, self.config.queue_limit // 2):
            raise Overloaded(f"the server is busy ({waiting} replies waiting): not starting early", 0)
        if waiting >= self.config.queue_limit and not self._evict_speculative():
            raise Overloaded(
                f"the server is busy ({waiting} replies waiting); please try again in a moment", 0)
        lane = self.config.lane_for(confidence, tier, speculative)
        ticket = Ticket(request, confidence, tier, lane, now, session_id, next(self._seq), prompt_tokens,
                        speculative=speculative)
        self._lanes[lane.name].append(ticket)
        return ticket

    def confirm(self, ticket: Ticket) -> None:
        """The speculative request's turn is the user's: it waits (if it still does) in the lane its confidence
        gives, with the time it has already waited."""
        if not ticket.speculative:
            return
        ticket.speculative = False
        lane = self.config.lane_for(ticket.confidence, ticket.tier)
        if lane is not ticket.lane and self.remove(ticket):
            ticket.lane = lane
            queue = self._lanes[lane.name]
            queue.append(ticket)
            queue.sort(key=lambda t: t.seq)  # arrival order inside a lane: its oldest leads the batch

    def _evict_speculative(self) -> bool:
        """Drop the newest waiting speculative request for a confirmed one; False when none waits."""
        waiting = [t for queue in self._lanes.values() for t in queue if t.speculative and not t.future.done()]
        if not waiting:
            return False
        victim = max(waiting, key=lambda t: t.seq)
        self.remove(victim)
        victim.future.set_exception(Overloaded("the server is busy: a started-early reply gave way to others", 0))
        return True

    def remove(self, ticket: Ticket) -> bool:
        """Take a ticket out of the queue (its turn was interrupted); False if it is not waiting any more."""
        queue = self._lanes[ticket.lane.name]
        if ticket in queue:
            queue.remove(ticket)
            return True
        return False

    def take(self, now: float) -> list[Ticket]:
        """The batch a model slot that is free at `now` runs, removed from the queue; empty only when nothing waits.

        Work-conserving: whatever waits, the slot runs something now. The lane is the ready one (full, or its
        oldest past its window) with the earliest deadline, else the waiting one with the earliest deadline.
        """
        self._drop_withdrawn()
        waiting = [name for name, queue in self._lanes.items() if queue]
        if not waiting:
            return []
        name = min(waiting, key=lambda lane_name: self._urgency(lane_name, now))
        queue, lane = self._lanes[name], self._lane(name)
        oldest, rest = queue[0], queue[1:]
        rest.sort(key=lambda t: (-self.config.priority(t.confidence, t.tier, t.waited_ms(now)), t.seq))
        batch, budget = [oldest], self.config.max_batch_prompt_tokens - oldest.prompt_tokens
        for ticket in rest:
            if len(batch) == lane.max_batch:
                break
            if ticket.prompt_tokens <= budget:
                batch.append(ticket)
                budget -= ticket.prompt_tokens
        chosen = set(map(id, batch))
        self._lanes[name] = [t for t in queue if id(t) not in chosen]
        return batch

    def _urgency(self, name: str, now: float) -> tuple[bool, float, int]:
        """Sort key of a waiting lane: ready lanes first, then earliest deadline, then arrival."""
        queue = self._lanes[name]
        head = queue[0]
        ready = len(queue) >= self._lane(name).max_batch or now >= head.deadline()
        return (not ready, head.deadline(), head.seq)

    def _lane(self, name: str) -> Lane:
        return next(lane for lane in self.config.lanes if lane.name == name)

    def _drop_withdrawn(self) -> None:
        for name, queue in self._lanes.items():
            if any(t.request.cancel.is_set() or t.future.done() for t in queue):
                for t in queue:
                    if t.request.cancel.is_set() and not t.future.done():
                        t.future.set_result(GenerationResult("", 0, None, 0.0, "cancelled"))
                self._lanes[name] = [t for t in queue if not t.future.done()]


@dataclass
class BatchRecord:
    """What one batch did, for metrics."""

    lane: str
    size: int
    seconds: float


@runtime_checkable
class Scheduler(Protocol):
    """What a Session asks of the scheduler in front of the LLM: `TurnScheduler` in this process, or
    `voxline.ray.RayTurnScheduler` in front of the LLM replicas. Every method is thread-safe and never blocks
    (but `close`)."""

    config: SchedulerConfig
    """The lanes and priorities (the Ray front uses the replicas' own, so `depth` is per lane)."""

    @property
    def depth(self) -> dict[str, int]:
        """Requests waiting for the model, per lane name."""

    @property
    def running(self) -> int:
        """Requests the model is generating now."""

    def submit(self, request: GenerationRequest, *, confidence: float | None, tier: int,
               session_id: str = "", speculative: bool = False) -> Ticket:
        """Queue one reply; its ticket's `future` gets the `GenerationResult` (or the `LLMError`), its
        `request.on_text` every delta. Raises `Overloaded` instead of queueing past the limit."""

    def confirm(self, ticket: Ticket) -> None:
        """A speculative request's turn was confirmed: it is a real turn from now on."""

    def withdraw(self, ticket: Ticket) -> None:
        """The turn is over or interrupted: stop its request (out of the queue, or at its next token)."""

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests and let those in flight finish, waiting up to `timeout`."""


class TurnScheduler:
    """Queue + planner + a thread per parallel batch (model slot) running batches on the model; a thread whose
    slot is free takes the next batch at once. Thread-safe; `submit` never blocks."""

    RETRY_MIN_MS = 250
    RETRY_MAX_MS = 10_000

    def __init__(self, runner: Runner, config: SchedulerConfig | None = None, *,
                 on_batch: Callable[[BatchRecord], None] = lambda record: None,
                 prompt_tokens: Callable[[GenerationRequest], int] = lambda request: 0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config or SchedulerConfig()
        self._runner = runner
        self._prompt_tokens = prompt_tokens
        self._on_batch = on_batch
        self._clock = clock
        self._planner = BatchPlanner(self.config)
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._running: dict[int, int] = {}
        """Requests in the batch each model thread is running."""
        self._batch_seconds = 1.0
        """Moving average of a batch's run time: the basis of the retry hint."""

    @property
    def depth(self) -> dict[str, int]:
        with self._wake:
            return self._planner.depth()

    @property
    def running(self) -> int:
        """Requests in the batches on the model right now."""
        with self._wake:
            return sum(self._running.values())

    def submit(self, request: GenerationRequest, *, confidence: float | None, tier: int,
               session_id: str = "", speculative: bool = False) -> Ticket:
        """Queue one reply; its `future` gets the `GenerationResult` (or the `LLMError`) when its batch is done.

        `confidence` None means a typed turn (certain). Raises `Overloaded` when the queue is full.
        `speculative`: the user may still be speaking (see `BatchPlanner.add`); `confirm` when the turn is theirs.
        """
        tokens = self._prompt_tokens(request)  # tokenizing, outside the lock
        with self._wake:
            if self._closed:
                raise Overloaded("the server is shutting down; please reconnect in a moment", self.RETRY_MAX_MS)
            wait_s = self._expected_wait_s()
            if self.config.max_queue_wait_s and wait_s > self.config.max_queue_wait_s:
                raise Overloaded(f"the server is busy (a reply would wait about {wait_s:.0f} s); "
                                 "please try again in a moment", self._retry_after_ms())
            try:
                ticket = self._planner.add(request, confidence=1.0 if confidence is None else confidence,
                                           tier=tier, now=self._clock(), session_id=session_id,
                                           prompt_tokens=tokens, speculative=speculative)
            except Overloaded as exc:
                raise Overloaded(exc.message, self._retry_after_ms()) from None
            self._ensure_thread()
            self._wake.notify()
            return ticket

    def confirm(self, ticket: Ticket) -> None:
        """A speculative request's turn was confirmed: it stops giving way (see `BatchPlanner.confirm`)."""
        with self._wake:
            self._planner.confirm(ticket)

    def withdraw(self, ticket: Ticket) -> None:
        """The turn was interrupted: drop its request if it has not started (a running one stops via `cancel`)."""
        ticket.request.cancel.set()
        with self._wake:
            if self._planner.remove(ticket) and not ticket.future.done():
                ticket.future.set_result(GenerationResult("", 0, None, 0.0, "cancelled"))

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, let the queued ones run, and stop the threads (waits up to `timeout`)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
            threads = list(self._threads)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))

    def _ensure_thread(self) -> None:
        if not self._threads:
            for i in range(self.config.parallel_batches):
                thread = threading.Thread(target=self._loop, name=f"voxline-scheduler-{i}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _expected_wait_s(self) -> float:
        """How long a new request would wait for the model: the batches ahead of it (waiting and running, in
        batches of the largest lane's size), run `parallel_batches` at a time, at the recent batch time."""
        ahead = len(self._planner) + sum(self._running.values())
        if not ahead:
            return 0.0
        batches = math.ceil(ahead / self.config.max_batch)
        return batches * self._batch_seconds / self.config.parallel_batches

    def _retry_after_ms(self) -> int:
        estimate = (self._expected_wait_s() + self._batch_seconds) * 1000.0
        return int(min(max(estimate, self.RETRY_MIN_MS), self.RETRY_MAX_MS))

    def _loop(self) -> None:
        while True:
            with self._wake:
                batch = self._next_batch_locked()
                if batch is None:
                    return
                self._running[threading.get_ident()] = len(batch)
            self._run(batch)
            with self._wake:
                self._running.pop(threading.get_ident(), None)

    def _next_batch_locked(self) -> list[Ticket] | None:
        """This thread's slot is free: the batch to run at once, waiting only while nothing is queued; None once
        closed and empty. Called with the condition held."""
        while True:
            batch = self._planner.take(self._clock())
            if batch:
                return batch
            if self._closed:
                return None
            self._wake.wait()  # `submit` and `close` notify

    def _run(self, batch: list[Ticket]) -> None:
        # A future cancelled since `take` (its turn's task was cancelled) is dropped; the rest can no longer be.
        batch = [t for t in batch if t.future.set_running_or_notify_cancel()]
        if not batch:
            return
        started = self._clock()
        for ticket in batch:
            ticket.dispatched_at = started
            ticket.batch_size = len(batch)
        try:
            results = self._runner([t.request for t in batch])
        except LLMError as exc:
            for ticket in batch:
                ticket.future.set_exception(exc)
            return
        except Exception as exc:  # a bug in a batch must not kill the thread every later turn depends on
            log.exception("LLM batch of %d failed", len(batch))
            for ticket in batch:
                ticket.future.set_exception(LLMError(f"the LLM failed: {exc}"))
            return
        finally:
            seconds = self._clock() - started
            self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * seconds
        for ticket, result in zip(batch, results):
            ticket.future.set_result(result)
        self._on_batch(BatchRecord(batch[0].lane.name, len(batch), seconds))
