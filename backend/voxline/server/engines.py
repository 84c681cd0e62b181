"""The composition root: the models, grammar, scheduler, metrics and tracing that all sessions of a server share.

`Engines.load` builds them in this process; `voxline.ray.load_engines` builds the same bundle with stand-ins for
models that run as Ray Serve deployments. A Session sees no difference.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from voxline.config import Settings
from voxline.intents import Grammar
from voxline.llm import LLM
from voxline.scheduler import Scheduler, SchedulerConfig, TurnScheduler
from voxline.server.intent_classifier import classifier_for
from voxline.server.metrics import ServerMetrics
from voxline.server.resolver import IntentResolver
from voxline.server_asr import ServerASR
from voxline.telemetry import Telemetry
from voxline.tts import Synthesizer, load_synthesizer

PHRASE_CACHE_ENTRIES = 256
"""Synthesized audio kept for fixed phrases (command confirmations, apologies): they repeat all day, and a refusal
under overload must not cost a synthesis."""


@dataclass
class Engines:
    """The models a server loads once and all its sessions share."""

    settings: Settings
    grammar: Grammar
    resolver: IntentResolver
    llm: LLM
    tts: Synthesizer
    asr: ServerASR
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    telemetry: Telemetry = field(default_factory=Telemetry)
    scheduler: Scheduler | None = None
    """Every LLM request goes through it; a `TurnScheduler` built from `settings` when not given."""
    phrases: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)
    """Synthesized fixed phrases, least recently used first (see `PHRASE_CACHE_ENTRIES`)."""

    def speak_phrase(self, text: str) -> np.ndarray:
        """`tts.synthesize(text)`, remembered: for phrases that repeat (confirmations, apologies). Thread-safe
        enough: two threads may synthesize the same phrase once each; the dict operations are atomic."""
        samples = self.phrases.get(text)
        if samples is None:
            samples = self.tts.synthesize(text)
            self.phrases[text] = samples
            while len(self.phrases) > PHRASE_CACHE_ENTRIES:
                self.phrases.popitem(last=False)
        return samples

    def __post_init__(self) -> None:
        if self.scheduler is None:
            self.scheduler = TurnScheduler(
                self.llm.generate, SchedulerConfig.from_settings(self.settings),
                on_batch=lambda b: self.metrics.observe_batch(b.lane, b.size, b.seconds),
                prompt_tokens=self.llm.prompt_tokens)

    @classmethod
    def load(cls, settings: Settings, model_dir: Callable[[str], object],
             on_loaded: Callable[[str], None] = lambda name: None, *,
             metrics: ServerMetrics | None = None, telemetry: Telemetry | None = None) -> Engines:
        """Load the LLM and TTS now (warmed up), the server ASR lazily; `on_loaded(name)` after each model."""
        grammar = settings.grammar()
        llm = LLM(model_dir(settings.llm_model), threads=settings.llm_thread_count(),
                  parallel=settings.llm_parallel_count())
        llm.warm_up()
        on_loaded(settings.llm_model)
        tts = load_synthesizer(settings.tts_engine, model_dir(settings.tts_model))
        if settings.tts_engine == "hibari":
            on_loaded(settings.tts_model)
        asr = ServerASR(model_dir(settings.server_asr_model), on_loaded=lambda: on_loaded(settings.server_asr_model))
        engines = cls(settings, grammar, IntentResolver(grammar), llm, tts, asr,
                      metrics or ServerMetrics(), telemetry or Telemetry())
        # The intent classifier's static prompt and neighbour index warm up in the background from now, rather
        # than in the first turn the grammar misses.
        classifier_for(engines)
        return engines
