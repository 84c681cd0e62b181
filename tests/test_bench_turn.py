"""`voxline bench turn`: the question set, keyword scoring, attribution of page events to questions, the report's
arithmetic and the speculation counters, on hand-made inputs (no browser, no server)."""

from __future__ import annotations

import pytest

from e2e.bench.turn import (
    DEFAULT_SET,
    Asked,
    Question,
    QuestionSetError,
    add_difference,
    browser_configs,
    compare,
    is_right,
    load_questions,
    parse_speculation,
    score,
    side_report,
    speculation_report,
    wrong_lines,
)

CAPITAL = Question("what is the capital of spain", ("madrid",), "fact")
SUM = Question("what is seven times eight", ("56", "fifty six"), "arithmetic")
ASKED = Asked(CAPITAL, "espeak-gb", start_s=10.0, end_s=12.0, until_s=22.0)


@pytest.fixture(scope="module")
def questions():
    return load_questions(DEFAULT_SET)


# --- the set ---

def test_the_shipped_set_has_at_least_sixty_questions_each_with_keywords(questions):
    assert len(questions) >= 60
    assert all(q.expect and all(k.strip() for k in q.expect) for q in questions)


def test_the_shipped_set_has_no_duplicate_questions(questions):
    texts = [" ".join(q.text.lower().split()) for q in questions]
    assert len(texts) == len(set(texts))


def test_every_kind_is_asked_several_times(questions):
    from e2e.bench.turn import KINDS

    assert all(sum(q.kind == kind for q in questions) >= 5 for kind in KINDS)


def test_no_question_is_a_device_command(questions):
    from voxline.intents import builtin_grammar, recognize

    grammar = builtin_grammar()
    assert [q.text for q in questions if recognize(q.text, grammar)] == []


def test_no_keyword_is_already_in_its_question(questions):
    # A reply that only repeats the question would otherwise count as right.
    assert [(q.text, k) for q in questions for k in q.expect if is_right(q.text, (k,))] == []


@pytest.mark.parametrize(("line", "complaint"), [
    ("not json", "not JSON"),
    ('{"text": "why", "expect": [], "kind": "fact"}', "non-empty list"),
    ('{"text": "why", "expect": ["Paris"], "kind": "fact"}', "lowercase"),
    ('{"text": "why", "expect": ["?!"], "kind": "fact"}', "keywords"),
    ('{"text": "why", "expect": ["x"], "kind": "joke"}', "kind must be"),
    ('{"text": "", "expect": ["x"], "kind": "fact"}', "text must be"),
    ('{"text": "why", "expect": ["x"]}', "text, expect and kind"),
])
def test_a_malformed_line_is_refused_with_its_line_number(tmp_path, line, complaint):
    path = tmp_path / "set.jsonl"
    path.write_text('{"text": "fine", "expect": ["ok"], "kind": "fact"}\n' + line + "\n")
    with pytest.raises(QuestionSetError, match=rf"set.jsonl:2: .*{complaint}"):
        load_questions(path)


# --- keyword scoring ---

@pytest.mark.parametrize("reply", [
    "The capital of Spain is Madrid.", "MADRID!", "It's Madrid, in the middle of the country."])
def test_a_reply_with_the_keyword_is_right(reply):
    assert is_right(reply, CAPITAL.expect)


@pytest.mark.parametrize("reply", ["Seven times eight is 56.", "That's fifty-six.", "It is fifty six"])
def test_numbers_count_as_digits_or_words(reply):
    assert is_right(reply, SUM.expect)


@pytest.mark.parametrize("reply", [
    "The capital of Spain is Barcelona.", "It's 156.", "5.6", "", None, "madridista is not a city"])
def test_a_reply_without_the_keyword_as_a_whole_word_is_not_right(reply):
    assert not is_right(reply, CAPITAL.expect + SUM.expect)


def test_a_short_keyword_is_not_found_inside_another_word():
    assert not is_right("Because gold is precious.", ("au",))
    assert is_right("Its symbol is Au.", ("au",))


def test_thousands_commas_and_decimals_are_kept_in_numbers():
    assert is_right("About 1,000 metres.", ("1000",))
    assert is_right("Pi is 3.14.", ("3.14",))
    assert not is_right("Pi is 3.14.", ("3",))


# --- attribution of page events ---

def audio(t: float, turn_id: int) -> dict:
    return {"name": "reply-audio", "audio_t": t, "first": True, "turn_id": turn_id}


def reply(t: float, turn_id: int, text: str, final: bool = True) -> dict:
    return {"name": "reply", "audio_t": t, "turn_id": turn_id, "text": text, "final": final}


def speech_end(t: float, end_t: float) -> dict:
    return {"name": "speech-end", "audio_t": t, "end_t": end_t}


def test_first_audio_turn_over_and_the_final_reply_of_the_same_turn():
    events = [speech_end(12.6, 12.1),
              {"name": "transcript", "audio_t": 12.8, "final": True, "end_t": 12.1, "text": "capital of spain"},
              reply(13.0, 3, "The capital", final=False), audio(13.4, 3),
              {"name": "reply-audio", "audio_t": 15.0, "last": True, "turn_id": 3},
              reply(14.0, 3, "The capital of Spain is Madrid.")]
    outcome = score(ASKED, events)
    assert outcome["eos_to_first_audio_ms"] == pytest.approx(1400.0)
    assert outcome["eos_to_turn_over_ms"] == pytest.approx(600.0)
    assert outcome["right"] and not outcome["missed"] and not outcome["audio_before_end"]
    assert outcome["reply"] == "The capital of Spain is Madrid." and outcome["heard"] == "capital of spain"


def test_a_turn_cut_inside_the_question_is_not_its_turn_over_nor_its_answer():
    events = [speech_end(11.2, 10.9), audio(11.8, 1), reply(12.5, 1, "What about it?"),
              speech_end(12.7, 12.0), audio(13.0, 2), reply(13.5, 2, "Madrid.")]
    outcome = score(ASKED, events)
    assert outcome["eos_to_turn_over_ms"] == pytest.approx(700.0)
    assert outcome["eos_to_first_audio_ms"] == pytest.approx(1000.0)
    assert outcome["audio_before_end"] and outcome["right"]


def test_a_late_final_reply_still_belongs_to_its_turn():
    # the next question barged in on the playback; the reply's text came after that
    events = [speech_end(12.5, 12.0), audio(13.0, 4), reply(23.0, 4, "Madrid is the capital.")]
    assert score(ASKED, events)["right"]


def test_without_a_final_reply_the_last_partial_text_of_the_turn_is_scored():
    events = [audio(13.0, 4), reply(13.1, 4, "Mad", final=False), reply(13.3, 4, "Madrid is", final=False)]
    assert score(ASKED, events)["reply"] == "Madrid is"


def test_no_reply_audio_before_the_next_question_is_a_missed_turn():
    events = [speech_end(12.5, 12.0), audio(22.5, 5),
              {"name": "transcript", "audio_t": 12.7, "final": True, "end_t": 12.0, "text": "capital of spain"},
              reply(14.0, 5, "Madrid.")]
    outcome = score(ASKED, events)
    assert outcome["missed"] and outcome["eos_to_first_audio_ms"] is None
    assert outcome["reply"] == "Madrid." and outcome["right"]  # the text without sound is still scored


def test_events_of_another_question_are_not_taken():
    events = [speech_end(3.5, 3.0), audio(4.0, 1), reply(5.0, 1, "Madrid."), speech_end(24.0, 23.5)]
    outcome = score(ASKED, events)
    assert outcome["missed"] and outcome["eos_to_turn_over_ms"] is None and outcome["reply"] is None


# --- the report's arithmetic ---

def outcome(voice: str, first_audio: float | None, turn_over: float, right: bool, kind: str = "fact") -> dict:
    return {"text": "q", "kind": kind, "voice": voice, "eos_to_first_audio_ms": first_audio,
            "eos_to_turn_over_ms": turn_over, "reply": "r" if right else None, "right": right,
            "missed": first_audio is None, "audio_before_end": False, "config": "voxline"}


def test_side_report_counts_accuracy_over_every_question_and_splits_by_voice_and_kind():
    outcomes = [outcome("a", 1000.0, 500.0, True), outcome("a", 2000.0, 600.0, False, "advice"),
                outcome("b", 3000.0, 700.0, True), outcome("b", None, 800.0, False)]
    side = side_report(outcomes, {"confirmed": 2, "cancelled": 1, "wasted_tokens": 30})
    assert side["n"] == 4 and side["right"] == 2 and side["keyword_accuracy"] == 0.5 and side["missed"] == 1
    assert side["eos_to_first_audio_ms"] == {"p50": 2000.0, "p95": 2900.0, "p99": 2980.0, "n": 3}
    assert side["eos_to_turn_over_ms"]["p50"] == 650.0
    assert side["by_voice"]["a"]["keyword_accuracy"] == 0.5 and side["by_voice"]["b"]["missed"] == 1
    assert side["keyword_accuracy_by_kind"] == {"fact": pytest.approx(2 / 3, abs=1e-4), "advice": 0.0}
    assert side["speculation"]["wasted_tokens"] == 30


def test_compare_gives_latency_ratios_and_the_accuracy_difference():
    fast = side_report([outcome("a", 500.0, 400.0, False), outcome("a", 700.0, 400.0, True)], None)
    slow = side_report([outcome("a", 1000.0, 800.0, True), outcome("a", 1400.0, 800.0, True)], None)
    out = compare({"voxline": fast, "baseline": slow}, "voxline", "baseline")
    assert out["first_audio_p50"] == 0.5 and out["turn_over_p50"] == 0.5
    assert out["keyword_accuracy_difference"] == -0.5 and out["missed_difference"] == 0


def test_wrong_lines_name_the_question_and_the_reply():
    lines = wrong_lines([outcome("a", 1000.0, 1.0, True), outcome("b", None, 1.0, False)])
    assert lines == ["voxline\tb\t'q'\theard None\tno reply\t(missed: no reply audio)"]


# --- speculation counters ---

EXPOSITION = """# HELP voxline_speculative_turns_total Speculative turns
# TYPE voxline_speculative_turns_total counter
voxline_speculative_turns_total{outcome="confirmed"} 5.0
voxline_speculative_turns_total{outcome="cancelled"} 2.0
# HELP voxline_speculative_wasted_tokens_total Tokens of cancelled speculative turns
# TYPE voxline_speculative_wasted_tokens_total counter
voxline_speculative_wasted_tokens_total 41.0
# HELP voxline_up_seconds Seconds since the server started
# TYPE voxline_up_seconds gauge
voxline_up_seconds 12.0
"""


def test_the_counters_are_read_from_the_exposition():
    assert parse_speculation(EXPOSITION) == {"confirmed": 5.0, "cancelled": 2.0, "wasted_tokens": 41.0}


def test_a_missing_metric_reads_none_and_garbage_reads_none():
    empty = {"confirmed": None, "cancelled": None, "wasted_tokens": None}
    assert parse_speculation("# TYPE voxline_up_seconds gauge\nvoxline_up_seconds 1.0\n") == empty
    assert parse_speculation("this is { not prometheus") == empty


def test_a_labelled_counter_that_never_counted_reads_zero():
    text = "# HELP voxline_speculative_turns_total x\n# TYPE voxline_speculative_turns_total counter\n"
    assert parse_speculation(text) == {"confirmed": 0.0, "cancelled": 0.0, "wasted_tokens": None}


def test_the_counters_of_the_real_client_library_are_read():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    turns = Counter("voxline_speculative_turns", "x", ["outcome"], registry=registry)
    wasted = Counter("voxline_speculative_wasted_tokens", "x", registry=registry)
    turns.labels("cancelled").inc(3)
    wasted.inc(17)
    assert parse_speculation(generate_latest(registry).decode()) == {
        "confirmed": 0.0, "cancelled": 3.0, "wasted_tokens": 17.0}


def test_differences_are_summed_over_pages_and_a_missing_side_stays_none():
    before = {"confirmed": 1.0, "cancelled": 0.0, "wasted_tokens": None}
    after = {"confirmed": 4.0, "cancelled": 2.0, "wasted_tokens": 9.0}
    total = add_difference(None, before, after)
    assert total == {"confirmed": 3, "cancelled": 2, "wasted_tokens": None}
    total = add_difference(total, after, {"confirmed": 5.0, "cancelled": 2.0, "wasted_tokens": 12.0})
    assert total == {"confirmed": 4, "cancelled": 2, "wasted_tokens": None}


def test_speculative_turns_are_timed_from_their_confirmation_beside_turns_sent_at_once():
    report = speculation_report([1000.0, 1200.0, 1400.0], [{"first_audio_ms": 700.0}, {"first_audio_ms": 950.0},
                                                           {"first_audio_ms": None}], 250.0)["speculative"]
    assert report["head_start_ms"] == 250.0 and report["confirm_to_first_audio_ms"]["n"] == 2
    assert report["ratio_vs_sent_at_once"]["p50"] < 1


def test_a_baseline_server_is_compared_over_all_questions_and_those_its_classifier_asked_its_model():
    from e2e.bench.turn import baseline_server_report

    ours = [{"first_audio_ms": 600.0}, {"first_audio_ms": 620.0}, {"first_audio_ms": 500.0}, {"first_audio_ms": None}]
    theirs = [{"first_audio_ms": 1100.0, "stages": {"classify": 480.0}},
              {"first_audio_ms": 1200.0, "stages": {"classify": 530.0}},
              {"first_audio_ms": 510.0, "stages": {"classify": 0.4}},  # refused before the model
              {"first_audio_ms": 700.0}]                               # the grammar answered: no classifier
    report = baseline_server_report(ours, theirs, {"classify_beside_chat": False})
    assert report["settings"] == {"classify_beside_chat": False}
    assert report["server_first_audio_ms"]["n"] == 4 and report["ratio"]["p50"] < 1
    asked = report["classifier_asked"]
    assert asked["questions"] == 2
    assert asked["server_first_audio_ms"]["p50"] in (600.0, 620.0, 610.0)
    assert asked["baseline_first_audio_ms"]["p50"] in (1100.0, 1200.0, 1150.0)
    assert asked["ratio"]["p50"] == pytest.approx(asked["server_first_audio_ms"]["p50"]
                                                  / asked["baseline_first_audio_ms"]["p50"], abs=0.01)


def test_baseline_server_settings_alone_make_a_baseline_page():
    configs = browser_configs(["hibari-1"], None, {"classify_beside_chat": False})
    assert [c.name for c in configs] == ["voxline", "baseline"]
    assert configs[1].server == {"classify_beside_chat": False} and configs[1].query == ""
    assert [c.name for c in browser_configs(["hibari-1"], None)] == ["voxline"]
