"""Prometheus metrics of one server process, and the slow-turn report.

Every turn ends in `ServerMetrics.observe_turn` with its stage durations (timings.py: `STAGES`, the same cut as
the `timings` message): the path to the first reply audio is cut into uplink (the turn's audio arriving), asr
(server re-recognition), intent, classify (the LLM asked whether a grammar miss is still an intent), queue (waiting
in the scheduler), prefill (batch start → first token), decode (first token → first clause), tts (first clause →
its audio) and transport (audio queued → sent on the socket). Those are the histograms a dashboard needs to see
which stage moves under load. A turn is observed when it ends (pipeline.py), whether or not its `timings` message
ever reaches the client.

The slow-turn report: a turn slower than the P99 of the recent turns of its kind is logged with the stage that
took most of its time, so a latency spike in production says where it came from without a trace backend.

With `voxline serve --workers N` each process has its own registry: scrape every worker (or put them behind
per-process ports); the numbers are per process by design, like the sessions.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from voxline.stats import percentile

if TYPE_CHECKING:
    from voxline.scheduler import Scheduler

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
                     5.0, 8.0, 13.0, 20.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
SLOW_WINDOW = 1000
"""Turns of one kind kept for the P99 that defines a slow turn."""
SLOW_MIN_TURNS = 100
"""No slow-turn report before this many turns of a kind: a P99 of fewer is noise."""
SLOW_RECOMPUTE_EVERY = 50
"""The P99 is recomputed every this many turns (sorting a thousand values per turn would cost more than a turn)."""


def dominant_stage(stages: Mapping[str, float]) -> str | None:
    """The stage that took the longest, or None without stages."""
    return max(stages, key=stages.__getitem__) if stages else None


class SlowTurns:
    """Keeps recent latencies per turn kind and says whether a new one is above their P99."""

    def __init__(self, window: int = SLOW_WINDOW, min_turns: int = SLOW_MIN_TURNS,
                 recompute_every: int = SLOW_RECOMPUTE_EVERY) -> None:
        self.window, self.min_turns, self.recompute_every = window, min_turns, recompute_every
        self._recent: dict[str, deque[float]] = {}
        self._p99: dict[str, float | None] = {}
        self._since: dict[str, int] = {}

    def is_slow(self, kind: str, latency_ms: float) -> float | None:
        """Record a turn; returns the P99 it exceeds when it is slow, else None."""
        recent = self._recent.setdefault(kind, deque(maxlen=self.window))
        p99 = self._p99.get(kind)
        recent.append(latency_ms)
        self._since[kind] = self._since.get(kind, 0) + 1
        if len(recent) >= self.min_turns and (p99 is None or self._since[kind] >= self.recompute_every):
            self._p99[kind] = percentile(list(recent), 0.99)
            self._since[kind] = 0
        return p99 if p99 is not None and latency_ms > p99 else None


class ServerMetrics:
    """The instruments, in their own registry (each app has one, so tests can build many apps)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.stage_seconds = Histogram(
            "voxline_turn_stage_seconds", "Time of each stage on the path to the first reply audio",
            ["stage"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.first_audio_seconds = Histogram(
            "voxline_turn_first_audio_seconds", "Turn start to the first reply audio frame sent",
            ["kind"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.turn_seconds = Histogram(
            "voxline_turn_seconds", "Turn start to reply.done", ["kind"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.turns = Counter("voxline_turns", "Turns finished", ["kind", "outcome"], registry=r)
        self.batch_size = Histogram("voxline_llm_batch_size", "Requests per LLM batch", ["lane"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("voxline_llm_batch_seconds", "Run time of one LLM batch", ["lane"],
                                       buckets=LATENCY_BUCKETS_S, registry=r)
        self.rejections = Counter("voxline_rejections", "Turns or connections refused", ["reason"], registry=r)
        self.slow_turns = Counter("voxline_slow_turns", "Turns above the recent P99, by dominating stage",
                                  ["stage"], registry=r)
        self.speculative_turns = Counter(
            "voxline_speculative_turns", "Speculative turns (started at a pause), by how they ended",
            ["outcome"], registry=r)
        self.speculative_wasted_tokens = Counter(
            "voxline_speculative_wasted_tokens", "LLM tokens generated for speculative turns that were cancelled",
            registry=r)
        self.chats_beside_classifier = Counter(
            "voxline_chats_beside_classifier",
            "Chats started beside the intent classifier, by its verdict: kept (no command) or discarded (a command)",
            ["outcome"], registry=r)
        self.chat_discarded_tokens = Counter(
            "voxline_chat_discarded_tokens", "LLM tokens of chats discarded because the classifier found a command",
            registry=r)
        self._slow = SlowTurns()
        self._children: dict[tuple, object] = {}

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A gauge read at scrape time (uptime, active sessions)."""
        Gauge(name, documentation, registry=self.registry).set_function(read)

    def watch_scheduler(self, scheduler: Scheduler) -> None:
        """Queue depth per lane and the running batch, read from the scheduler at scrape time."""
        depth = Gauge("voxline_llm_queue_depth", "LLM requests waiting in the scheduler", ["lane"],
                      registry=self.registry)
        for lane in scheduler.config.lanes:
            depth.labels(lane.name).set_function(lambda name=lane.name: scheduler.depth.get(name, 0))
        self.gauge("voxline_llm_running", "LLM requests in the batch running now", lambda: scheduler.running)

    def _child(self, metric, *labels: str):
        """`metric.labels(*labels)`, remembered: prometheus_client's lookup costs more than the observation."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe_batch(self, lane: str, size: int, seconds: float) -> None:
        self.batch_size.labels(lane).observe(size)
        self.batch_seconds.labels(lane).observe(seconds)

    def reject(self, reason: str) -> None:
        self.rejections.labels(reason).inc()

    def speculation(self, outcome: str, wasted_tokens: int = 0) -> None:
        """A speculative turn was confirmed or cancelled (`wasted_tokens`: what a cancelled one had generated)."""
        self._child(self.speculative_turns, outcome).inc()
        if wasted_tokens:
            self.speculative_wasted_tokens.inc(wasted_tokens)

    def chat_beside_classifier(self, outcome: str, wasted_tokens: int = 0) -> None:
        """A chat started beside the classifier was kept or discarded (`wasted_tokens`: what a discarded one had
        generated)."""
        self._child(self.chats_beside_classifier, outcome).inc()
        if wasted_tokens:
            self.chat_discarded_tokens.inc(wasted_tokens)

    def observe_turn(self, *, kind: str, outcome: str, total_ms: float, first_audio_ms: float | None,
                     stages: Mapping[str, float], describe: Callable[[], str]) -> None:
        """Record one finished turn; `describe()` names it in the slow-turn log line."""
        self._child(self.turns, kind, outcome).inc()
        self._child(self.turn_seconds, kind).observe(total_ms / 1000.0)
        for stage, ms in stages.items():
            self._child(self.stage_seconds, stage).observe(ms / 1000.0)
        if first_audio_ms is not None:
            self._child(self.first_audio_seconds, kind).observe(first_audio_ms / 1000.0)
        if outcome != "ok":
            return
        latency = first_audio_ms if first_audio_ms is not None else total_ms
        p99 = self._slow.is_slow(kind, latency)
        if p99 is not None and (stage := dominant_stage(stages)) is not None:
            self.slow_turns.labels(stage).inc()
            log.warning("slow turn %s: %.0f ms (recent P99 %.0f ms), mostly %s %.0f ms; stages %s",
                        describe(), latency, p99, stage, stages[stage],
                        " ".join(f"{k}={v:.0f}" for k, v in stages.items()))
