"""`voxline bench cutoffs`: its set, the recorded prompts' selection and resampling, and the scoring of cut-offs
on hand-made event lists."""

from __future__ import annotations

import numpy as np
import pytest

from voxline.bench import audio as test_audio
from e2e.bench.cutoffs import (
    CUT_MARGIN_S,
    DEFAULT_SET,
    Utterance,
    cut_lines,
    figures,
    load_pause_set,
    score,
    single_sentences,
    upsample,
)

SAID = Utterance("turn on the lights in the kitchen", "synthetic", "espeak-gb", np.zeros(1, np.float32), (0.35,))
START, END, UNTIL = 10.0, 12.0, 15.0


def speech_end(audio_t: float, end_t: float, reason: str = "hangover", prob: float | None = 0.2) -> dict:
    return {"name": "speech-end", "audio_t": audio_t, "end_t": end_t, "start_t": START, "reason": reason,
            "turn_prob": prob}


def test_the_shipped_set_is_well_formed_and_every_line_has_a_pause():
    lines = load_pause_set(DEFAULT_SET)
    assert len(lines) >= 30
    assert all(len(phrases) >= 2 and all(phrases) for phrases in lines)


def test_a_line_without_a_pause_is_refused_with_its_place(tmp_path):
    bad = tmp_path / "set.txt"
    bad.write_text("# fine\nturn on | the lights\nno pause here\n")
    with pytest.raises(ValueError, match=r"set.txt:3"):
        load_pause_set(bad)


def test_only_single_sentences_without_notes_are_chosen_from_the_transcripts():
    transcripts = "\n".join([
        "; header",
        "at-tone-time-exactly: At the sound of the tone, the time will be exactly...",
        "agent-user: Agent login.  Please enter your agent number followed by the pound key.",
        "beep: [this is a simple beep tone]",
        "spy-iax2: IAX (note: does not say \"2\")",
        "calling: Calling.",
        "digits/1: One.",
    ])
    assert single_sentences(transcripts) == [
        ("at-tone-time-exactly", "At the sound of the tone, the time will be exactly")]


def test_upsampling_keeps_a_tone_in_band_and_its_level():
    rate = 8000
    t = np.arange(rate) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = upsample(tone, rate)
    assert len(out) == len(tone) * test_audio.RATE // rate
    middle = out[len(out) // 4: 3 * len(out) // 4]
    assert abs(np.sqrt((middle ** 2).mean()) - 0.5 / np.sqrt(2)) < 0.01
    spectrum = np.abs(np.fft.rfft(middle))
    freqs = np.fft.rfftfreq(len(middle), 1 / test_audio.RATE)
    assert spectrum[freqs > 4000].max() < 0.01 * spectrum.max(), "no images above the old Nyquist"
    with pytest.raises(ValueError):
        upsample(tone, 44100)


def test_a_turn_ended_inside_the_utterance_is_a_cut_and_its_end_is_still_measured():
    events = [speech_end(11.6, 11.1, "smart-turn", 0.91), speech_end(12.71, 11.98)]
    out = score(SAID, START, END, UNTIL, events)
    assert out["cut"] and out["turn_ended_inside"] and not out["acted_inside"]
    assert out["cuts"] == [{"after_s": 1.1, "reason": "smart-turn", "turn_prob": 0.91}]
    assert out["eos_to_turn_over_ms"] == pytest.approx(710.0)
    assert out["turn_over_reason"] == "hangover"


def test_an_end_within_the_margin_is_the_same_end_not_a_cut():
    out = score(SAID, START, END, UNTIL, [speech_end(12.5, END - CUT_MARGIN_S + 0.05, "smart-turn")])
    assert not out["cut"]
    assert out["eos_to_turn_over_ms"] == pytest.approx(500.0)


def test_a_command_acted_on_before_the_utterance_ended_is_a_cut():
    events = [{"name": "intent", "audio_t": 11.7, "intent": "lights.on", "text": "turn on the lights",
               "source": "local", "early": True}, speech_end(12.7, 12.0)]
    out = score(SAID, START, END, UNTIL, events)
    assert out["cut"] and out["acted_inside"] and not out["turn_ended_inside"]
    assert "acted on 'turn on the lights' (local)" in cut_lines([out | {"config": "voxline"}])[0]


def test_events_of_the_neighbouring_utterances_are_not_counted():
    events = [speech_end(9.5, 9.0, "smart-turn"), speech_end(12.7, 12.0), speech_end(15.2, 14.9, "smart-turn")]
    assert not score(SAID, START, END, UNTIL, events)["cut"]


def test_figures_count_cuts_by_kind_and_by_the_longest_pause():
    clean = score(SAID, START, END, UNTIL, [speech_end(12.7, 12.0)])
    cut = score(SAID, START, END, UNTIL, [speech_end(11.6, 11.1, "smart-turn"), speech_end(12.7, 12.0)])
    recorded = score(Utterance("Please try again", "recorded", "asterisk", np.zeros(1)), START, END, UNTIL, [])
    f = figures([clean, cut, recorded])
    assert f["cut_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert f["cut_rate_by_kind"] == {"synthetic": 0.5, "recorded": 0.0}
    assert f["cut_rate_by_longest_pause"] == {"350ms": 0.5}
    assert f["eos_to_turn_over_ms"]["n"] == 2
    assert f["turn_over_reasons"] == {"hangover": 2, "None": 1}


def test_the_command_line_reaches_the_benchmark_with_its_defaults():
    from voxline.cli import build_parser

    args = build_parser().parse_args(["bench", "cutoffs", "--baseline-query", "&vx.commandSilenceSecs=0"])
    assert (args.set, args.recorded, args.limit, args.baseline_query) == (None, 48, None, "&vx.commandSilenceSecs=0")
    assert args.func.__name__ == "_cmd_bench" and args.bench_command == "cutoffs"
