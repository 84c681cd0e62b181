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
DEFAULT_TOKEN_TTL_S = 300.0
DEFAULT_TOKEN_REQUESTS_PER_MINUTE = 30.0
DEFAULT_MAX_SESSIONS_PER_ADDRESS = 16
DEFAULT_MAX_SESSIONS_PER_KEY = 100
DEFAULT_MAX_MESSAGES_PER_S = 20.0
DEFAULT_MAX_MESSAGE_BURST = 40
DEFAULT_MAX_AUDIO_FRAMES_PER_S = 100.0
DEFAULT_MAX_AUDIO_FRAME_BURST = 1600
DEFAULT_HELLO_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_IDLE_GRACE_S = 10.0
DEFAULT_OUTBOX_MAX_AUDIO_BYTES = 2 * 1024 * 1024
DEFAULT_OUTBOX_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_DRAIN_TIMEOUT_S = 10.0
DEFAULT_AUDIO_IDLE_TIMEOUT_S = 5.0
DEFAULT_HTTP_REQUEST_TIMEOUT_S = 10.0
DEFAULT_HTTP_KEEP_ALIVE_TIMEOUT_S = 5.0
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_INTENT_CLASSIFIER = "llm"
INTENT_CLASSIFIERS = ("llm", "off")
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
"""The checkout, when Voxline runs from one (an editable install); meaningless in an installed wheel."""


def _assets(packaged: str, checkout: Path) -> Path:
    """A folder of web assets: package data in an installed wheel (pyproject.toml's force-include puts it there),
    else the checkout's own folder (an editable install serves the sources and the latest `npm run build`)."""
    inside = PACKAGE_DIR / packaged
    return inside if inside.is_dir() else checkout


WEB_DIR = _assets("web", REPO_ROOT / "web")
"""The demo page and the browser modules."""
WIDGET_DIR = _assets("widget", REPO_ROOT / "dist")
"""The widget bundles (`npm run build` writes them into the checkout's `dist/`)."""


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
    intent_classifier: str = DEFAULT_INTENT_CLASSIFIER
    """What the server does with an utterance the grammar misses, before the LLM chats: `llm` asks the LLM, as a
    constrained classifier, whether it is one of the known intents (voxline/server/intent_classifier.py); `off`
    sends it straight to the chat."""
    intent_neighbours: bool = True
    """The classifier's second opinion (voxline/server/intent_neighbours.py): an LLM command below its threshold
    is still accepted when the nearest intent in meaning agrees. Off: the LLM's probability alone decides, and the
    sentence encoder (~90 MB) is not loaded."""
    classify_beside_chat: bool = True
    """When the grammar misses and only the LLM classifier can tell whether the words are a command, the chat starts
    at the same moment beside it, everything it would send held back until the verdict: a question no longer waits
    for the classifier (0.6-0.9 s on one core of this machine) before its answer starts; a command after all discards
    the chat unsent and untraced. Off, or with one LLM slot (`llm_parallel_count() == 1`): the chat starts after
    the verdict."""
    reply_max_tokens: int = DEFAULT_REPLY_MAX_TOKENS
    """Longest spoken reply, in LLM tokens (about 0.75 words each)."""
    reply_max_seconds: float = DEFAULT_REPLY_MAX_SECONDS
    """Wall-clock cap on one reply's generation."""
    history_exchanges: int = DEFAULT_HISTORY_EXCHANGES
    """User/assistant exchanges kept per session as LLM context; older ones are dropped first."""
    auth_token: str = field(default="", repr=False)
    """When set, `hello` must carry this token; empty means no authentication (local use)."""
    # Who may connect, and how much (docs/protocol.md, "Admission and limits"). 0 turns a cap off.
    site_keys: str = field(default="", repr=False)
    """Site keys: a JSON list inline (`[{"id": ..., "secret": ..., "origins": [...]}]`) or the path of a JSON file
    holding one. When set, every session needs a token signed with one of them (`voxline.server.auth`)."""
    allowed_origins: str = ""
    """Comma-separated origins (`https://shop.example`) whose pages may open `/ws`, besides the server's own origin
    (its demo page); empty = the server's own origin only, plus, with site keys, the origins of the keys; `*` = any
    origin. A client that sends no `Origin` (not a browser) is not refused by it."""
    token_ttl_s: float = DEFAULT_TOKEN_TTL_S
    """Lifetime of the tokens that `/token` and `voxline token mint` issue."""
    token_requests_per_minute: float = DEFAULT_TOKEN_REQUESTS_PER_MINUTE
    """`/token` requests per client address per minute (burst the same); more get HTTP 429."""
    max_sessions_per_address: int = DEFAULT_MAX_SESSIONS_PER_ADDRESS
    """Concurrent sessions from one client address (behind a proxy, see uvicorn's `--forwarded-allow-ips`)."""
    max_sessions_per_key: int = DEFAULT_MAX_SESSIONS_PER_KEY
    """Concurrent sessions on one site key, unless the key sets its own `max_sessions`."""
    max_messages_per_s: float = DEFAULT_MAX_MESSAGES_PER_S
    """Sustained rate of text (JSON) frames per session; `max_message_burst` more may come at once."""
    max_message_burst: int = DEFAULT_MAX_MESSAGE_BURST
    max_audio_frames_per_s: float = DEFAULT_MAX_AUDIO_FRAMES_PER_S
    """Sustained rate of binary (audio) frames per session: real time is 50 a second (20 ms Opus packets)."""
    max_audio_frame_burst: int = DEFAULT_MAX_AUDIO_FRAME_BURST
    """Audio frames that may come at once: a whole 30 s turn of 20 ms packets sent at the end of the turn."""
    hello_timeout_s: float = DEFAULT_HELLO_TIMEOUT_S
    """A connection that sends no `hello` within this long is closed (4408)."""
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    """A listening session that sends nothing for this long is warned (`idle_timeout`) ..."""
    idle_grace_s: float = DEFAULT_IDLE_GRACE_S
    """... and closed (4408) if it stays silent this much longer."""
    outbox_max_audio_bytes: int = DEFAULT_OUTBOX_MAX_AUDIO_BYTES
    """Reply audio waiting for a slow reader beyond which the turn's unsent audio is dropped (`slow_consumer`)."""
    outbox_max_bytes: int = DEFAULT_OUTBOX_MAX_BYTES
    """Everything waiting for a reader beyond which the connection is dropped: the client does not read at all."""
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    """On SIGTERM, how long turns in flight may take to finish before they are cut (and said to be)."""
    audio_idle_timeout_s: float = DEFAULT_AUDIO_IDLE_TIMEOUT_S
    """A turn whose audio upload (after `turn.start` with audio) gets no frame for this long is dropped and the
    connection closed (4408): a page sends a turn's packets at once, a live client every 20-100 ms."""
    forwarded_allow_ips: str = ""
    """Proxies (comma-separated IPs or CIDR networks, e.g. `10.0.0.0/8`) whose `X-Forwarded-For` and
    `X-Forwarded-Proto` give the client's address and scheme; empty = trust no forwarded header (the peer's address
    counts), `*` = trust any peer (only when nothing but the proxy can reach the port). docs/deploy.md."""
    http_request_timeout_s: float = DEFAULT_HTTP_REQUEST_TIMEOUT_S
    """A request's head and body must arrive within this long (from the connection or its first byte), else the
    connection is closed: a silent socket or a slowly sent request holds nothing for long (slowloris)."""
    http_keep_alive_timeout_s: float = DEFAULT_HTTP_KEEP_ALIVE_TIMEOUT_S
    """An idle keep-alive HTTP connection is closed after this long."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Open TCP connections (HTTP and WebSocket) per server process; one over it is closed at once; 0 = no cap."""
    health_details: bool = False
    """`/healthz` with the version, the process id and every model's digests; off = only the status and each
    model's verified/loaded flags (what a load balancer needs), since anyone can read `/healthz`."""
    web_dir: Path = WEB_DIR
    skill_files: str = ""
    """Skill files (comma-separated YAML or JSON paths) that make the grammar instead of the built-in pack, for the
    server and the page alike; empty = the built-in pack. To add intents on top of the built-in ones, list the
    built-in files too (`voxline.intents.builtin_skill_paths()`)."""
    # Serving under load (see voxline/scheduler.py for what each number means).
    batching: bool = True
    """Dynamic batching with priority lanes (work-conserving: an idle model starts a request at once, what queues
    while it is busy is batched); off = one reply at a time, first come first served."""
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
    """Window of the high lane: once the model frees, a lane whose oldest request has waited this long goes first
    (earliest deadline first). Dispatch is work-conserving: a window never delays an idle model (scheduler.py)."""
    scheduler_normal_min_priority: float = 0.6
    scheduler_normal_max_batch: int = 8
    scheduler_normal_max_wait_ms: float = 150.0
    """Window of the normal lane, as `scheduler_high_max_wait_ms`."""
    scheduler_bulk_max_batch: int = 16
    scheduler_bulk_max_wait_ms: float = 300.0
    """Window of the bulk lane, as `scheduler_high_max_wait_ms`."""
    scheduler_low_confidence_below: float = 0.4
    scheduler_low_confidence_max_batch: int = 2
    scheduler_low_confidence_max_wait_ms: float = 20.0
    """Window of the low_confidence lane, as `scheduler_high_max_wait_ms`."""
    scheduler_queue_limit: int = 64
    """LLM requests waiting beyond which new turns get `error {code: "overloaded", retry_after_ms}`."""
    scheduler_max_queue_wait_s: float = 20.0
    """A turn whose LLM request would wait longer than this (estimated) gets `overloaded` at once; 0 = no bound."""
    scheduler_max_batch_prompt_tokens: int = 2048
    """Prompt tokens one LLM batch may prefill; a batch of long histories is cut short (see scheduler.py)."""
    llm_threads: int = 0
    """CPU threads of the LLM; 0 = half the cores, at least 1. The rest synthesize speech, re-recognise and run the
    event loop: on 2 cores a second LLM thread made generation slower, not faster, once TTS ran beside it."""
    llm_parallel_batches: int = 0
    """LLM batches that may run at once, each on `llm_threads` threads (with batching; off is one at a time);
    0 = as many as the cores hold (cores // LLM threads: 2 on a 2-core machine). One batch cannot take in a request
    that arrives while it runs, so a second one serves it, on the core the first leaves idle between TTS calls."""
    workers: int = 1
    """Server processes (`voxline serve --workers N`); each loads its own models and serves its own sessions."""
    otlp_endpoint: str = ""
    """OTLP/HTTP traces endpoint (`http://collector:4318/v1/traces`); empty = tracing off, unless the standard
    `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables are set."""
    # Scale-out on Ray Serve (voxline/ray/, docs/deploy.md): the front keeps the sessions, the models run
    # as deployments. A worker spec reads `replicas=1 cpus=1 gpus=0 target_ongoing=8`; `replicas=1-4` autoscales
    # between 1 and 4 replicas on ongoing requests per replica (`target_ongoing`).
    engine: str = "embedded"
    """`embedded` (the models in this process) or `ray` (the models as Ray Serve deployments)."""
    ray_address: str = ""
    """Ray cluster to use (`auto`, `HOST:6379`, `ray://HOST:10001`); empty = start a local Ray instance."""
    ray_local_cpus: int = 0
    """CPUs a local Ray instance offers its replicas (0 = every CPU of the machine)."""
    ray_llm: str = "replicas=1 cpus=1 gpus=0 target_ongoing=8"
    """The LLM deployment; each replica batches what it receives in its own TurnScheduler."""
    ray_tts: str = "replicas=1 cpus=0.5 gpus=0 target_ongoing=4"
    """The TTS deployment."""
    ray_asr: str = "replicas=1 cpus=0.5 gpus=0 target_ongoing=2"
    """The server re-recognition deployment (Whisper is loaded by a replica on its first turn)."""

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

    def __post_init__(self) -> None:
        if self.intent_classifier not in INTENT_CLASSIFIERS:
            expected = ", ".join(INTENT_CLASSIFIERS)
            raise ValueError(f"intent_classifier={self.intent_classifier!r}: expected one of {expected}")

    def llm_thread_count(self) -> int:
        """`llm_threads`, with 0 resolved for this machine."""
        return self.llm_threads or max(1, (os.cpu_count() or 2) // 2)

    def llm_parallel_count(self) -> int:
        """`llm_parallel_batches`, with 0 resolved for this machine; always 1 without batching."""
        if not self.batching:
            return 1
        return self.llm_parallel_batches or max(1, (os.cpu_count() or 2) // self.llm_thread_count())

    def grammar(self):
        """The grammar this server recognises and ships to the page (`skill_files`, else the built-in pack)."""
        from voxline.intents import builtin_grammar, load_grammar

        paths = self.skill_paths()
        return load_grammar(paths) if paths else builtin_grammar()

    def skill_paths(self) -> list[Path]:
        return [Path(part.strip()) for part in self.skill_files.split(",") if part.strip()]

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
