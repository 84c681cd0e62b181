"""Server re-recognition: Opus packets (as WebCodecs sends them) and PCM16 decoded and transcribed by Whisper base."""

from __future__ import annotations

import re

import numpy as np
import pytest

from voxline.bench.audio import RATE, espeak
from voxline.errors import ASRError
from voxline.server_asr import (
    ASR_RATE_HZ,
    CONFIDENCE_MIN,
    ServerASR,
    Transcription,
    collapse_repeats,
    decode_opus,
    decode_pcm16,
    encode_opus,
    segment_confidence,
    whisper_language,
)

PHRASE = "please set a timer for ten minutes"


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def to_16k(samples: np.ndarray) -> np.ndarray:
    return samples[:: RATE // ASR_RATE_HZ]  # espeak's band stays far below 8 kHz: plain decimation is enough here


@pytest.fixture(scope="module")
def asr(model_dir):
    return ServerASR(model_dir("whisper-base-ct2"))


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    return espeak(PHRASE, speed=150)


@pytest.mark.parametrize("rate", [48_000, 16_000])
def test_opus_packets_decode_to_16khz_audio_of_the_right_length(clip, rate):
    source = clip if rate == RATE else to_16k(clip)
    packets, head = encode_opus(source, rate)
    assert head.startswith(b"OpusHead")
    assert len(packets) == pytest.approx(clip.size / RATE / 0.020, abs=2)  # 20 ms packets
    samples = decode_opus(packets)
    assert samples.dtype == np.float32
    assert samples.size / ASR_RATE_HZ == pytest.approx(clip.size / RATE, abs=0.05)
    assert np.max(np.abs(samples)) > 0.1


def test_the_opus_description_is_used_when_given(clip):
    packets, head = encode_opus(clip, RATE)
    skipped = decode_opus(packets).size - decode_opus(packets, description=head).size
    assert 0 < skipped < 0.02 * ASR_RATE_HZ  # the encoder's pre-skip is honoured


def test_whisper_base_recognises_an_opus_encoded_clip(asr, clip):
    packets, head = encode_opus(clip, RATE)
    result = asr.transcribe(decode_opus(packets, description=head), "en-US")
    assert words(result.text) in (words(PHRASE), words(PHRASE.replace("ten", "10")))
    assert result.language == "en" and asr.loaded


def test_pcm16_uplink_is_recognised_too(asr, clip):
    pcm = (to_16k(clip) * 32767).astype("<i2").tobytes()
    chunks = [pcm[i:i + 640] for i in range(0, len(pcm), 640)]  # 20 ms chunks, as a client sends them
    assert "timer" in words(asr.transcribe(decode_pcm16(chunks), "en").text)


def test_silence_is_not_transcribed(asr):
    assert asr.transcribe(np.zeros(ASR_RATE_HZ, np.float32), "en").text == ""


def test_corrupt_opus_raises_asr_error():
    with pytest.raises(ASRError, match="Opus"):
        decode_opus([b"\xff\xfe\xfd garbage" * 4])


@pytest.mark.parametrize(("tag", "code"), [("en", "en"), ("en-US", "en"), ("zh-Hans-CN", "zh"), ("ZH", "zh")])
def test_whisper_language_takes_the_primary_subtag(tag, code):
    assert whisper_language(tag) == code


# --- guards and confidence (issue 13) -----------------------------------------------------------------------------


def test_clean_speech_is_reliable_with_a_real_confidence(asr, clip):
    result = asr.transcribe(to_16k(clip), "en")
    assert "timer" in words(result.text)
    assert CONFIDENCE_MIN <= result.confidence < 1.0
    assert result.reliable and not result.garbled


def test_noise_is_not_reliable(asr):
    noise = np.random.default_rng(7).normal(0, 0.3, ASR_RATE_HZ * 3).astype(np.float32)
    result = asr.transcribe(noise, "en")
    assert not result.reliable, result


def test_a_decoding_loop_is_cut_and_marked():
    assert collapse_repeats("volume volume volume volume volume") == ("volume", True)
    assert collapse_repeats("turn it up turn it up turn it up turn it up") == ("turn it up", True)
    assert collapse_repeats("no no no, stop") == ("no no no, stop", False)
    assert collapse_repeats("") == ("", False)


def test_confidence_is_the_token_probability_of_speech():
    assert segment_confidence([]) == 0.0
    assert segment_confidence([(0.0, 0.0, 5)]) == 1.0
    assert abs(segment_confidence([(-0.5, 0.0, 4)]) - np.exp(-0.5)) < 1e-9
    assert abs(segment_confidence([(0.0, 0.5, 4)]) - 0.5) < 1e-9
    # token-weighted: a long good segment outweighs a short bad one
    assert segment_confidence([(-0.1, 0.0, 20), (-3.0, 0.0, 1)]) > 0.75


def test_an_empty_or_looping_transcript_is_never_reliable():
    assert not Transcription("", "en", 1.0, 0.1, 0.9).reliable
    assert not Transcription("stop", "en", 1.0, 0.1, 0.9, garbled=True).reliable
    assert not Transcription("stop", "en", 1.0, 0.1, CONFIDENCE_MIN / 2).reliable
    assert Transcription("stop", "en", 1.0, 0.1, CONFIDENCE_MIN).reliable
