"""OpenTelemetry traces: one trace per conversation, a span per turn, a span per stage. Off by default.

The layout is pipecat's, so the same dashboards read both: a `conversation` span (attribute `conversation.id`)
for the life of a WebSocket session, a `turn` span per user turn (`turn.number`, `turn.was_interrupted`,
`turn.type`), and under it `asr`, `intent`, `llm` and `tts` spans, each with `metrics.ttfb` (seconds to its first
output: first token, first audio) and the generative-AI semantic attributes where they apply
(`gen_ai.request.model`, `gen_ai.usage.output_tokens`), plus the scheduler's `voxline.queue_ms`,
`voxline.batch_size` and `voxline.lane`.

Turn and stage spans are written when the turn ends, from the times the turn recorded (explicit start and end
timestamps): the pipeline's threads never carry a tracing context, and a disabled tracer costs nothing per turn.

Tracing turns on when `Settings.otlp_endpoint` or one of OpenTelemetry's own `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables is set; it needs the `tracing` extra (`pip install
voxline[tracing]`). Tests hand `Telemetry` a `TracerProvider` of their own (with the SDK's in-memory exporter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from voxline import __version__
from voxline.errors import VoxlineError

SERVICE_NAME = "voxline"


def tracing_configured(configured: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces should be exported: an endpoint in the settings or in OpenTelemetry's own variables."""
    environ = os.environ if environ is None else environ
    return bool(configured or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def otlp_provider(configured: str) -> trace.TracerProvider:
    """An SDK provider exporting over OTLP/HTTP in batches (a background thread of the SDK).

    `configured` is the full traces URL (`http://collector:4318/v1/traces`); when empty, the exporter reads the
    standard `OTEL_EXPORTER_OTLP_*` variables itself (where the base endpoint gets `/v1/traces` appended).
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise VoxlineError(
            "an OTLP endpoint is configured but the OpenTelemetry SDK is missing: "
            "run `pip install voxline[tracing]` (scripts/setup.sh installs it)") from None
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME,
                                                        "service.version": __version__}))
    exporter = OTLPSpanExporter(endpoint=configured) if configured else OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


@dataclass
class StageSpan:
    """One stage of a turn, in milliseconds from the turn's start."""

    name: str
    start_ms: float
    end_ms: float
    ttfb_ms: float | None = None
    attributes: dict[str, object] = field(default_factory=dict)


class Telemetry:
    """The server's tracer; `enabled` is False (and every method a no-op) unless a provider was configured."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.provider = provider
        self.enabled = provider is not None
        self._tracer: Tracer = (provider or trace.NoOpTracerProvider()).get_tracer(SERVICE_NAME, __version__)

    @classmethod
    def from_settings(cls, configured_endpoint: str) -> Telemetry:
        return cls(otlp_provider(configured_endpoint) if tracing_configured(configured_endpoint) else None)

    def start_conversation(self, session_id: str) -> Span | None:
        if not self.enabled:
            return None
        return self._tracer.start_span("conversation", kind=SpanKind.SERVER,
                                       attributes={"conversation.id": session_id,
                                                   "conversation.type": "voice"})

    def end_conversation(self, span: Span | None) -> None:
        if span is not None:
            span.end()

    def record_turn(self, conversation: Span | None, *, number: int, started_ns: int, duration_ms: float,
                    turn_type: str, interrupted: bool, error: str | None, stages: list[StageSpan],
                    attributes: Mapping[str, object] | None = None) -> None:
        """Write a finished turn and its stages under `conversation`."""
        if not self.enabled:
            return
        parent = trace.set_span_in_context(conversation) if conversation is not None else None
        turn = self._tracer.start_span("turn", context=parent, start_time=started_ns, attributes={
            "turn.number": number, "turn.type": turn_type, "turn.was_interrupted": interrupted,
            "turn.duration_seconds": duration_ms / 1000.0, **(attributes or {})})
        if error is not None:
            turn.set_status(trace.Status(trace.StatusCode.ERROR, error))
        context = trace.set_span_in_context(turn)
        for stage in stages:
            attrs = dict(stage.attributes)
            if stage.ttfb_ms is not None:
                attrs["metrics.ttfb"] = stage.ttfb_ms / 1000.0
            span = self._tracer.start_span(stage.name, context=context, attributes=attrs,
                                           start_time=started_ns + int(stage.start_ms * 1e6))
            span.end(end_time=started_ns + int(max(stage.end_ms, stage.start_ms) * 1e6))
        turn.end(end_time=started_ns + int(duration_ms * 1e6))

    def shutdown(self) -> None:
        """Flush what is buffered (the server is stopping)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
