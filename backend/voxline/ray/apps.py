"""The three Serve applications (LLM, TTS, re-recognition), and the builders a Serve config names in `import_path`
(`voxline.ray:llm_app`, `tts_app`, `asr_app`: deploy/kuberay/rayservice.yaml)."""

from __future__ import annotations

import math
from typing import Any

from voxline.config import Settings
from voxline.ray.replicas import ASRWorker, LLMWorker, TTSWorker, worker_settings
from voxline.ray.spec import WorkerSpec
from voxline.scheduler import SchedulerConfig

LLM_APP = "voxline-llm"
TTS_APP = "voxline-tts"
ASR_APP = "voxline-asr"
"""Serve application names: a front attaches to applications of these names that already run (a RayService)."""
ONGOING_HEADROOM = 2
"""TTS and ASR replicas accept this many times their autoscaling target before Serve queues at the router."""


def llm_application(settings: Settings):
    """The LLM deployment as a Serve application."""
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_llm)
    config = SchedulerConfig.from_settings(settings)
    options = spec.deployment_options(config.queue_limit + config.max_batch)
    options["max_queued_requests"] = config.queue_limit  # past it the router refuses: `overloaded`, not a hang
    return serve.deployment(LLMWorker, name="LLMWorker", **options).bind(worker_settings(settings), spec.threads)


def tts_application(settings: Settings):
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_tts)
    options = spec.deployment_options(math.ceil(spec.target_ongoing * ONGOING_HEADROOM))
    return serve.deployment(TTSWorker, name="TTSWorker", **options).bind(worker_settings(settings))


def asr_application(settings: Settings):
    from ray import serve

    spec = WorkerSpec.parse(settings.ray_asr)
    options = spec.deployment_options(math.ceil(spec.target_ongoing * ONGOING_HEADROOM))
    return serve.deployment(ASRWorker, name="ASRWorker", **options).bind(worker_settings(settings), spec.threads)


def _settings_from_args(args: dict[str, Any] | None) -> Settings:
    """Settings for an application built from a Serve config: `VOXLINE_*` variables, then the config's `args`
    (field names, e.g. `llm_model: qwen2.5-0.5b-instruct-ct2`)."""
    import os

    environ = dict(os.environ)
    environ.update({f"VOXLINE_{key.upper()}": str(value) for key, value in (args or {}).items()})
    return Settings.from_env(environ)


def llm_app(args: dict[str, Any] | None = None):
    """Builder for a Serve config's `import_path: voxline.ray:llm_app` (deploy/kuberay/rayservice.yaml)."""
    return llm_application(_settings_from_args(args))


def tts_app(args: dict[str, Any] | None = None):
    return tts_application(_settings_from_args(args))


def asr_app(args: dict[str, Any] | None = None):
    return asr_application(_settings_from_args(args))
