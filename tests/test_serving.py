"""Serving under load, through the real app: stage timings, Prometheus histograms, OpenTelemetry spans (SDK
in-memory exporter), admission control, text-only sessions, the slow-turn report and `--workers N`."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from voxline.config import Settings
from voxline.server.app import create_app
from voxline.server.metrics import ServerMetrics, SlowTurns, dominant_stage
from voxline.server.timings import first_audio_stages
from voxline.telemetry import Telemetry, tracing_configured

from wsframes import of_type, receive_until

SMOLLM = "smollm2-135m-instruct-ct2"
QUESTION = "What is the capital of France?"


def settings(**overrides) -> Settings:
    return Settings(llm_model=SMOLLM, tts_engine="espeak", reply_max_tokens=24, **overrides)


@pytest.fixture(scope="module")
def spans():
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def client(spans):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with TestClient(create_app(settings(), telemetry=Telemetry(provider))) as c:
        yield c


def converse(ws, *turns: dict, capabilities: dict | None = None) -> list[list]:
    """hello, then each turn until its `timings`; returns per turn the messages (dicts) and audio frames (bytes)."""
    ws.send_text(json.dumps({"type": "hello", "v": 1, "capabilities": capabilities or {}}))
    assert json.loads(ws.receive_text())["type"] == "welcome"
    out = []
    for turn in turns:
        ws.send_text(json.dumps(turn))
        out.append(receive_until(ws, "timings"))
    return out


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" ([0-9.e+-]+)"
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def test_an_llm_turn_reports_its_lane_batch_and_stages_that_add_up_to_the_first_audio(client):
    with client.websocket_connect("/ws") as ws:
        (frames,) = converse(ws, {"type": "turn.start", "turn_id": 1, "transcript": QUESTION, "confidence": 0.9})
    timings = of_type(frames, "timings")[0]
    assert any(isinstance(f, bytes) for f in frames)
    assert timings["lane"] == "normal" and timings["batch_size"] == 1  # 0.6·0.9 + 0.25·0.5 = 0.665
    stages = timings["stages"]
    assert list(stages) == ["intent", "queue", "prefill", "decode", "tts", "transport"]
    assert sum(stages.values()) == pytest.approx(timings["first_audio_sent_ms"], abs=1.0)
    # Alone, with the model idle, the request starts at once (work-conserving): it never waits out its lane's
    # 150 ms window for company that is not coming.
    assert stages["queue"] < 120
    assert timings["llm_queued_ms"] <= timings["llm_batch_ms"] <= timings["llm_first_token_ms"]


def test_metrics_histograms_move_with_turns(client):
    before = client.get("/metrics").text
    with client.websocket_connect("/ws") as ws:
        converse(ws, {"type": "text", "turn_id": 1, "text": "Why is the sky blue?"},
                 {"type": "text", "turn_id": 2, "text": "pause the music"})
        during = client.get("/metrics").text
        assert metric(during, "voxline_active_sessions") >= 1
    after = client.get("/metrics").text
    for stage in ("queue", "prefill", "decode", "tts", "transport"):
        assert metric(after, "voxline_turn_stage_seconds_count", stage=stage) > \
            metric(before, "voxline_turn_stage_seconds_count", stage=stage), stage
    assert metric(after, "voxline_turns_total", kind="llm", outcome="ok") == \
        metric(before, "voxline_turns_total", kind="llm", outcome="ok") + 1
    assert metric(after, "voxline_turns_total", kind="intent", outcome="ok") == \
        metric(before, "voxline_turns_total", kind="intent", outcome="ok") + 1
    assert metric(after, "voxline_llm_batch_size_count", lane="normal") > \
        metric(before, "voxline_llm_batch_size_count", lane="normal")
    assert 'voxline_llm_queue_depth{lane="high"}' in after
    assert "voxline_rejections_total" in after or "voxline_rejections" in after


def test_spans_follow_conversation_turn_stage_with_first_byte_times(client, spans):
    spans.clear()
    with client.websocket_connect("/ws") as ws:
        converse(ws, {"type": "turn.start", "turn_id": 1, "transcript": QUESTION, "confidence": 0.9},
                 {"type": "text", "turn_id": 2, "text": "turn the volume down"})
    deadline = time.monotonic() + 10
    # The conversation span ends when the server has seen the socket close, a moment after the client left.
    while not any(s.name == "conversation" for s in spans.get_finished_spans()) and time.monotonic() < deadline:
        time.sleep(0.02)
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    conversation = next(s for s in finished if s.name == "conversation")
    turns = [s for s in finished if s.name == "turn"]
    assert len(turns) == 2 and names.count("conversation") == 1
    assert all(t.parent.span_id == conversation.context.span_id for t in turns)
    assert {t.attributes["turn.number"] for t in turns} == {1, 2}
    llm_turn = next(t for t in turns if t.attributes["turn.type"] == "llm")
    children = {s.name: s for s in finished if s.parent is not None and s.parent.span_id == llm_turn.context.span_id}
    assert set(children) == {"intent", "llm", "tts"}
    llm = children["llm"]
    assert llm.attributes["gen_ai.request.model"] == SMOLLM
    assert llm.attributes["gen_ai.usage.output_tokens"] > 0
    assert llm.attributes["voxline.lane"] == "normal" and llm.attributes["voxline.batch_size"] == 1
    assert 0 < llm.attributes["metrics.ttfb"] < (llm.end_time - llm.start_time) / 1e9 + 1e-6
    assert children["tts"].attributes["metrics.ttfb"] > 0
    assert llm_turn.start_time <= llm.start_time <= llm.end_time <= llm_turn.end_time
    assert all(s.context.trace_id == conversation.context.trace_id for s in finished)


def test_tracing_is_off_unless_an_endpoint_is_configured():
    assert not tracing_configured("", {})
    assert tracing_configured("http://collector:4318/v1/traces", {})
    assert tracing_configured("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    off = Telemetry()
    assert not off.enabled and off.start_conversation("x") is None


def test_a_text_only_session_gets_no_audio_and_no_tts(client):
    with client.websocket_connect("/ws") as ws:
        llm, command = converse(ws, {"type": "text", "turn_id": 1, "text": QUESTION},
                                {"type": "text", "turn_id": 2, "text": "pause the music"},
                                capabilities={"reply_audio": False})
    for frames in (llm, command):
        assert not any(isinstance(f, bytes) for f in frames)
        assert "tts_first_audio_ms" not in of_type(frames, "timings")[0]
    assert "Paris" in of_type(llm, "reply.done")[0]["text"]
    assert of_type(command, "intent")[0]["intent"] == "media.pause"


def test_a_full_queue_answers_overloaded_with_a_retry_hint_and_the_session_lives_on(model_dir):
    with TestClient(create_app(settings(scheduler_queue_limit=0))) as c, c.websocket_connect("/ws") as ws:
        refused, command = converse(ws, {"type": "text", "turn_id": 1, "text": QUESTION},
                                    {"type": "text", "turn_id": 2, "text": "pause the music"})
        scraped = c.get("/metrics").text
    (error,) = of_type(refused, "error")
    assert error["code"] == "overloaded" and error["turn_id"] == 1
    assert error["retry_after_ms"] >= 250 and "try again" in error["message"]
    assert of_type(refused, "reply.done")[0]["turn_id"] == 1
    assert of_type(command, "intent")[0]["intent"] == "media.pause"
    assert metric(scraped, "voxline_rejections_total", reason="overloaded") == 1


def test_stages_telescope_to_the_last_mark_reached():
    marks = {"audio_end_ms": 40.0, "asr_ms": 300.0, "intent_ms": 301.0, "llm_queued_ms": 302.0,
             "llm_batch_ms": 380.0, "llm_first_token_ms": 450.0, "first_clause_ms": 600.0,
             "tts_first_audio_ms": 700.0, "first_audio_sent_ms": 702.0, "llm_ms": 900.0}
    stages = first_audio_stages(marks)
    assert stages == {"uplink": 40.0, "asr": 260.0, "intent": 1.0, "queue": 79.0, "prefill": 70.0,
                      "decode": 150.0, "tts": 100.0, "transport": 2.0}
    assert dominant_stage(stages) == "asr"
    assert first_audio_stages({"intent_ms": 0.5, "tts_first_audio_ms": 30.0, "first_audio_sent_ms": 31.0}) == \
        {"intent": 0.5, "tts": 29.5, "transport": 1.0}
    # The grammar missed and the classifier was asked: its time is its own stage, not the scheduler's queue.
    classified = first_audio_stages({"intent_ms": 1.0, "classify_ms": 700.0, "llm_batch_ms": 705.0,
                                     "llm_first_token_ms": 800.0})
    assert classified == {"intent": 1.0, "classify": 699.0, "queue": 5.0, "prefill": 95.0}


def test_a_turn_above_the_recent_p99_is_reported_with_its_dominant_stage(caplog):
    slow = SlowTurns(window=200, min_turns=100, recompute_every=10)
    assert all(slow.is_slow("llm", 500.0 + i % 10) is None for i in range(120))
    assert slow.is_slow("llm", 505.0) is None
    assert slow.is_slow("llm", 2000.0) == pytest.approx(509.0)
    assert slow.is_slow("intent", 2000.0) is None  # kinds are separate
    metrics = ServerMetrics()
    stages = {"queue": 100.0, "prefill": 60.0, "decode": 120.0, "tts": 90.0, "transport": 1.0}
    for _ in range(150):
        metrics.observe_turn(kind="llm", outcome="ok", total_ms=900.0, first_audio_ms=371.0, stages=stages,
                             describe=lambda: "fast")
    with caplog.at_level(logging.WARNING, logger="voxline.server.metrics"):
        metrics.observe_turn(kind="llm", outcome="ok", total_ms=4000.0, first_audio_ms=2371.0,
                             stages=stages | {"queue": 2100.0}, describe=lambda: "7 of session abc")
    (record,) = [r for r in caplog.records if "slow turn" in r.getMessage()]
    assert "7 of session abc" in record.getMessage() and "mostly queue 2100 ms" in record.getMessage()


# ---------------------------------------------------------------------------------------------- --workers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_with_two_workers_spreads_connections_over_two_processes(tmp_path):
    port = free_port()
    # The pid is in /healthz only with details on (the public form is minimal).
    env = os.environ | {"VOXLINE_LLM_MODEL": SMOLLM, "VOXLINE_TTS_ENGINE": "espeak", "VOXLINE_HEALTH_DETAILS": "on"}
    server = subprocess.Popen([sys.executable, "-m", "voxline.cli", "serve", "--port", str(port), "--workers", "2",
                               "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "serve.log", "w"))
    try:
        deadline = time.monotonic() + 120
        pids: set[int] = set()
        while time.monotonic() < deadline and len(pids) < 2:
            try:
                # A new connection each time (no keep-alive), so each may land on either worker.
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"connection": "close"}, timeout=5)
                pids.add(answer.json()["pid"])
            except httpx.TransportError:
                time.sleep(0.5)
        assert len(pids) == 2, f"only worker(s) {pids} answered; log: {(tmp_path / 'serve.log').read_text()[-2000:]}"
        assert server.pid not in pids
        import websockets.sync.client as wsc

        for _ in range(4):
            with wsc.connect(f"ws://127.0.0.1:{port}/ws") as ws:
                ws.send(json.dumps({"type": "hello", "v": 1, "capabilities": {"reply_audio": False}}))
                assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
                ws.send(json.dumps({"type": "text", "turn_id": 1, "text": "pause the music"}))
                assert json.loads(ws.recv(timeout=10))["intent"] == "media.pause"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
