"""TurnScheduler: priority and lane rules, batch formation under simulated arrivals, admission, and streaming of
every request inside a real SmolLM2 batch."""

from __future__ import annotations

import os
import threading
import time

import pytest

from voxline.config import Settings
from voxline.dialog import Message
from voxline.errors import LLMError, Overloaded
from voxline.llm import LLM, GenerationRequest, GenerationResult
from voxline.scheduler import BatchPlanner, Lane, SchedulerConfig, TurnScheduler

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


def test_a_lane_waits_for_its_batch_to_fill_up_to_its_limit():
    planner = BatchPlanner(CONFIG)
    planner.add(request(), confidence=0.9, tier=3, now=0.0)        # normal: up to 8, 150 ms
    assert planner.take(0.100) == []                               # not full, not yet waited 150 ms
    planner.add(request(), confidence=0.9, tier=3, now=0.120)
    assert planner.next_deadline() == pytest.approx(0.150)
    batch = planner.take(0.150)                                    # the oldest has waited its 150 ms
    assert len(batch) == 2 and len(planner) == 0


def test_a_full_lane_runs_at_once():
    planner = BatchPlanner(CONFIG)
    for i in range(9):
        planner.add(request(), confidence=0.9, tier=3, now=i * 0.001)
    batch = planner.take(0.009)
    assert len(batch) == 8 and len(planner) == 1
    assert all(t.lane.name == "normal" for t in batch)


def test_simulated_arrivals_form_batches_per_lane_earliest_deadline_first():
    planner = BatchPlanner(CONFIG)
    arrivals = [(0.000, 0.9, 3), (0.010, 1.0, 5), (0.020, 0.3, 3), (0.030, 0.9, 3), (0.040, 0.5, 2),
                (0.050, 1.0, 5), (0.060, 0.2, 1)]
    batches, now, step = [], 0.0, 0.005
    pending = list(arrivals)
    while now < 1.0:
        while pending and pending[0][0] <= now:
            at, confidence, tier = pending.pop(0)
            planner.add(request(), confidence=confidence, tier=tier, now=at)
        batch = planner.take(now)
        if batch:
            batches.append((round(now, 3), batch[0].lane.name, len(batch)))
        now += step
    # Each lane leaves when its oldest has waited its limit (none fills up): low_confidence 20 ms after 0.020
    # and again after 0.060, high 80 ms after 0.010 with both top-tier requests, normal 150 ms after 0.000 with
    # both 0.665-priority requests, bulk (0.3625) 300 ms after 0.040.
    assert batches == [(0.04, "low_confidence", 1), (0.08, "low_confidence", 1), (0.09, "high", 2),
                       (0.15, "normal", 2), (0.34, "bulk", 1)]


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


def test_every_request_in_a_real_batch_streams_its_own_tokens(smollm):
    batches = []
    scheduler = TurnScheduler(smollm.generate, SchedulerConfig(normal=Lane("normal", 4, 500.0)),
                              on_batch=lambda record: batches.append(record))
    questions = ["What is the capital of France?", "Name a colour.", "Count to three.", "Say hello."]
    streamed: dict[int, list[tuple[float, str]]] = {i: [] for i in range(len(questions))}
    tickets = []
    try:
        for i, question in enumerate(questions):
            req = GenerationRequest([Message("user", question)], max_tokens=24,
                                    on_text=lambda d, i=i: streamed[i].append((time.perf_counter(), d)))
            tickets.append(scheduler.submit(req, confidence=0.9, tier=3, session_id=f"s{i}"))
        results = [t.future.result(60) for t in tickets]
    finally:
        scheduler.close(10)
    assert [(b.lane, b.size) for b in batches] == [("normal", 4)]
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
    scheduler = TurnScheduler(smollm.generate, SchedulerConfig(normal=Lane("normal", 2, 500.0)))
    cancel_after_two = GenerationRequest([Message("user", "Tell me a long story about a dragon.")], max_tokens=64)
    pieces = []

    def on_text(delta: str) -> None:
        pieces.append(delta)
        if len(pieces) == 2:
            cancel_after_two.cancel.set()

    cancel_after_two.on_text = on_text
    other = GenerationRequest([Message("user", "Tell me a long story about a cat.")], max_tokens=40)
    try:
        a = scheduler.submit(cancel_after_two, confidence=0.9, tier=3)
        b = scheduler.submit(other, confidence=0.9, tier=3)
        ra, rb = a.future.result(60), b.future.result(60)
    finally:
        scheduler.close(10)
    assert ra.stop_reason == "cancelled" and ra.tokens <= 4
    assert rb.stop_reason in ("length", "end") and rb.tokens > ra.tokens


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
