"""Server settings: one frozen value with named defaults, overridable by `VOXLINE_*` variables and CLI flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_LLM_MODEL = "qwen2.5-0.5b-instruct-ct2"
DEFAULT_SERVER_ASR_MODEL = "whisper-base-ct2"
DEFAULT_TTS_MODEL = "hibari-heart"
DEFAULT_TTS_ENGINE = "hibari"
DEFAULT_ASR_CONFIDENCE_GATE = 0.6
DEFAULT_REPLY_MAX_TOKENS = 96
DEFAULT_REPLY_MAX_SECONDS = 12.0
DEFAULT_HISTORY_EXCHANGES = 6
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Settings:
    """Everything `voxline serve` can be told; each field maps to `VOXLINE_<FIELD>`."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    llm_model: str = DEFAULT_LLM_MODEL
    """Manifest name of the CTranslate2 LLM (`smollm2-135m-instruct-ct2` for fast tests)."""
    server_asr_model: str = DEFAULT_SERVER_ASR_MODEL
    tts_model: str = DEFAULT_TTS_MODEL
    tts_engine: str = DEFAULT_TTS_ENGINE
    """`hibari` (the model `tts_model`) or `espeak` (Debian's espeak-ng, robotic but always there)."""
    asr_confidence_gate: float = DEFAULT_ASR_CONFIDENCE_GATE
    """Below this browser confidence a turn's audio is re-recognised on the server (Whisper base)."""
    reply_max_tokens: int = DEFAULT_REPLY_MAX_TOKENS
    """Longest spoken reply, in LLM tokens (about 0.75 words each)."""
    reply_max_seconds: float = DEFAULT_REPLY_MAX_SECONDS
    """Wall-clock cap on one reply's generation."""
    history_exchanges: int = DEFAULT_HISTORY_EXCHANGES
    """User/assistant exchanges kept per session as LLM context; older ones are dropped first."""
    auth_token: str = field(default="", repr=False)
    """When set, `hello` must carry this token; empty means no authentication (local use)."""
    web_dir: Path = REPO_ROOT / "web"
    node_modules_dir: Path = REPO_ROOT / "node_modules"
    # Serving under load (see voxline/scheduler.py for what each number means).
    batching: bool = True
    """Dynamic batching with priority lanes; off = one reply at a time, first come first served."""
    default_user_tier: int = 3
    """Service tier (1-5) of a session whose site key does not give one."""
    trust_client_tier: bool = False
    """Take the tier from `hello.capabilities.tier` (a trusted client: the load generator, a host's own backend)."""
    scheduler_confidence_weight: float = 0.6
    scheduler_tier_weight: float = 0.25
    scheduler_wait_penalty_per_ms: float = 0.001
    scheduler_wait_grace_ms: float = 200.0
    scheduler_high_min_priority: float = 0.85
    scheduler_high_max_batch: int = 4
    scheduler_high_max_wait_ms: float = 80.0
    scheduler_normal_min_priority: float = 0.6
    scheduler_normal_max_batch: int = 8
    scheduler_normal_max_wait_ms: float = 150.0
    scheduler_bulk_max_batch: int = 16
    scheduler_bulk_max_wait_ms: float = 300.0
    scheduler_low_confidence_below: float = 0.4
    scheduler_low_confidence_max_batch: int = 2
    scheduler_low_confidence_max_wait_ms: float = 20.0
    scheduler_queue_limit: int = 64
    """LLM requests waiting beyond which new turns get `error {code: "overloaded", retry_after_ms}`."""
    workers: int = 1
    """Server processes (`voxline serve --workers N`); each loads its own models and serves its own sessions."""
    otlp_endpoint: str = ""
    """OTLP/HTTP traces endpoint (`http://collector:4318/v1/traces`); empty = tracing off, unless the standard
    `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables are set."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Settings:
        """Defaults, then `VOXLINE_*` variables, then explicit overrides (CLI flags) that are not None."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f"VOXLINE_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _coerce(f.name, raw, f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)

    def server_models(self) -> list[str]:
        """The manifest models the server itself needs (the browser's are served too; see `browser_models`)."""
        return [self.llm_model, self.server_asr_model, self.tts_model]


def _coerce(name: str, raw: str, kind: object) -> object:
    if kind in (bool, "bool"):
        if raw.lower() in ("1", "true", "on", "yes"):
            return True
        if raw.lower() in ("0", "false", "off", "no"):
            return False
        raise ValueError(f"VOXLINE_{name.upper()}={raw!r} is not on/off")
    if kind in (int, "int"):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"VOXLINE_{name.upper()}={raw!r} is not a whole number") from None
    if kind in (float, "float"):
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"VOXLINE_{name.upper()}={raw!r} is not a number") from None
    if kind in (Path, "Path"):
        return Path(raw)
    return raw
