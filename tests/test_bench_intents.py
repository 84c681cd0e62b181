"""Scoring of `voxline bench intents --set` on hand-made event lists, and the noisy copies' SNR."""

from __future__ import annotations

import numpy as np
import pytest

from voxline.bench import audio as test_audio
from e2e.bench.intents import (
    SetItem,
    Spoken,
    build_pages,
    error_lines,
    figures,
    limit_items,
    score,
    set_report,
    slots_match,
)

VOLUME_40 = SetItem("set the volume to forty", "media.volume_set", {"level": 40}, "command")
STOP = SetItem("stop", "assistant.stop", {}, "one-word", ("media.stop",))
PIANO = SetItem("I play the piano", None, {}, "ood")


def heard(item: SetItem, condition: str = "clean", first_pass: bool = True) -> Spoken:
    """The item spoken from 10.0 to 11.5 s, the next utterance starting at 14.0 s."""
    return Spoken(item, "espeak-gb", condition, first_pass, start_s=10.0, end_s=11.5, until_s=14.0)


def intent(audio_t: float, name: str, slots: dict | None = None, source: str = "local") -> dict:
    return {"name": "intent", "audio_t": audio_t, "intent": name, "slots": slots or {}, "source": source,
            "text": "", "confidence": 0.9}


def final(audio_t: float, text: str, end_t: float | None = None) -> dict:
    event = {"name": "transcript", "audio_t": audio_t, "text": text, "final": True, "confidence": 0.8}
    return event if end_t is None else event | {"end_t": end_t}


def speech_end(audio_t: float, end_t: float) -> dict:
    return {"name": "speech-end", "audio_t": audio_t, "end_t": end_t, "reason": "hangover"}


def test_a_right_intent_with_right_slots_scores_both_and_its_latency_from_end_of_speech():
    o = score(heard(VOLUME_40), [final(11.6, "set the volume to 40"), intent(11.62, "media.volume_set", {"level": 40})])
    assert (o["intent_ok"], o["slots_ok"], o["source"], o["heard"]) == (True, True, "local", "set the volume to 40")
    assert o["eos_to_intent_ms"] == pytest.approx(120.0)


def test_a_wrong_slot_value_is_right_intent_but_wrong_slots():
    o = score(heard(VOLUME_40), [intent(11.7, "media.volume_set", {"level": 14})])
    assert (o["intent_ok"], o["slots_ok"]) == (True, False)


def test_only_the_first_intent_in_the_window_counts():
    o = score(heard(VOLUME_40), [intent(11.7, "media.volume_up"), intent(12.0, "media.volume_set", {"level": 40})])
    assert (o["got"], o["intent_ok"]) == ("media.volume_up", False)


def test_intents_outside_the_utterances_window_are_not_its_own():
    events = [intent(9.9, "media.volume_set", {"level": 40}), intent(14.0, "media.volume_set", {"level": 40})]
    o = score(heard(VOLUME_40), events)
    assert (o["got"], o["source"], o["eos_to_intent_ms"], o["intent_ok"]) == (None, "none", None, False)


def test_a_late_answer_is_credited_to_the_utterance_whose_speech_it_answers():
    # Loaded machine: the turn ended at 11.55 s, but its transcript and intent come after the next utterance began.
    events = [speech_end(14.2, 11.55), final(14.9, "set the volume to 40", end_t=11.55),
              intent(15.0, "media.volume_set", {"level": 40})]
    o = score(heard(VOLUME_40), events)
    assert (o["intent_ok"], o["slots_ok"], o["eos_to_intent_ms"]) == (True, True, pytest.approx(3500.0))
    later = Spoken(PIANO, "espeak-gb", "clean", True, start_s=14.0, end_s=15.2, until_s=18.0)
    assert score(later, events)["got"] is None  # not a false accept of the next utterance


def test_an_early_intent_belongs_to_the_turn_that_ends_after_it():
    events = [intent(11.3, "media.volume_set", {"level": 40}) | {"early": True}, speech_end(12.3, 11.55),
              final(12.4, "set the volume to 40", end_t=11.55)]
    o = score(heard(VOLUME_40), events)
    assert (o["slots_ok"], o["eos_to_intent_ms"]) == (True, pytest.approx(-200.0))


def test_an_alternative_intent_is_accepted_for_an_ambiguous_word():
    assert score(heard(STOP), [intent(11.6, "media.stop")])["intent_ok"]
    assert not score(heard(STOP), [intent(11.6, "media.pause")])["intent_ok"]


def test_out_of_domain_is_right_only_when_nothing_acts_and_a_chat_reply_is_noted():
    quiet = score(heard(PIANO), [final(11.6, "I play the piano"), {"name": "reply", "audio_t": 12.5, "text": "Nice"}])
    assert (quiet["intent_ok"], quiet["slots_ok"], quiet["replied"]) == (True, True, True)
    accepted = score(heard(PIANO), [intent(11.6, "media.play", {"query": "the piano"}, "server")])
    assert (accepted["intent_ok"], accepted["slots_ok"]) == (False, False)


@pytest.mark.parametrize("expected, got, same", [
    ({"query": "jazz"}, {"query": "some jazz"}, True),
    ({"query": "the beatles"}, {"query": "Beatles"}, True),
    ({}, {"query": "some music"}, True),
    ({}, {"query": "jazz"}, False),
    ({"query": "jazz"}, {}, False),
    ({"query": "relaxing piano"}, {"query": "relaxing"}, False),
    ({"level": 40}, {"level": 40.0}, True),
    ({"level": 40}, {"level": "40"}, False),
    ({"area": "living_room"}, {"area": "living_room"}, True),
    ({"area": "living_room"}, {}, False),
    ({}, {"area": "kitchen"}, False),
    ({"seconds": 600}, {"seconds": 600}, True),
])
def test_slots_match(expected, got, same):
    assert slots_match(expected, got) is same


def outcome(item: SetItem, events: list[dict], condition: str = "clean", first_pass: bool = True) -> dict:
    return score(heard(item, condition, first_pass), events) | {"config": "voxline"}


def test_figures_count_accuracy_false_accepts_on_device_and_latency_per_source():
    outcomes = [
        outcome(VOLUME_40, [intent(11.6, "media.volume_set", {"level": 40}, "local")]),
        outcome(VOLUME_40, [intent(12.5, "media.volume_set", {"level": 41}, "server")]),
        outcome(VOLUME_40, []),
        outcome(STOP, [intent(11.55, "assistant.stop", source="cache")]),
        outcome(STOP, [intent(12.0, "assistant.stop", source="server")]),
        outcome(PIANO, []),
        outcome(PIANO, [intent(11.6, "media.play", {"query": "piano"}, "server")]),
    ]
    f = figures(outcomes)
    assert f["commands"] == {"n": 3, "intent_accuracy": round(2 / 3, 4), "intent_slots_accuracy": round(1 / 3, 4)}
    assert f["one_word"] == {"n": 2, "intent_accuracy": 1.0, "on_device": 0.5, "on_device_and_right": 0.5}
    assert f["ood"] == {"n": 2, "false_accepts": 1, "false_accept_rate": 0.5}
    assert f["sources"] == {"cache": 1, "local": 1, "server": 2, "none": 1}
    assert f["eos_to_intent_ms"]["local"]["p50"] == pytest.approx(100.0)
    assert f["eos_to_intent_ms"]["server"]["n"] == 2


def test_report_splits_conditions_voices_second_hearing_and_compares_local_latency():
    ours = [outcome(VOLUME_40, [intent(11.6, "media.volume_set", {"level": 40})]),
            outcome(VOLUME_40, [intent(11.65, "media.volume_set", {"level": 40})], condition="noisy"),
            outcome(VOLUME_40, [intent(11.52, "media.volume_set", {"level": 40}, "cache")], first_pass=False)]
    base = [outcome(VOLUME_40, [intent(11.7, "media.volume_set", {"level": 40})]) | {"config": "baseline"},
            outcome(VOLUME_40, [], condition="noisy") | {"config": "baseline"}]
    report = set_report({"voxline": ours, "baseline": base})
    assert report["voxline"]["by_condition"]["noisy"]["commands"]["intent_slots_accuracy"] == 1.0
    assert report["baseline"]["by_condition"]["noisy"]["commands"]["intent_slots_accuracy"] == 0.0
    assert report["voxline"]["commands"]["n"] == 2  # the second hearing is reported apart
    assert report["voxline"]["second_hearing"]["sources"]["cache"] == 1
    assert "second_hearing" not in report["baseline"]
    assert set(report["voxline"]["by_voice"]) == {"espeak-gb/clean", "espeak-gb/noisy"}
    assert report["local_latency_ratio"]["of"] == "voxline / baseline"
    # P50 of 100 and 150 ms against 200 ms
    assert report["local_latency_ratio"]["p50"] == pytest.approx(125 / 200, abs=1e-3)


def test_error_lines_name_what_was_said_expected_got_and_source():
    lines = error_lines([outcome(VOLUME_40, [final(11.6, "set the volume to fourteen"),
                                             intent(11.7, "media.volume_set", {"level": 14})]),
                         outcome(PIANO, [])])
    assert len(lines) == 1
    assert "'set the volume to forty'" in lines[0] and "expected media.volume_set" in lines[0]
    assert '"level": 14' in lines[0] and "source local" in lines[0] and "fourteen" in lines[0]


def test_an_early_act_says_the_words_it_was_read_from():
    early = intent(11.0, "media.previous") | {"early": True, "text": "last track", "confidence": 0.83}
    o = outcome(SetItem("next track please", "media.next", {}, "command"), [early, final(11.8, "next track please")])
    assert (o["early"], o["acted_on"], o["acted_confidence"]) == (True, "last track", 0.83)
    [line] = error_lines([o])
    assert "heard 'next track please'" in line and "acted on 'last track' (early)" in line


def test_limit_spreads_over_the_whole_set():
    items = [SetItem(f"c{i}", "clock.time", {}, "command") for i in range(80)] + \
            [SetItem(f"o{i}", None, {}, "ood") for i in range(20)]
    picked = limit_items(items, 10)
    assert len(picked) == 10 and sum(i.kind == "ood" for i in picked) == 2
    assert limit_items(items, None) == items
    with pytest.raises(ValueError):
        limit_items(items, 0)


@pytest.mark.parametrize("kind", ["pink", "white"])
def test_noise_is_added_at_the_stated_snr_and_is_seeded(kind):
    speech = test_audio.level(np.random.default_rng(1).standard_normal(48000).astype(np.float32))
    noisy = test_audio.add_noise(speech, 10.0, kind, seed=3)
    added = noisy - speech
    snr = 10 * np.log10((speech**2).mean() / (added**2).mean())
    assert snr == pytest.approx(10.0, abs=0.05)
    assert np.array_equal(noisy, test_audio.add_noise(speech, 10.0, kind, seed=3))
    assert not np.array_equal(noisy, test_audio.add_noise(speech, 10.0, kind, seed=4))


def test_pink_noise_falls_about_3_db_per_octave():
    power = np.abs(np.fft.rfft(test_audio.noise(48000 * 4, "pink", seed=0))) ** 2
    freqs = np.fft.rfftfreq(48000 * 4, 1 / 48000)
    band = lambda lo: 10 * np.log10(power[(freqs >= lo) & (freqs < 2 * lo)].mean())  # noqa: E731
    assert band(500) - band(1000) == pytest.approx(3.0, abs=0.5)
    assert band(1000) - band(2000) == pytest.approx(3.0, abs=0.5)


def test_an_unknown_noise_kind_is_refused():
    with pytest.raises(ValueError, match="noise kind 'brown'"):
        test_audio.noise(100, "brown")


def test_pages_hold_every_item_per_voice_with_a_noisy_copy_and_a_second_hearing_of_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLINE_CACHE", str(tmp_path / "cache"))
    items = [VOLUME_40, STOP, PIANO]
    pages, spoken = build_pages(items, ["espeak-gb", "espeak-us"], 10.0, tmp_path, second_hearing=True)
    assert [p.label for p in pages] == ["espeak-gb/clean/0", "espeak-gb/noisy/0", "espeak-us/clean/0",
                                        "espeak-us/noisy/0"]
    clean, noisy = (test_audio.read_wav(p.wav) for p in pages[:2])
    assert clean.shape == noisy.shape and not np.array_equal(clean, noisy)
    said = [spoken[("espeak-gb/noisy/0", i)] for i in range(len(pages[1].placed))]
    assert sorted(s.item.text for s in said if s.first_pass) == sorted(i.text for i in items)
    assert sorted(s.item.text for s in said if not s.first_pass) == sorted([VOLUME_40.text, STOP.text])
    assert all(s.condition == "noisy" and s.voice == "espeak-gb" for s in said)
    assert all(a.end_s <= a.until_s == b.start_s for a, b in zip(said, said[1:]))
    assert list((tmp_path / "cache" / "bench-audio").glob("*.npy"))  # renders are cached


def test_baseline_server_settings_are_read_like_their_environment_variables():
    from e2e.bench.intents import server_settings

    assert server_settings(["intent_neighbours=off", "intent_classifier=llm"]) == {
        "intent_neighbours": False, "intent_classifier": "llm"}
    for bad in (["no_such_setting=1"], ["intent_neighbours"], ["intent_neighbours=maybe"]):
        with pytest.raises((SystemExit, ValueError)):
            server_settings(bad)
