"""`voxline bench load`: the knee, the aggregation, the slow-turn report and the plot on made-up turns; then short
real runs over real WebSockets against `voxline serve` subprocesses (SmolLM2, espeak)."""

from __future__ import annotations

import json
import math
import os
import random

import pytest

from voxline.bench import load
from voxline.bench.load import QUESTIONS, ErrorEvent, LevelLog, LoadBenchError, Target, TurnRecord
from voxline.cli import build_parser

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GEOMETRIC = [1, 2, 4, 8, 16]


def turn(ms: float = 100.0, *, kind: str = "llm", sessions: int = 1, done_s: float = 1.0, error: str | None = None,
         reply_done_ms: float | None = None, **timings) -> TurnRecord:
    return TurnRecord(kind=kind, sessions=sessions, done_s=done_s, first_audio_ms=ms,
                      reply_done_ms=reply_done_ms if reply_done_ms is not None else (ms or 0) + 500,
                      timings=timings, error=error)


def bench_args(*argv: str):
    return build_parser().parse_args(["bench", "load", *argv])


# ---------------------------------------------------------------------------------------------- the knee


def test_knee_of_a_hockey_stick_is_its_corner():
    loads = [1, 2, 3, 4, 5, 6, 7]
    p95 = [100, 100, 100, 100, 150, 200, 250]
    assert load.knee(loads, p95) == 4


def test_knee_on_doubling_loads_is_the_corner_too():
    # Flat up to 4 sessions, then +20 ms per session: divided differences find the corner on uneven spacing.
    p95 = [100 + 20 * max(0, x - 4) for x in GEOMETRIC]
    assert load.knee(GEOMETRIC, p95) == 4


def test_second_differences_on_even_loads_are_the_classic_ones_over_h_squared():
    assert load.second_differences([0, 2, 4, 6], [1, 2, 7, 20]) == [(7 - 2 * 2 + 1) / 4, (20 - 2 * 7 + 2) / 4]


@pytest.mark.parametrize("loads", [[1, 2, 3, 4, 5], GEOMETRIC])
def test_a_straight_line_has_no_knee(loads):
    assert load.knee(loads, [50 + 30 * x for x in loads]) is None
    assert load.knee(loads, [80.0] * len(loads)) is None


def test_a_curve_that_only_flattens_has_no_knee():
    assert load.knee([1, 2, 3, 4, 5], [100, 200, 250, 275, 280]) is None


def test_knee_survives_noise_small_against_the_bend():
    rng = random.Random(7)
    loads = list(range(1, 11))
    for _ in range(20):
        p95 = [200 + rng.uniform(-5, 5) + 80 * max(0, x - 6) for x in loads]
        assert load.knee(loads, p95) == 6


def test_knee_needs_three_points_and_skips_levels_without_turns():
    assert load.knee([1, 2], [100, 300]) is None
    assert load.knee([1, 2, 4, 8], [100, None, 100, 500]) == 4
    assert load.knee([1, 2, 4], [100, None, 500]) is None


def test_knee_refuses_loads_out_of_order():
    with pytest.raises(ValueError, match="increase"):
        load.knee([1, 4, 2], [1, 2, 3])


def test_knee_report_names_the_level_and_its_throughput():
    levels = [{"sessions": s, "turns_per_s": s * 1.5, "first_audio_ms": {"p95": 100 + 20 * max(0, s - 4)}}
              for s in GEOMETRIC]
    report = load.knee_report(levels, "first_audio_ms")
    assert (report["sessions"], report["turns_per_s"], report["p95_ms"]) == (4, 6.0, 100)
    assert [d["sessions"] for d in report["second_differences"]] == [2, 4, 8]


# ---------------------------------------------------------------------------------------------- aggregation


def test_level_summary_counts_throughput_errors_and_every_timing_present():
    turns = [turn(100 + i, intent_ms=0.3, llm_queued_ms=1.0, batch_size=2 + i % 2, llm_tokens=40, lane="normal",
                  stages={"intent": 0.3, "queue": 10.0, "prefill": 50.0}) for i in range(10)]
    turns.append(turn(5000, error="overloaded"))
    errors = [ErrorEvent(1.0, "overloaded"), ErrorEvent(1.5, "timeout")]
    out = load.level_summary(turns, errors, seconds=4.0, sessions=3)
    assert (out["sessions"], out["turns"], out["turns_per_s"], out["failed_turns"]) == (3, 10, 2.5, 1)
    assert out["errors"] == {"overloaded": 1, "timeout": 1}
    assert out["first_audio_ms"]["n"] == 10 and out["first_audio_ms"]["p50"] == 104.5
    assert set(out["timings_ms"]) == {"intent_ms", "llm_queued_ms"}
    assert out["counts"]["batch_size"]["mean"] == 2.5 and out["counts"]["llm_tokens"]["p50"] == 40
    assert list(out["stages_ms"]) == ["intent", "queue", "prefill"]
    assert out["lanes"] == {"normal": 10}
    json.dumps(out)


def test_level_summary_of_an_empty_window_has_no_percentiles():
    out = load.level_summary([], [], seconds=2.0, sessions=8)
    assert out["turns"] == 0 and out["turns_per_s"] == 0.0 and out["first_audio_ms"]["p95"] is None


def test_main_latency_is_first_audio_unless_no_turn_had_audio():
    assert load.main_latency([turn(120), turn(None)]) == "first_audio_ms"
    assert load.main_latency([turn(None, reply_done_ms=30)]) == "reply_done_ms"
    assert load.main_latency([turn(120, error="llm_failed")]) == "reply_done_ms"


# ---------------------------------------------------------------------------------------------- slow turns


def test_turn_stages_add_the_clients_extra_time_to_transport():
    record = turn(130, stages={"intent": 1.0, "prefill": 60.0, "decode": 40.0, "tts": 20.0, "transport": 1.0})
    assert load.turn_stages(record, "first_audio_ms") == {"intent": 1.0, "prefill": 60.0, "decode": 40.0,
                                                          "tts": 20.0, "transport": 9.0}


def test_turn_stages_give_the_rest_of_a_reply_to_decode():
    record = turn(None, reply_done_ms=900, stages={"intent": 1.0, "prefill": 99.0})
    assert load.turn_stages(record, "reply_done_ms") == {"intent": 1.0, "prefill": 99.0, "decode": 800.0}


def test_stages_are_derived_from_marks_when_the_server_sends_none():
    marks = {"intent_ms": 0.5, "llm_batch_ms": 300.5, "llm_first_token_ms": 350.0, "first_clause_ms": 450.0,
             "tts_first_audio_ms": 480.0, "first_audio_sent_ms": 481.0}
    assert load.derived_stages(marks) == {"intent": 0.5, "queue": 300.0, "prefill": 49.5, "decode": 100.0,
                                          "tts": 30.0, "transport": 1.0}
    # An older server without queue marks: the queueing cannot be told apart and lands in prefill.
    assert load.derived_stages({"asr_ms": 200.0, "intent_ms": 201.0, "llm_first_token_ms": 500.0}) == {
        "asr": 200.0, "intent": 1.0, "prefill": 299.0}


def test_slow_turn_report_names_the_dominating_stage():
    normal = {"intent": 0.5, "queue": 5.0, "prefill": 60.0, "decode": 30.0, "tts": 20.0, "transport": 1.0}
    turns = [turn(116.5 + i * 0.01, stages=normal) for i in range(200)]
    turns += [turn(900.0 + i, stages=normal | {"queue": 785.0 + i}) for i in range(2)]
    turns += [turn(1000.0, kind="audio", stages=normal | {"asr": 883.5})]
    turns.append(turn(99999.0, error="timeout"))  # failed turns are not latency samples
    report = load.slow_turns(turns, "first_audio_ms", examples=2)
    assert report["turns"] == 3
    assert report["dominant"] == {"queue": 2, "asr": 1}
    assert [s["first_audio_ms"] for s in report["slowest"]] == [1000.0, 901.0]
    assert report["slowest"][0]["dominant"] == "asr" and report["slowest"][0]["stages_from"] == "server"


def test_no_slow_turns_when_all_are_equal():
    report = load.slow_turns([turn(100.0) for _ in range(50)], "first_audio_ms")
    assert report["turns"] == 0 and report["dominant"] == {}


# ---------------------------------------------------------------------------------------------- the report


def synthetic_logs(name_shift: float = 1.0) -> list[LevelLog]:
    """A ramp whose P95 bends at 4 sessions; the window of each level is [10, 20)."""
    logs = []
    for sessions in GEOMETRIC:
        log = LevelLog(sessions, started_s=7.0, window_start_s=10.0, window_end_s=20.0,
                       rss_kib=[(0.0, 1000), (13.0, 1100)])
        base, count = name_shift * (100 + 25 * max(0, sessions - 4)), 10 * sessions
        log.turns += [turn(base * (1 + i / 1000), sessions=sessions, done_s=10 + 9.9 * i / count,
                           batch_size=sessions, stages={"queue": base * (0.5 + i / 1000), "prefill": base / 2})
                      for i in range(count)]
        log.turns.append(turn(1.0, sessions=sessions, done_s=9.0))  # in the warm-up: not counted
        log.errors.append(ErrorEvent(15.0, "overloaded"))
        logs.append(log)
    return logs


def test_report_of_two_servers_has_knees_slow_turns_and_ratios():
    targets = [Target("batching_on", "ws://a/ws", 1), Target("batching_off", "ws://b/ws", 2)]
    logs = {"batching_on": synthetic_logs(), "batching_off": synthetic_logs(2.0)}
    report = load.build_report({"mode": "compare_batching"}, targets, {}, logs)
    on, off = report["servers"]
    assert report["latency"] == "first_audio_ms"
    assert on["knee"]["sessions"] == 4 and off["knee"]["sessions"] == 4
    assert on["levels"][0]["turns"] == 10 and on["levels"][0]["errors"] == {"overloaded": 1}
    assert on["levels"][0]["server_rss_kib"] == {"start": 1000, "end": 1100}
    assert on["slow_turns"]["dominant"]
    row = report["comparison"][2]
    assert row["sessions"] == 4 and row["turns_per_s_ratio"] == 1.0 and row["p95_first_audio_ratio"] == 0.5
    json.dumps(report)


def test_soak_report_compares_first_and_last_windows():
    log = LevelLog(50, started_s=0.0, window_start_s=3.0, window_end_s=603.0,
                   rss_kib=[(0.0, 300_000), (10.0, 310_000), (603.0, 320_000)])
    log.turns += [turn(100.0, done_s=3 + s) for s in range(0, 600, 2)]
    log.turns += [turn(400.0, done_s=550 + s) for s in range(50)]
    log.errors += [ErrorEvent(590.0, "timeout")]
    out = load.soak_report(log, load.soak_window_s(600), "first_audio_ms")
    assert out["window_s"] == 60.0
    assert out["start"]["p95_ms"] == 100.0 and out["end"]["p95_ms"] == 400.0
    assert out["start"]["errors"] == {} and out["end"]["errors"] == {"timeout": 1}
    assert out["server_rss_kib"]["start"] == 300_000 and out["server_rss_kib"]["end"] == 320_000
    assert load.soak_window_s(100) == 10.0


def test_plot_writes_a_png_with_both_servers(tmp_path):
    targets = [Target("batching_on", "ws://a/ws"), Target("batching_off", "ws://b/ws")]
    report = load.build_report({}, targets, {}, {"batching_on": synthetic_logs(), "batching_off": synthetic_logs(2)})
    path = tmp_path / "load.png"
    load.plot(report, path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_plot_copes_with_levels_without_turns(tmp_path):
    logs = synthetic_logs()
    logs[-1].turns.clear()
    report = load.build_report({}, [Target("server", "ws://a/ws")], {}, {"server": logs})
    load.plot(report, tmp_path / "load.png")
    assert (tmp_path / "load.png").read_bytes().startswith(PNG_SIGNATURE)


# ---------------------------------------------------------------------------------------------- options and inputs


def test_options_are_parsed():
    assert load.parse_sessions("1,2,4") == [1, 2, 4]
    assert load.parse_mix("intent=2,llm=1") == {"llm": 1.0, "intent": 2.0, "audio": 0.0}
    assert load.parse_confidence("0.3-1.0") == (0.3, 1.0)
    assert load.parse_confidence("0.95") == (0.95, 0.95)


@pytest.mark.parametrize("parse, flag, bad", [
    (load.parse_sessions, "--sessions", "4,2"), (load.parse_sessions, "--sessions", "0,1"),
    (load.parse_sessions, "--sessions", "a"), (load.parse_mix, "--mix", "llm=0"), (load.parse_mix, "--mix", "chat=1"),
    (load.parse_mix, "--mix", "llm=x"), (load.parse_confidence, "--confidence", "1.2"),
    (load.parse_confidence, "--confidence", "0.9-0.3"),
])
def test_bad_options_are_named(parse, flag, bad):
    with pytest.raises(LoadBenchError, match=f"{flag} '{bad}'"):
        parse(bad)


def test_an_intent_only_mix_asks_for_no_reply_audio():
    assert load.make_plan(bench_args("--mix", "intent=1")).reply_audio is False
    assert load.make_plan(bench_args("--mix", "intent=1", "--reply-audio")).reply_audio is True
    assert load.make_plan(bench_args("--mix", "llm=1,intent=1")).reply_audio is True


@pytest.mark.parametrize("argv, message", [
    (["--compare-batching", "--url", "ws://x/ws"], "leave --url out"),
    (["--duration", "60", "--compare-batching"], "one server"),
    (["--duration", "60", "--plot", "x.png"], "ramp"),
    (["--server-pid", "1"], "--url"),
])
def test_conflicting_options_are_refused(argv, message):
    with pytest.raises(LoadBenchError, match=message):
        load.main(bench_args(*argv))


def test_commands_are_in_the_grammar_and_questions_are_not():
    from voxline.intents import builtin_grammar
    from voxline.server.resolver import IntentResolver

    resolver = IntentResolver(builtin_grammar())
    assert all(resolver.resolve(c, "en").match is not None for c in load.COMMANDS)
    assert all(resolver.resolve(q, "en").match is None for q in QUESTIONS)


def test_spoken_questions_are_16k_pcm16():
    (clip,) = load.speak_questions(1)
    seconds = len(clip) / 2 / 16_000
    assert len(clip) % 2 == 0 and 0.8 < seconds < 5


def test_pacer_keeps_to_the_announced_rate_after_its_burst():
    import asyncio
    import time

    async def send(count: int) -> tuple[float, float]:
        pacer = load.Pacer(200.0, 5)  # paced at 180/s, 3.5 frames of burst
        started, waited = time.perf_counter(), 0.0
        for _ in range(count):
            waited += await pacer.take()
        return time.perf_counter() - started, waited

    elapsed, waited = asyncio.run(send(30))
    assert 0.13 < waited <= elapsed < 0.5  # (30 - 3.5) / 180 s = 0.147 s
    assert asyncio.run(load.Pacer(None, 1).take()) == 0.0


def test_rss_of_a_live_process_and_of_none():
    assert load.server_rss_kib(os.getpid()) > 10_000
    assert load.server_rss_kib(2**22 + 1) is None


def test_an_unreachable_server_is_one_clear_error():
    import asyncio

    plan = load.make_plan(bench_args())
    with pytest.raises(LoadBenchError, match=r"ws://127\.0\.0\.1:9/ws.*voxline serve"):
        asyncio.run(load.probe(Target("server", "ws://127.0.0.1:9/ws"), plan))


# ---------------------------------------------------------------------------------------------- real runs


def run_bench(argv: list[str], capsys) -> dict:
    import concurrent.futures

    # Its own thread: `main` runs its own event loop, which cannot nest in one a browser test left running.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(load.main, bench_args(*argv)).result() == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def smollm_espeak(monkeypatch):
    monkeypatch.setenv("VOXLINE_TTS_ENGINE", "espeak")
    monkeypatch.setenv("VOXLINE_LLM_MODEL", load.DEFAULT_LLM)


def test_real_ramp_against_its_own_server(smollm_espeak, capsys, tmp_path):
    report = run_bench(["--sessions", "1,2", "--level-seconds", "4", "--warmup-seconds", "1",
                        "--mix", "llm=1,intent=2,audio=1", "--plot", str(tmp_path / "load.png")], capsys)
    (server,) = report["servers"]
    assert server["models"]["llm"] == load.DEFAULT_LLM and server["pid"] > 0
    assert report["latency"] == "first_audio_ms"
    assert [lvl["sessions"] for lvl in server["levels"]] == [1, 2]
    assert sum(lvl["turns"] for lvl in server["levels"]) > 0
    for level in server["levels"]:
        assert level["errors"] == {} and level["failed_turns"] == 0
        assert {"turns_per_s", "first_audio_ms", "reply_done_ms", "timings_ms", "stages_ms"} <= level.keys()
        assert level["server_rss_kib"]["start"] > 0
    assert set(server["knee"]) >= {"sessions", "second_differences"}
    assert set(server["slow_turns"]) >= {"p99_ms", "dominant", "slowest"}
    assert (tmp_path / "load.png").read_bytes().startswith(PNG_SIGNATURE)


def test_real_batching_comparison_of_text_intents(smollm_espeak, capsys):
    # 20 sessions from one address, back to back: only possible because the bench's servers lift the abuse limits.
    report = run_bench(["--compare-batching", "--sessions", "1,20", "--level-seconds", "2", "--warmup-seconds",
                        "0.5", "--mix", "intent=1"], capsys)
    assert report["config"]["reply_audio"] is False
    assert report["latency"] == "reply_done_ms"  # no reply audio was asked for, none came
    assert [s["name"] for s in report["servers"]] == ["batching_on", "batching_off"]
    for server in report["servers"]:
        levels = [(lvl["sessions"], lvl["turns"] > 0, lvl["errors"], lvl["paced_s"]) for lvl in server["levels"]]
        assert levels == [(1, True, {}, 0), (20, True, {}, 0)]
        assert all(lvl["first_audio_ms"]["n"] == 0 for lvl in server["levels"])
    row = report["comparison"][0]
    assert row["sessions"] == 1 and row["turns_per_s_ratio"] > 0 and not math.isnan(row["turns_per_s_ratio"])


def test_real_sessions_keep_to_a_servers_rate_limit(smollm_espeak, monkeypatch, capsys):
    # A browser's limits (set in the environment, which wins over the bench's lifted ones): paced, never dropped.
    monkeypatch.setenv("VOXLINE_MAX_MESSAGES_PER_S", "20")
    monkeypatch.setenv("VOXLINE_MAX_MESSAGE_BURST", "40")
    report = run_bench(["--sessions", "1", "--level-seconds", "3", "--warmup-seconds", "0.5", "--mix", "intent=1"],
                       capsys)
    (level,) = report["servers"][0]["levels"]
    assert level["errors"] == {} and level["paced_s"] > 1.0
    assert 10 < level["turns_per_s"] <= 20
