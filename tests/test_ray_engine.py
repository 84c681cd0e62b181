"""`--engine ray`: the model workers as Ray Serve deployments behind the same Session.

The first tests drive `RayTurnScheduler` with a scripted handle (no cluster): streaming, stats, retry before the
first token only, cancellation, stalls, overload. The rest start one local Ray instance (2 CPUs) for the module,
deploy the three workers through the app (SmolLM2 + espeak-ng), and talk to them over the WebSocket: a real turn,
a re-recognised audio turn, a barge-in that stops the replica's generation, and a killed LLM replica mid-turn.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

from ray import serve  # noqa: E402
from ray.exceptions import ActorDiedError  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from voxline.config import Settings  # noqa: E402
from voxline.dialog import Message  # noqa: E402
from voxline.errors import LLMError, Overloaded, VoxlineError  # noqa: E402
from voxline.llm import GenerationRequest, GenerationResult  # noqa: E402
from voxline.ray import (  # noqa: E402
    LLM_APP,
    RayTurnScheduler,
    ReplyEnd,
    WorkerFailure,
    WorkerSpec,
)
from voxline.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from voxline.server import protocol as p  # noqa: E402
from voxline.server.app import create_app  # noqa: E402
from voxline.server.pipeline import APOLOGY  # noqa: E402

from wsframes import of_type, receive_until  # noqa: E402

SMOLLM = "smollm2-135m-instruct-ct2"
QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a dragon who learns to fly, with many details."
RESTART_DEADLINE_S = 120.0


# ------------------------------------------------------------------------------------------------ worker specs

def test_a_worker_spec_reads_replicas_resources_and_autoscaling():
    spec = WorkerSpec.parse("replicas=1-4, cpus=2 gpus=0.5 target_ongoing=6")
    assert spec == WorkerSpec(min_replicas=1, max_replicas=4, cpus=2.0, gpus=0.5, target_ongoing=6.0)
    options = spec.deployment_options(80)
    assert options["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 6.0}
    assert options["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert options["max_ongoing_requests"] == 80 and "num_replicas" not in options


def test_a_fixed_worker_spec_has_no_autoscaling_and_threads_follow_cpus():
    spec = WorkerSpec.parse("replicas=2 cpus=0.5")
    assert spec.deployment_options(5)["num_replicas"] == 2
    assert "autoscaling_config" not in spec.deployment_options(5)
    assert spec.threads == 1 and WorkerSpec.parse("cpus=0").threads == 0


@pytest.mark.parametrize("text", ["replica=2", "replicas=4-1", "cpus=many", "target_ongoing=0", "replicas"])
def test_a_bad_worker_spec_is_refused_with_its_part_named(text):
    with pytest.raises(VoxlineError):
        WorkerSpec.parse(text)


def test_the_default_settings_specs_parse():
    settings = Settings()
    for spec in (settings.ray_llm, settings.ray_tts, settings.ray_asr):
        WorkerSpec.parse(spec)
    assert settings.engine == "embedded" and settings.ray_address == ""


# ------------------------------------------------------------------------------------------------ scripted handle

class ScriptedResponse:
    """A streaming response that yields its script: strings and ends are items, exceptions are raised, a float
    is a pause (seconds)."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.cancelled = threading.Event()

    def __aiter__(self):
        return self

    async def __anext__(self):
        while self.script:
            item = self.script.pop(0)
            if isinstance(item, float):
                await asyncio.sleep(item)
                continue
            if isinstance(item, BaseException):
                raise item
            return item
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled.set()


class ScriptedHandle:
    """Stands in for `serve.get_app_handle(LLM_APP)`: each call plays the next script."""

    def __init__(self, *scripts: list) -> None:
        self.scripts = list(scripts)
        self.calls: list[dict] = []
        self.responses: list[ScriptedResponse] = []
        self.generate = self

    def options(self, **kwargs) -> ScriptedHandle:
        assert kwargs == {"stream": True}
        return self

    def remote(self, messages, **kwargs) -> ScriptedResponse:
        self.calls.append({"messages": messages, **kwargs})
        response = ScriptedResponse(self.scripts.pop(0))
        self.responses.append(response)
        return response


def end(text: str, lane: str = "high", batch: int | None = 2) -> ReplyEnd:
    return ReplyEnd(GenerationResult(text, 3, 0.01, 0.05, "end"), lane, batch, 12.0)


def submit(scheduler: RayTurnScheduler, confidence: float | None = 0.95, tier: int = 3):
    deltas: list[str] = []
    request = GenerationRequest([Message("user", QUESTION)], on_text=deltas.append, max_tokens=8)
    return scheduler.submit(request, confidence=confidence, tier=tier, session_id="s1"), deltas


@pytest.fixture
def scheduler_of():
    made: list[RayTurnScheduler] = []

    def make(*scripts: list, **kwargs) -> tuple[RayTurnScheduler, ScriptedHandle]:
        handle = ScriptedHandle(*scripts)
        made.append(RayTurnScheduler(handle, SchedulerConfig(), **kwargs))
        return made[-1], handle

    yield make
    for scheduler in made:
        scheduler.close(1.0)


def test_the_ray_front_scheduler_is_a_scheduler(scheduler_of):
    scheduler, _ = scheduler_of()
    assert isinstance(scheduler, Scheduler)


def test_deltas_stream_to_on_text_and_the_replica_stats_fill_the_ticket(scheduler_of):
    scheduler, handle = scheduler_of(["Paris", " is", " the capital.", end("Paris is the capital.", "normal")])
    ticket, deltas = submit(scheduler, confidence=0.95, tier=5)
    result = ticket.future.result(5)
    assert deltas == ["Paris", " is", " the capital."] and result.text == "Paris is the capital."
    assert ticket.lane.name == "normal" and ticket.batch_size == 2
    assert ticket.queued_at <= ticket.dispatched_at
    call = handle.calls[0]
    assert call["messages"] == [("user", QUESTION)]
    assert (call["confidence"], call["tier"], call["max_tokens"], call["session_id"]) == (0.95, 5, 8, "s1")


def test_the_lane_is_computed_on_the_front_so_depth_is_per_lane(scheduler_of):
    scheduler, _ = scheduler_of([0.5, "x", end("x")])
    ticket, _ = submit(scheduler, confidence=0.95, tier=5)  # 0.6·0.95 + 0.25 = 0.82: normal
    assert ticket.lane.name == "normal" and scheduler.depth["normal"] == 1
    ticket.future.result(5)
    time.sleep(0.05)
    assert scheduler.depth["normal"] == 0 and scheduler.running == 0


def test_a_replica_lost_before_the_first_token_is_retried_transparently(scheduler_of):
    scheduler, handle = scheduler_of([ActorDiedError()], ["Hello.", end("Hello.")])
    ticket, deltas = submit(scheduler)
    assert ticket.future.result(5).text == "Hello." and deltas == ["Hello."]
    assert len(handle.calls) == 2


def test_a_replica_lost_after_a_token_fails_the_reply_without_retry(scheduler_of):
    scheduler, handle = scheduler_of(["Once upon", ActorDiedError()], ["never asked"])
    ticket, deltas = submit(scheduler)
    with pytest.raises(LLMError, match="lost mid-reply"):
        ticket.future.result(5)
    assert deltas == ["Once upon"] and len(handle.calls) == 1


def test_a_replica_lost_twice_before_any_token_fails_the_reply(scheduler_of):
    scheduler, handle = scheduler_of([ActorDiedError()], [ActorDiedError()])
    ticket, _ = submit(scheduler)
    with pytest.raises(LLMError):
        ticket.future.result(5)
    assert len(handle.calls) == 2


def test_withdraw_cancels_the_remote_stream_and_settles_the_ticket(scheduler_of):
    scheduler, handle = scheduler_of(["Once", 30.0, end("never")])
    ticket, deltas = submit(scheduler)
    deadline = time.monotonic() + 5
    while not deltas and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scheduler.running == 1
    scheduler.withdraw(ticket)
    result = ticket.future.result(5)
    assert result.stop_reason == "cancelled" and result.text == "Once"
    assert handle.responses[0].cancelled.wait(5)
    assert ticket.request.cancel.is_set()


def test_a_stream_that_stalls_fails_instead_of_hanging(scheduler_of):
    scheduler, handle = scheduler_of(["Once", 10.0, end("late")], stall_s=0.2)
    ticket, _ = submit(scheduler)
    with pytest.raises(LLMError, match="sent nothing"):
        ticket.future.result(5)
    assert handle.responses[0].cancelled.is_set()


def test_a_full_replica_queue_is_overloaded_with_its_retry_hint(scheduler_of):
    refused: list[bool] = []
    scheduler, _ = scheduler_of([WorkerFailure("overloaded", "busy", 700)], on_overloaded=lambda: refused.append(True))
    ticket, _ = submit(scheduler)
    with pytest.raises(Overloaded) as caught:
        ticket.future.result(5)
    assert caught.value.retry_after_ms == 700 and refused == [True]


def test_a_model_failure_in_the_replica_is_llm_failed(scheduler_of):
    scheduler, _ = scheduler_of([WorkerFailure("llm_failed", "generate_batch raised")])
    ticket, _ = submit(scheduler)
    with pytest.raises(LLMError, match="generate_batch raised"):
        ticket.future.result(5)


def test_a_closed_scheduler_refuses_new_turns(scheduler_of):
    scheduler, _ = scheduler_of()
    scheduler.close(1.0)
    with pytest.raises(Overloaded):
        submit(scheduler)


# ------------------------------------------------------------------------------------------------ a real cluster

def settings(**overrides) -> Settings:
    values = dict(llm_model=SMOLLM, tts_engine="espeak", engine="ray", reply_max_tokens=24,
                  ray_llm="replicas=1 cpus=1", ray_tts="replicas=1 cpus=0.5", ray_asr="replicas=1 cpus=0.5")
    return Settings(**values | overrides)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray instance with 2 CPUs for the module; the app deploys the workers onto it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def client(cluster):
    """The app with `engine="ray"`: its lifespan deploys the three applications."""
    with TestClient(create_app(settings())) as c:
        yield c


@pytest.fixture(scope="module")
def long_client(client):
    """A second front with long replies: it attaches to the applications the first one deployed."""
    with TestClient(create_app(settings(reply_max_tokens=256))) as c:
        yield c


def hello(ws, **capabilities) -> dict:
    ws.send_text(json.dumps({"type": "hello", "v": 1, "capabilities": capabilities}))
    welcome = json.loads(ws.receive_text())
    assert welcome["type"] == "welcome"
    return welcome




def llm_replicas() -> list[dict]:
    return [a for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{LLM_APP}#")]


def test_a_turn_runs_end_to_end_through_the_deployments(client):
    apps = serve.status().applications
    assert {name: app.status for name, app in apps.items()} == {
        "voxline-llm": "RUNNING", "voxline-tts": "RUNNING", "voxline-asr": "RUNNING"}
    with client.websocket_connect("/ws") as ws:
        welcome = hello(ws)
        assert welcome["models"]["llm"] == SMOLLM and welcome["models"]["tts"] == "espeak"
        ws.send_text(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": QUESTION, "confidence": 0.9}))
        frames = receive_until(ws, "timings")
    deltas = of_type(frames, "reply.delta")
    done = of_type(frames, "reply.done")[0]
    audio = [f for f in frames if isinstance(f, bytes)]
    assert deltas and audio and not of_type(frames, "error")
    assert done["text"] == "".join(d["text"] for d in deltas).strip() and not done["interrupted"]
    assert "Paris" in done["text"]
    # The first reply audio came before the reply was done: the stream kept its shape across the Ray hop.
    first_audio = next(i for i, f in enumerate(frames) if isinstance(f, bytes))
    assert first_audio < frames.index(done)
    timings = of_type(frames, "timings")[0]
    assert timings["lane"] == "normal" and timings["batch_size"] == 1
    assert list(timings["stages"]) == ["intent", "queue", "prefill", "decode", "tts", "transport"]
    assert 0 < timings["first_audio_sent_ms"] < timings["total_ms"]


def test_an_audio_turn_below_the_gate_is_re_recognised_by_the_asr_deployment(client):
    from voxline.tts import EspeakSynth, _resample

    speech = _resample(EspeakSynth().synthesize("Pause the music."), 24_000, p.PCM16_UPLINK_RATE_HZ)
    pcm = (np.clip(speech, -1, 1) * 32767).astype("<i2").tobytes()
    with client.websocket_connect("/ws") as ws:
        hello(ws, pcm16=True, sample_rate=p.PCM16_UPLINK_RATE_HZ)
        ws.send_text(json.dumps({"type": "turn.start", "turn_id": 1, "transcript": "paws", "confidence": 0.2,
                                 "audio": "pcm16"}))
        for start in range(0, len(pcm), 3200):
            ws.send_bytes(p.encode_audio_frame("pcm16", 1, pcm[start:start + 3200]))
        ws.send_text(json.dumps({"type": "turn.audio_end", "turn_id": 1}))
        frames = receive_until(ws, "reply.done")
    transcript = of_type(frames, "transcript")
    assert transcript[0]["source"] == "server" and transcript[0]["text"] == "Pause the music."
    assert of_type(frames, "intent")[0]["intent"] == "media.pause"


def test_a_barge_in_stops_the_generation_in_the_replica(long_client):
    llm = serve.get_app_handle(LLM_APP)
    with long_client.websocket_connect("/ws") as ws:
        hello(ws)
        ws.send_text(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
        receive_until(ws, "reply.delta")
        assert llm.activity.remote().result(timeout_s=10)["running"] == 1
        ws.send_text(json.dumps({"type": "barge_in", "turn_id": 1, "played_ms": 0}))
        done = receive_until(ws, "reply.done")[-1]
        assert done["interrupted"]
        # 256 tokens would take several seconds more: the replica stopped at its next token instead.
        deadline = time.monotonic() + 3.0
        while llm.activity.remote().result(timeout_s=10)["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.activity.remote().result(timeout_s=10)["running"] == 0
    assert long_client.app.state.engines.scheduler.running == 0


def test_a_killed_llm_replica_fails_the_turn_with_llm_failed_and_serve_brings_it_back(long_client):
    (before,) = llm_replicas()
    with long_client.websocket_connect("/ws") as ws:
        hello(ws)
        ws.send_text(json.dumps({"type": "text", "turn_id": 1, "text": STORY}))
        receive_until(ws, "reply.delta")  # the reply is streaming: a retry could not be transparent any more
        ray.kill(ray.get_actor(before["name"], namespace=before["namespace"]), no_restart=False)
        frames = receive_until(ws, "reply.done")
        errors = of_type(frames, "error")
        assert [e["code"] for e in errors] == ["llm_failed"] and errors[0]["turn_id"] == 1
        assert frames[-1]["text"] == APOLOGY and not frames[-1]["interrupted"]
        # The session lives on, and the next turn is answered once Serve has replaced the replica.
        deadline = time.monotonic() + RESTART_DEADLINE_S
        turn_id = 1
        while True:
            turn_id += 1
            ws.send_text(json.dumps({"type": "text", "turn_id": turn_id, "text": QUESTION}))
            done = receive_until(ws, "reply.done")
            if not of_type(done, "error"):
                break
            assert time.monotonic() < deadline, "the LLM replica did not come back"
            time.sleep(1.0)
        assert done[-1]["text"] and done[-1]["text"] != APOLOGY
    (after,) = llm_replicas()
    assert after["name"] != before["name"]
    states = serve.status().applications[LLM_APP].deployments["LLMWorker"].replica_states
    assert states == {"RUNNING": 1}
