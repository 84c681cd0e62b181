"""A turn's timing marks and the stages they cut the path to the first reply audio into.

One rule for everyone who reads the marks: the `timings` message (`stages`), the metrics (metrics.py), the trace
spans, and `voxline bench load` (which derives the stages itself from an older server's marks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from voxline.server import protocol as p
from voxline.telemetry import StageSpan

if TYPE_CHECKING:
    from voxline.server.turn import Turn

TIMING_MARKS = ("asr_ms", "intent_ms", "classify_ms", "llm_first_token_ms", "first_clause_ms", "tts_first_audio_ms",
                "first_audio_sent_ms", "llm_ms", "llm_queued_ms", "llm_batch_ms", "confirmed_ms")
"""The marks (milliseconds since the turn began) that the `timings` message carries when the turn reached them."""
STAGE_ENDS = (("uplink", "audio_end_ms"), ("asr", "asr_ms"), ("intent", "intent_ms"), ("classify", "classify_ms"),
              ("queue", "llm_batch_ms"), ("prefill", "llm_first_token_ms"), ("decode", "first_clause_ms"),
              ("tts", "tts_first_audio_ms"), ("transport", "first_audio_sent_ms"))
"""Each stage of the path to the first reply audio and the mark that ends it; it starts where the previous
present mark ends (a stage whose mark is absent did not happen, and its neighbour takes the gap)."""
STAGES = tuple(stage for stage, _ in STAGE_ENDS)
"""The stages, in order."""


def first_audio_stages(marks: Mapping[str, float]) -> dict[str, float]:
    """Stage durations (ms) from a turn's marks; they add up to the last mark reached (the first audio sent)."""
    stages, previous = {}, 0.0
    for stage, mark in STAGE_ENDS:
        if mark in marks:
            stages[stage] = max(marks[mark] - previous, 0.0)
            previous = max(marks[mark], previous)
    return stages


def timings_message(turn: Turn, total_ms: float) -> p.Timings:
    """The `timings` message of an ended turn; `total_ms`: now, as it is sent."""
    marks, ticket = turn.marks, turn.ticket
    stages = first_audio_stages(marks)
    return p.Timings(
        turn_id=turn.turn_id, interrupted=turn.interrupted, llm_tokens=turn.llm_tokens,
        total_ms=round(total_ms, 1),
        batch_size=ticket.batch_size if ticket else None, lane=ticket.lane.name if ticket else None,
        stages={k: round(v, 1) for k, v in stages.items()} or None,
        **{k: round(marks[k], 1) for k in TIMING_MARKS if k in marks},
    )


def stage_spans(turn: Turn, *, asr_model: str, llm_model: str, tts_model: str) -> list[StageSpan]:
    """The asr / intent / llm / tts trace spans of an ended turn, from its marks."""
    m, spans = turn.marks, []
    begin = m.get("audio_end_ms", 0.0)
    if "asr_ms" in m:
        spans.append(StageSpan("asr", begin, m["asr_ms"], m["asr_ms"] - begin, {"gen_ai.request.model": asr_model}))
        begin = m["asr_ms"]
    if "intent_ms" in m:
        spans.append(StageSpan("intent", begin, m["intent_ms"], attributes={"voxline.intent": turn.kind == "intent"}))
    ticket = turn.ticket
    if "llm_queued_ms" in m:
        end = m.get("llm_batch_ms", m["llm_queued_ms"]) + m.get("llm_ms", 0.0)
        attributes = {"gen_ai.system": "ctranslate2", "gen_ai.operation.name": "chat",
                      "gen_ai.request.model": llm_model,
                      "gen_ai.usage.output_tokens": turn.llm_tokens or 0,
                      "voxline.lane": ticket.lane.name, "voxline.batch_size": ticket.batch_size or 0,
                      "voxline.queue_ms": ticket.queue_ms or 0.0}
        ttfb = m["llm_first_token_ms"] - m["llm_queued_ms"] if "llm_first_token_ms" in m else None
        spans.append(StageSpan("llm", m["llm_queued_ms"], end, ttfb, attributes))
    if "tts_first_audio_ms" in m:
        start = m.get("first_clause_ms", m.get("intent_ms", 0.0))
        spans.append(StageSpan("tts", start, m.get("tts_done_ms", m["tts_first_audio_ms"]),
                               m["tts_first_audio_ms"] - start, {"gen_ai.request.model": tts_model}))
    return spans
