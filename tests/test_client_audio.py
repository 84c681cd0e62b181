"""The Python client's audio: file decoding and resampling, and the energy endpointer."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voxline.bench.audio import RATE, compose, hibari, write_wav
from voxline.client_audio import (
    FRAME_MS,
    FRAME_SAMPLES,
    PRE_ROLL_SECS,
    STOP_SILENCE_SECS,
    UPLINK_RATE_HZ,
    EnergyEndpointer,
    read_audio_file,
)
from voxline.errors import AudioFileError


@pytest.fixture(scope="module")
def two_utterances(tmp_path_factory):
    clips = [("pause the music", hibari("pause the music", seed=4)),
             ("turn the volume down", hibari("turn the volume down", seed=5))]
    audio, placed = compose(clips, lead_s=1.0, gap_s=2.0, tail_s=1.5)
    return write_wav(tmp_path_factory.mktemp("endpointing") / "two.wav", audio), placed, len(audio) / RATE


def run_endpointer(samples: np.ndarray) -> list[tuple[str, float, int]]:
    """(kind, seconds at the frame that produced it, frames carried) for each endpoint."""
    endpointer, found = EnergyEndpointer(), []
    for index in range(samples.size // FRAME_SAMPLES):
        frame = samples[index * FRAME_SAMPLES:(index + 1) * FRAME_SAMPLES].tobytes()
        endpoint = endpointer.feed(frame)
        if endpoint is not None:
            found.append((endpoint.kind, (index + 1) * FRAME_MS / 1000, len(endpoint.frames)))
    return found


def test_files_are_read_as_16_khz_mono_pcm16(two_utterances):
    wav, _, duration_s = two_utterances
    samples = read_audio_file(wav)
    assert samples.dtype == np.int16
    assert samples.size / UPLINK_RATE_HZ == pytest.approx(duration_s, abs=0.01)


def test_unreadable_files_are_a_clear_error(tmp_path):
    with pytest.raises(AudioFileError, match="no such file"):
        read_audio_file(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"not audio at all")
    with pytest.raises(AudioFileError, match="not a readable audio file"):
        read_audio_file(tmp_path / "junk.wav")


def test_each_utterance_is_one_turn_ending_after_the_silence(two_utterances):
    wav, placed, _ = two_utterances
    found = run_endpointer(read_audio_file(wav))
    assert [kind for kind, _, _ in found] == ["start", "end", "start", "end"], found
    for (start, end), truth in zip(zip(found[::2], found[1::2]), placed):
        assert truth.start_s <= start[1] <= truth.start_s + 0.5  # decided within the first half second of speech
        assert start[1] - start[2] * FRAME_MS / 1000 <= truth.start_s  # the pre-roll reaches back before it
        assert start[2] * FRAME_MS / 1000 <= PRE_ROLL_SECS + 0.5
        assert end[1] == pytest.approx(truth.end_s + STOP_SILENCE_SECS, abs=0.25)


def test_silence_and_a_click_start_no_turn():
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(UPLINK_RATE_HZ * 3) * 30).astype(np.int16)  # about -60 dBFS room noise
    quiet[UPLINK_RATE_HZ: UPLINK_RATE_HZ + 80] = 20_000  # a 5 ms click
    assert run_endpointer(quiet) == []


def test_speaker_reports_the_first_sample_and_waits_until_all_has_played(fake_sounddevice, run_async):
    from voxline.client_audio import Speaker

    async def play() -> list[int]:
        firsts: list[int] = []
        speaker = Speaker(None, 24_000, asyncio.get_running_loop(), on_first_sample=firsts.append)
        reply = (np.arange(2400, dtype=np.int16) % 100 + 1).tobytes()  # 100 ms, never silent
        speaker.push(7, reply[:2400])
        speaker.push(7, reply[2400:])
        await asyncio.wait_for(speaker.drained(), 5)
        speaker.close()
        played = bytes(fake_sounddevice.played)
        assert reply in played and played.replace(reply, b"", 1).strip(b"\x00") == b""  # whole, in order, once
        return firsts

    assert run_async(play()) == [7]
