"""Reply speech: hibari (default) and espeak-ng (fallback) give trimmed, normalised, non-silent 24 kHz clauses."""

from __future__ import annotations

import numpy as np
import pytest

from voxline.errors import ModelError
from voxline.tts import (
    HIBARI_FILE,
    PEAK_CEILING_DBFS,
    SAMPLE_RATE_HZ,
    TARGET_RMS_DBFS,
    EspeakSynth,
    HibariSynth,
    Synthesizer,
    finish,
    normalize_loudness,
    to_pcm16,
    trim_silence,
)

CLAUSE = "The capital of France is Paris."


def dbfs(samples: np.ndarray) -> float:
    return 20.0 * np.log10(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def leading_silence_ms(samples: np.ndarray, relative_db: float = -30.0) -> float:
    threshold = np.max(np.abs(samples)) * 10 ** (relative_db / 20)
    return float(np.flatnonzero(np.abs(samples) > threshold)[0]) * 1000.0 / SAMPLE_RATE_HZ


@pytest.fixture(scope="module")
def hibari(model_dir):
    return HibariSynth(model_dir("hibari-heart") / HIBARI_FILE)


@pytest.fixture(scope="module")
def espeak():
    return EspeakSynth()


@pytest.fixture(params=["hibari", "espeak"])
def synth(request) -> Synthesizer:
    return request.getfixturevalue(request.param)


def test_both_engines_are_synthesizers(hibari, espeak):
    assert isinstance(hibari, Synthesizer) and isinstance(espeak, Synthesizer)
    assert hibari.sample_rate == espeak.sample_rate == SAMPLE_RATE_HZ


def test_a_clause_is_non_silent_24khz_speech_of_plausible_length(synth):
    audio = synth.synthesize(CLAUSE)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0.8 < audio.size / SAMPLE_RATE_HZ < 4.0  # six words of speech
    assert dbfs(audio) > -30.0


def test_leading_silence_is_trimmed(synth):
    assert leading_silence_ms(synth.synthesize(CLAUSE)) < 30.0


def test_raw_hibari_starts_with_the_silence_that_trimming_removes(hibari):
    raw = np.concatenate(list(hibari._voice.stream(CLAUSE)))
    assert leading_silence_ms(raw) > 150.0


def test_loudness_is_normalised_without_clipping(synth):
    audio = synth.synthesize(CLAUSE)
    assert np.max(np.abs(audio)) <= 10 ** (PEAK_CEILING_DBFS / 20) + 1e-6
    assert dbfs(audio) == pytest.approx(TARGET_RMS_DBFS, abs=3.0)


def test_two_sentences_in_one_clause_keep_a_short_gap(hibari):
    one = hibari.synthesize("Paused.")
    two = hibari.synthesize("Paused. Paused.")
    assert 2 * one.size < two.size < 2 * one.size + SAMPLE_RATE_HZ // 2


def test_espeak_refuses_a_voice_it_does_not_have():
    # espeak-ng itself would quietly speak with its default voice instead.
    with pytest.raises(ModelError, match="no voice"):
        EspeakSynth(voice="no-such-voice")
    assert EspeakSynth(voice="en-gb+f3").voice == "en-gb+f3"


def test_text_with_nothing_to_say_gives_empty_audio(hibari):
    assert hibari.synthesize("🙂").size == 0


def test_trim_keeps_short_pads_around_the_voiced_part():
    rate = SAMPLE_RATE_HZ
    tone = 0.5 * np.sin(np.linspace(0, 200 * np.pi, rate // 2)).astype(np.float32)
    padded = np.concatenate([np.zeros(rate), tone, np.zeros(rate)]).astype(np.float32)
    trimmed = trim_silence(padded)
    assert tone.size < trimmed.size < tone.size + rate * 0.2
    assert trim_silence(np.zeros(100, np.float32)).size == 0


def test_normalisation_respects_the_peak_ceiling():
    spiky = np.zeros(24_000, np.float32)
    spiky[100] = 0.1  # tiny RMS, so the RMS target alone would clip the spike
    out = normalize_loudness(spiky)
    assert np.max(np.abs(out)) == pytest.approx(10 ** (PEAK_CEILING_DBFS / 20), rel=1e-4)


def test_finish_of_nothing_is_empty():
    assert finish([]).size == 0


def test_pcm16_is_little_endian_and_clipped():
    pcm = to_pcm16(np.array([0.0, 0.5, -2.0, 2.0], np.float32))
    assert np.frombuffer(pcm, "<i2").tolist() == [0, 16384, -32767, 32767]
