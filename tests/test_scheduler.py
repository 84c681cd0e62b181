"""TurnScheduler: priority and lane rules, work-conserving batch formation under replayed arrivals, admission, and
streaming of every request inside a real SmolLM2 batch."""

from __future__ import annotations

import inspect
import os
import threading
import time

import pytest

from voxline.config import Settings
from voxline.dialog import Message
from voxline.errors import LLMError, Overloaded
from voxline.llm import LLM, GenerationRequest, GenerationResult
from voxline.ray import RayTurnScheduler
from voxline.scheduler import BatchPlanner, Lane, Scheduler, SchedulerConfig, TurnScheduler

SMOLLM = "smollm2-135m-instruct-ct2"
CONFIG = SchedulerConfig()


def request(text: str = "Hi") -> GenerationRequest:
    return GenerationRequest([Message("user", text)], max_tokens=8)


# ---------------------------------------------------------------------------------------------- priority, lanes


def test_priority_follows_the_design_formula():
    assert CONFIG.priority(1.0, 5) == pytest.approx(0.85)
    assert CONFIG.priority(0.9, 3) == pytest.approx(0.6 * 0.9 + 0.25 * 0.5)
    assert CONFIG.priority(0.9, 1) == pytest.approx(0.54)
    # No penalty inside the 200 ms grace, then 0.001 per ms beyond it.
    assert CONFIG.priority(0.9, 3, waited_ms=200) == pytest.approx(CONFIG.priority(0.9, 3))
    assert CONFIG.priority(0.9, 3, waited_ms=450) == pytest.approx(CONFIG.priority(0.9, 3) - 0.25)


@pytest.mark.parametrize(("confidence", "tier", "lane"), [
    (1.0, 5, "high"),          # 0.85: the top lane needs full confidence and the top tier
    (0.95, 5, "normal"),       # 0.82
    (1.0, 1, "normal"),        # 0.60 exactly
    (0.99, 1, "bulk"),         # 0.594
    (0.5, 5, "bulk"),          # 0.55
    (0.39, 5, "low_confidence"),  # below 0.4 goes to the low-latency lane whatever the tier
    (0.0, 1, "low_confidence"),
])
def test_lanes_by_priority_and_confidence(confidence, tier, lane):
    assert CONFIG.lane_for(confidence, tier).name == lane


def test_lane_sizes_and_waits_are_the_design_defaults_and_come_from_settings():
    lanes = {lane.name: (lane.max_batch, lane.max_wait_ms) for lane in CONFIG.lanes}
    assert lanes == {"high": (4, 80.0), "normal": (8, 150.0), "bulk": (16, 300.0), "low_confidence": (2, 20.0)}
    assert SchedulerConfig.from_settings(Settings(llm_parallel_batches=1)) == CONFIG
    assert SchedulerConfig.from_settings(Settings(llm_threads=1, llm_parallel_batches=0)).parallel_batches == \
        max(1, (os.cpu_count() or 2))
    tuned = SchedulerConfig.from_settings(Settings(scheduler_normal_max_batch=5, scheduler_queue_limit=3))
    assert tuned.normal == Lane("normal", 5, 150.0) and tuned.queue_limit == 3
    fifo = SchedulerConfig.from_settings(Settings(batching=False))
    assert [lane.name for lane in fifo.lanes] == ["fifo"] and fifo.max_batch == 1


# ---------------------------------------------------------------------------------------------- batch formation


def replay(arrivals, *, batch_s: float, slots: int = 1, config: SchedulerConfig = CONFIG):
    """Replay `(time, confidence, tier)` arrivals against `slots` model slots whose batches each take `batch_s`
    seconds: at every arrival and every batch end, each free slot asks the planner for a batch. Returns one
    `(start, lane, size)` per batch run."""
    planner, pending = BatchPlanner(config), sorted(arrivals)
    free_at = [0.0] * slots
    events = sorted({at for at, _, _ in pending})
    started = []
    while events:
        now = events.pop(0)
        while pending and pending[0][0] <= now:
            at, confidence, tier = pending.pop(0)
            planner.add(request(), confidence=confidence, tier=tier, now=at)
        for slot in range(slots):
            if free_at[slot] <= now:
                batch = planner.take(now)
                if batch:
                    started.append((round(now, 3), batch[0].lane.name, len(batch)))
                    free_at[slot] = now + batch_s
                    events = sorted({*events, free_at[slot]})
    assert len(planner) == 0
    return started


@pytest.mark.parametrize(("confidence", "tier", "lane"), [
    (1.0, 5, "high"), (0.9, 3, "normal"), (0.5, 2, "bulk"), (0.2, 1, "low_confidence")])
def test_an_idle_model_starts_a_lone_request_at_once(confidence, tier, lane):
    # Whatever its lane's window (20-300 ms), an idle model does not wait for company that may never come.
    assert replay([(0.5, confidence, tier)], batch_s=0.4) == [(0.5, lane, 1)]
    planner = BatchPlanner(CONFIG)
    ticket = planner.add(request(), confidence=confidence, tier=tier, now=2.0)
    assert planner.take(2.0) == [ticket]
    # And one turn after another (a single session) never waits either.
    assert replay([(0.0, confidence, tier), (1.0, confidence, tier), (2.0, confidence, tier)], batch_s=0.6) == \
        [(0.0, lane, 1), (1.0, lane, 1), (2.0, lane, 1)]


def test_requests_that_arrive_while_the_model_is_busy_are_batched_by_lane_when_it_frees():
    arrivals = [(0.000, 0.9, 3),                    # normal: finds the model idle, runs at once, alone
                (0.010, 1.0, 5), (0.020, 0.9, 3), (0.030, 0.3, 3), (0.040, 0.9, 3),
                (0.050, 1.0, 5), (0.060, 0.5, 2), (0.070, 0.2, 1)]
    # Busy until 0.5 s: by then every lane's oldest is past its window, so the lanes leave earliest deadline
    # first, each as one batch: low_confidence (0.030 + 20 ms), high (0.010 + 80), normal (0.020 + 150), bulk.
    assert replay(arrivals, batch_s=0.5) == [(0.0, "normal", 1), (0.5, "low_confidence", 2), (1.0, "high", 2),
                                             (1.5, "normal", 2), (2.0, "bulk", 1)]


def test_when_the_model_frees_before_any_window_ends_it_still_runs_the_earliest_deadline_at_once():
    # Freed at 50 ms: high (deadline 90 ms) is neither full nor due, yet it runs then, and normal right after.
    arrivals = [(0.0, 0.9, 3), (0.010, 1.0, 5), (0.020, 0.9, 3), (0.030, 0.9, 3)]
    assert replay(arrivals, batch_s=0.05) == [(0.0, "normal", 1), (0.05, "high", 1), (0.1, "normal", 2)]


def test_a_full_lane_goes_before_a_lane_whose_window_is_not_over():
    # low_confidence has the earlier deadline (60 ms) but is neither full nor due at 50 ms; normal is full.
    arrivals = [(0.0, 1.0, 5), *((0.001 * i, 0.9, 3) for i in range(1, 9)), (0.040, 0.2, 1)]
    assert replay(arrivals, batch_s=0.05) == [(0.0, "high", 1), (0.05, "normal", 8), (0.1, "low_confidence", 1)]


def test_parallel_batches_a_second_free_slot_also_starts_at_once():
    arrivals = [(0.0, 0.9, 3), (0.1, 0.9, 3), (0.2, 0.9, 3), (0.3, 0.9, 3), (0.35, 1.0, 5)]
    # The second request finds slot 2 free and starts alone; the next three queue until slot 1 frees at 0.5,
    # when the two normal ones (deadline 0.35) leave together before the high one (deadline 0.43), which takes
    # slot 2 the moment it frees at 0.6.
    assert replay(arrivals, batch_s=0.5, slots=2, config=SchedulerConfig(parallel_batches=2)) == \
        [(0.0, "normal", 1), (0.1, "normal", 1), (0.5, "normal", 2), (0.6, "high", 1)]


def test_the_scheduler_runs_a_lone_request_without_waiting_out_its_window():
    # A frozen clock: waiting for the (10 s) window would never end, and the ticket would never run.
    ran = threading.Event()

    def runner(requests):
        ran.set()
        return [GenerationResult("ok", 1, 0.0, 0.0, "end") for _ in requests]

    scheduler = TurnScheduler(runner, SchedulerConfig(normal=Lane("normal", 8, 10_000.0)), clock=lambda: 42.0)
    try:
        ticket = scheduler.submit(request(), confidence=0.9, tier=3)
        assert ticket.future.result(5).text == "ok" and ran.is_set()
        assert ticket.queue_ms == 0.0 and ticket.batch_size == 1
    finally:
        scheduler.close(5)


def test_a_full_lane_runs_at_once():
    planner = BatchPlanner(CONFIG)
    for i in range(9):
        planner.add(request(), confidence=0.9, tier=3, now=i * 0.001)
    batch = planner.take(0.009)
    assert len(batch) == 8 and len(planner) == 1
    assert all(t.lane.name == "normal" for t in batch)


def test_inside_a_batch_the_oldest_always_runs_and_the_rest_go_by_priority():
    planner = BatchPlanner(SchedulerConfig(high=Lane("high", 2, 80.0), high_min_priority=0.5,
                                           low_confidence=None))
    oldest = planner.add(request(), confidence=0.9, tier=1, now=0.0)
    weak = planner.add(request(), confidence=0.9, tier=1, now=0.001)
    strong = planner.add(request(), confidence=0.9, tier=5, now=0.002)
    batch = planner.take(0.003)  # full (3 ≥ 2): the oldest, then the best of the rest
    assert batch == [oldest, strong]
    assert planner.take(1.0) == [weak]


def test_waiting_penalty_reorders_but_never_starves():
    # A new strong request beats an old one inside the batch, but once the old one is the oldest it must run.
    planner = BatchPlanner(SchedulerConfig(high=Lane("high", 2, 80.0), high_min_priority=0.0,
                                           low_confidence=None))
    first = planner.add(request(), confidence=0.9, tier=3, now=0.0)
    stale = planner.add(request(), confidence=0.9, tier=3, now=0.010)
    fresh = planner.add(request(), confidence=0.9, tier=3, now=0.500)
    batch = planner.take(0.600)  # stale has waited 590 ms: penalised below fresh
    assert batch == [first, fresh]
    assert planner.take(0.700) == [stale]


def test_cancelled_requests_leave_the_queue_with_a_cancelled_result():
    planner = BatchPlanner(CONFIG)
    gone = planner.add(request(), confidence=0.9, tier=3, now=0.0)
    kept = planner.add(request(), confidence=0.9, tier=3, now=0.0)
    gone.request.cancel.set()
    assert planner.take(1.0) == [kept]
    assert gone.future.result().stop_reason == "cancelled"


def test_fifo_runs_one_request_at_a_time_in_arrival_order():
    planner = BatchPlanner(SchedulerConfig.one_at_a_time())
    tickets = [planner.add(request(), confidence=c, tier=t, now=i * 0.01)
               for i, (c, t) in enumerate([(0.2, 1), (1.0, 5), (0.5, 3)])]
    assert [planner.take(1.0) for _ in range(3)] == [[t] for t in tickets]


# ---------------------------------------------------------------------------------------------- admission


def test_a_full_queue_refuses_with_a_retry_hint_and_never_blocks():
    started = threading.Event()
    release = threading.Event()

    def slow_runner(requests):
        started.set()
        release.wait(10)
        return [GenerationResult("ok", 1, 0.0, 0.0, "end") for _ in requests]

    scheduler = TurnScheduler(slow_runner, SchedulerConfig(queue_limit=2, low_confidence=None,
                                                           high=Lane("high", 1, 0.0), high_min_priority=0.0))
    try:
        running = scheduler.submit(request(), confidence=1.0, tier=5)
        assert started.wait(5)
        queued = [scheduler.submit(request(), confidence=1.0, tier=5) for _ in range(2)]
        t0 = time.perf_counter()
        with pytest.raises(Overloaded) as refused:
            scheduler.submit(request(), confidence=1.0, tier=5)
        assert time.perf_counter() - t0 < 0.1
        assert refused.value.code == "overloaded"
        assert TurnScheduler.RETRY_MIN_MS <= refused.value.retry_after_ms <= TurnScheduler.RETRY_MAX_MS
        assert "try again" in refused.value.message
        release.set()
        for ticket in [running, *queued]:
            assert ticket.future.result(5).text == "ok"
    finally:
        release.set()
        scheduler.close(5)


def test_a_speculative_request_waits_in_the_lowest_lane_until_confirmed_and_keeps_its_arrival():
    planner = BatchPlanner(CONFIG)
    early = planner.add(request(), confidence=1.0, tier=5, now=0.0, speculative=True)
    confirmed = planner.add(request(), confidence=1.0, tier=5, now=0.1)
    assert early.lane.name == "bulk" and confirmed.lane.name == "high"
    # While it is speculative, a confirmed request of the same priority goes first.
    assert planner.take(0.2) == [confirmed]
    later = planner.add(request(), confidence=1.0, tier=5, now=0.3)
    planner.confirm(early)
    assert early.lane.name == "high" and not early.speculative and early.queued_at == 0.0
    # Confirmed, it leads its new lane by arrival: it is the oldest there.
    assert planner.take(0.4) == [early, later]


def test_an_idle_model_starts_a_speculative_request_at_once():
    planner = BatchPlanner(CONFIG)
    early = planner.add(request(), confidence=0.9, tier=3, now=0.0, speculative=True)
    assert planner.take(0.0) == [early]


def test_speculative_requests_give_way_under_load():
    config = SchedulerConfig(queue_limit=4)
    planner = BatchPlanner(config)
    first = planner.add(request(), confidence=0.9, tier=3, now=0.0, speculative=True)
    second = planner.add(request(), confidence=0.9, tier=3, now=0.1, speculative=True)
    # Half the queue is taken: no more speculation, confirmed requests still come in.
    with pytest.raises(Overloaded, match="not starting early"):
        planner.add(request(), confidence=0.9, tier=3, now=0.2, speculative=True)
    confirmed = [planner.add(request(), confidence=0.9, tier=3, now=0.3 + i / 10) for i in range(2)]
    # The queue is full: a confirmed request takes the place of the newest speculative one, which fails.
    newcomer = planner.add(request(), confidence=0.9, tier=3, now=0.6)
    with pytest.raises(Overloaded, match="gave way"):
        second.future.result(0)
    assert not first.future.done() and len(planner) == 4
    # With no speculative request left to drop, a full queue refuses as always.
    planner.confirm(first)
    with pytest.raises(Overloaded, match="try again"):
        planner.add(request(), confidence=0.9, tier=3, now=0.7)
    assert {id(t) for t in planner.take(1.0)} <= {id(t) for t in [first, *confirmed, newcomer]}


def test_fifo_ignores_speculation():
    fifo = SchedulerConfig.one_at_a_time()
    assert fifo.lane_for(0.9, 3, speculative=True) is fifo.high


def test_a_failing_batch_fails_its_requests_and_the_scheduler_goes_on():
    calls = []

    def runner(requests):
        calls.append(len(requests))
        if len(calls) == 1:
            raise LLMError("boom")
        return [GenerationResult("fine", 1, 0.0, 0.0, "end") for _ in requests]

    scheduler = TurnScheduler(runner, SchedulerConfig.one_at_a_time())
    try:
        first = scheduler.submit(request(), confidence=None, tier=3)
        with pytest.raises(LLMError):
            first.future.result(5)
        assert scheduler.submit(request(), confidence=None, tier=3).future.result(5).text == "fine"
    finally:
        scheduler.close(5)


# ---------------------------------------------------------------------------------------------- real model


@pytest.fixture(scope="module")
def smollm(model_dir):
    return LLM(model_dir(SMOLLM))


class HeldModel:
    """The real model behind a runner whose placeholder request holds it busy until `release`, so the requests
    submitted meanwhile queue and leave together when it frees, as they do under load."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.placeholder = request("placeholder")
        self.busy = threading.Event()
        self.release = threading.Event()

    def __call__(self, requests):
        if requests[0] is self.placeholder:
            self.busy.set()
            self.release.wait(30)
            return [GenerationResult("", 0, None, 0.0, "end") for _ in requests]
        return self.llm.generate(requests)

    def hold(self, scheduler: TurnScheduler) -> None:
        scheduler.submit(self.placeholder, confidence=1.0, tier=5)  # the high lane, alone: the model is idle
        assert self.busy.wait(10)


def test_every_request_in_a_real_batch_streams_its_own_tokens(smollm):
    batches = []
    model = HeldModel(smollm)
    scheduler = TurnScheduler(model, SchedulerConfig(normal=Lane("normal", 4, 500.0)),
                              on_batch=lambda record: batches.append(record))
    questions = ["What is the capital of France?", "Name a colour.", "Count to three.", "Say hello."]
    streamed: dict[int, list[tuple[float, str]]] = {i: [] for i in range(len(questions))}
    tickets = []
    try:
        model.hold(scheduler)
        for i, question in enumerate(questions):
            req = GenerationRequest([Message("user", question)], max_tokens=24,
                                    on_text=lambda d, i=i: streamed[i].append((time.perf_counter(), d)))
            tickets.append(scheduler.submit(req, confidence=0.9, tier=3, session_id=f"s{i}"))
        model.release.set()
        results = [t.future.result(60) for t in tickets]
    finally:
        model.release.set()
        scheduler.close(10)
    assert [(b.lane, b.size) for b in batches] == [("high", 1), ("normal", 4)]
    assert {t.batch_size for t in tickets} == {4}
    for i, result in enumerate(results):
        deltas = streamed[i]
        assert len(deltas) >= 2, f"request {i} did not stream"
        assert "".join(d for _, d in deltas) == result.text
        # Streamed as generated: its first piece came well before its batch finished.
        assert deltas[0][0] < deltas[-1][0]
    # Each request got its own reply, the same as it gets alone (greedy decoding).
    alone = smollm.complete([Message("user", questions[0])], max_tokens=24)
    assert results[0].text == alone.text
    assert "Paris" in results[0].text
    # The texts interleaved in time: request 1's first delta came before request 0's last.
    assert streamed[1][0][0] < streamed[0][-1][0]


def test_a_request_cancelled_inside_a_real_batch_stops_alone(smollm):
    model = HeldModel(smollm)
    scheduler = TurnScheduler(model, SchedulerConfig(normal=Lane("normal", 2, 500.0)))
    cancel_after_two = GenerationRequest([Message("user", "Tell me a long story about a dragon.")], max_tokens=64)
    pieces = []

    def on_text(delta: str) -> None:
        pieces.append(delta)
        if len(pieces) == 2:
            cancel_after_two.cancel.set()

    cancel_after_two.on_text = on_text
    other = GenerationRequest([Message("user", "Tell me a long story about a cat.")], max_tokens=40)
    try:
        model.hold(scheduler)
        a = scheduler.submit(cancel_after_two, confidence=0.9, tier=3)
        b = scheduler.submit(other, confidence=0.9, tier=3)
        model.release.set()
        ra, rb = a.future.result(60), b.future.result(60)
    finally:
        model.release.set()
        scheduler.close(10)
    assert a.batch_size == b.batch_size == 2
    assert ra.stop_reason == "cancelled" and ra.tokens <= 4
    assert rb.stop_reason in ("length", "end", "repetition") and rb.tokens > ra.tokens  # not the cancel


def test_a_batch_prefills_at_most_its_token_budget_but_the_oldest_always_runs():
    planner = BatchPlanner(SchedulerConfig(max_batch_prompt_tokens=1000))
    long_ = [planner.add(request(), confidence=0.9, tier=3, now=0.0, prompt_tokens=600) for _ in range(3)]
    short = planner.add(request(), confidence=0.9, tier=3, now=0.0, prompt_tokens=300)
    # 600 + 300 fit; a second 600 would not: it waits for the next batch instead of delaying everyone's first token.
    assert planner.take(1.0) == [long_[0], short]
    assert planner.take(1.0) == [long_[1]]
    huge = BatchPlanner(SchedulerConfig(max_batch_prompt_tokens=100))
    alone = huge.add(request(), confidence=0.9, tier=3, now=0.0, prompt_tokens=5000)
    assert huge.take(1.0) == [alone]


def test_the_scheduler_measures_each_prompt(smollm):
    scheduler = TurnScheduler(smollm.generate, SchedulerConfig.one_at_a_time(), prompt_tokens=smollm.prompt_tokens)
    try:
        ticket = scheduler.submit(request("What is the capital of France?"), confidence=None, tier=3)
        ticket.future.result(60)
    finally:
        scheduler.close(10)
    assert ticket.prompt_tokens == len(smollm.prompt(ticket.request.messages)[1]) > 5


def test_parallel_batches_run_at_once_and_one_at_a_time_never_does():
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def runner(requests):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1
        return [GenerationResult("ok", 1, 0.0, 0.0, "end") for _ in requests]

    for config, expected in ((SchedulerConfig(parallel_batches=2, high=Lane("high", 1, 0.0),
                                              high_min_priority=0.0, low_confidence=None), 2),
                             (SchedulerConfig.one_at_a_time(), 1)):
        running[0] = peak[0] = 0
        release.clear()
        scheduler = TurnScheduler(runner, config)
        try:
            tickets = [scheduler.submit(request(), confidence=1.0, tier=5) for _ in range(3)]
            time.sleep(0.3)
            assert scheduler.running == expected
            release.set()
            assert all(t.future.result(5).text == "ok" for t in tickets)
        finally:
            release.set()
            scheduler.close(5)
        assert peak[0] == expected


def test_a_request_that_would_wait_too_long_is_refused_at_once():
    release = threading.Event()

    def runner(requests):
        release.wait(10)
        return [GenerationResult("ok", 1, 0.0, 0.0, "end") for _ in requests]

    # One request per batch, one batch at a time, batches assumed to take 1 s until measured: with two requests
    # ahead the wait is about 2 s, over the 1.5 s bound.
    scheduler = TurnScheduler(runner, SchedulerConfig(high=Lane("high", 1, 0.0), normal=Lane("normal", 1, 0.0),
                                                      bulk=Lane("bulk", 1, 0.0), low_confidence=None,
                                                      max_queue_wait_s=1.5))
    try:
        admitted = [scheduler.submit(request(), confidence=1.0, tier=5) for _ in range(2)]
        with pytest.raises(Overloaded) as refused:
            scheduler.submit(request(), confidence=1.0, tier=5)
        assert "would wait about 2 s" in refused.value.message
        assert refused.value.retry_after_ms >= 2000
        release.set()
        assert all(t.future.result(5).text == "ok" for t in admitted)
    finally:
        release.set()
        scheduler.close(5)


# ------------------------------------------------------------------------------------------------ the protocol

SCHEDULER_MEMBERS = sorted({*Scheduler.__annotations__, *(n for n in vars(Scheduler) if not n.startswith("_"))})


def test_the_scheduler_protocol_names_what_a_session_uses():
    assert SCHEDULER_MEMBERS == ["close", "config", "confirm", "depth", "running", "submit", "withdraw"]


@pytest.mark.parametrize("implementation", [TurnScheduler, RayTurnScheduler], ids=lambda cls: cls.__name__)
def test_both_schedulers_conform_to_the_scheduler_protocol(implementation):
    for name in SCHEDULER_MEMBERS:
        declared = getattr(Scheduler, name, None)
        if name == "config":
            assert "self.config = " in inspect.getsource(implementation.__init__)
        elif isinstance(declared, property):
            assert isinstance(getattr(implementation, name), property), name
        else:
            assert inspect.signature(getattr(implementation, name)) == inspect.signature(declared), name


def test_a_turn_scheduler_is_a_scheduler_at_run_time():
    scheduler = TurnScheduler(lambda batch: [GenerationResult("", 0, None, 0.0, "end") for _ in batch])
    assert isinstance(scheduler, Scheduler)
    scheduler.close()
