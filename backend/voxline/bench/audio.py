"""Test audio made by the tests themselves: espeak-ng speech laid out in one WAV with known speech positions.

Synthetic speech is a proxy for real voices; figures measured on it say so.
"""

from __future__ import annotations

import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE = 48000  # what Chromium's fake microphone delivers by default; the page resamples to 16 kHz
SILENCE_DBFS = -45.0


@dataclass(frozen=True)
class Placed:
    """One utterance inside a composed file, with where its speech starts and ends (seconds)."""

    text: str
    start_s: float
    end_s: float


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getsampwidth() == 2, "16-bit PCM expected"
        data = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        channels, rate = w.getnchannels(), w.getframerate()
    data = data.reshape(-1, channels).mean(axis=1)
    if rate != RATE:
        positions = np.arange(int(len(data) * RATE / rate)) * rate / RATE
        data = np.interp(positions, np.arange(len(data)), data).astype(np.float32)
    return data


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> Path:
    pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


def to_16k(samples: np.ndarray) -> np.ndarray:
    """`RATE` (48 kHz) → 16 kHz, the ASR's rate: a windowed-sinc low-pass at 8 kHz, then every third sample."""
    assert RATE == 48_000
    taps = np.sinc(np.arange(-60, 61) / 3) / 3 * np.hamming(121)
    return np.convolve(samples.astype(np.float64), taps, mode="same")[::3].astype(np.float32)


def espeak(text: str, voice: str = "en-us", speed: int = 165) -> np.ndarray:
    """espeak-ng speech at RATE, trimmed to its voiced part."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "say.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(out), text], check=True)
        return trim(read_wav(out))


def voiced_bounds(samples: np.ndarray, rate: int = RATE) -> tuple[int, int]:
    """First and last sample of 10 ms windows louder than SILENCE_DBFS."""
    hop = rate // 100
    frames = samples[: len(samples) // hop * hop].reshape(-1, hop)
    level = 20 * np.log10(np.sqrt((frames**2).mean(axis=1)) + 1e-9)
    loud = np.flatnonzero(level > SILENCE_DBFS)
    if loud.size == 0:
        return 0, 0
    return int(loud[0] * hop), int((loud[-1] + 1) * hop)


def trim(samples: np.ndarray) -> np.ndarray:
    start, end = voiced_bounds(samples)
    return samples[start:end]


def compose(clips: list[tuple[str, np.ndarray]], lead_s: float = 1.0, gap_s: float = 2.5, tail_s: float = 3.0,
            noise_dbfs: float = -70.0, seed: int = 0) -> tuple[np.ndarray, list[Placed]]:
    """Lay clips out with silence between them (plus faint noise, as a real room has); returns audio and positions."""
    parts, placed, at = [np.zeros(int(lead_s * RATE), np.float32)], [], lead_s
    for text, audio in clips:
        placed.append(Placed(text, at, at + len(audio) / RATE))
        parts += [audio, np.zeros(int(gap_s * RATE), np.float32)]
        at += len(audio) / RATE + gap_s
    parts.append(np.zeros(int(tail_s * RATE), np.float32))
    out = np.concatenate(parts)
    out += (10 ** (noise_dbfs / 20)) * np.random.default_rng(seed).standard_normal(out.size).astype(np.float32)
    return out, placed


def hibari(text: str, seed: int = 0, speed: float = 1.0, level_dbfs: float = -20.0) -> np.ndarray:
    """Natural-sounding speech from the hibari-tts 'heart' voice at RATE, trimmed and levelled.

    smart-turn separates finished from unfinished turns on such speech, not on espeak-ng's (MODELS.md), so
    endpointing figures come from this voice.
    """
    from voxline import paths
    from hibari import Hibari

    model = paths.model_dir("hibari-heart") / "hibari.onnx"
    voice = _HIBARI.get(model)
    if voice is None:
        voice = _HIBARI[model] = Hibari(voice="heart", model=str(model) if model.exists() else None)
    audio = voice(text, speed=speed, seed=seed)
    positions = np.arange(int(len(audio) * RATE / voice.sample_rate)) * voice.sample_rate / RATE
    audio = np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)
    audio = trim(audio)
    rms = float(np.sqrt((audio**2).mean())) or 1.0
    return audio * (10 ** (level_dbfs / 20) / rms)


_HIBARI: dict = {}


# Noisy copies for the evaluation sets (voxline bench intents --set). Levels are RMS in dBFS.
SPEECH_LEVEL_DBFS = -20.0
"""Every rendered clip is levelled to this RMS, so an SNR names one noise level for all voices."""
NOISE_KINDS = ("pink", "white")


def level(samples: np.ndarray, dbfs: float = SPEECH_LEVEL_DBFS) -> np.ndarray:
    """`samples` scaled to an RMS of `dbfs`."""
    rms = float(np.sqrt((samples.astype(np.float64) ** 2).mean())) if samples.size else 0.0
    return samples if rms == 0.0 else (samples * (10 ** (dbfs / 20) / rms)).astype(np.float32)


def noise(n: int, kind: str = "pink", seed: int = 0) -> np.ndarray:
    """`n` samples of unit-RMS noise: `white`, or `pink` (power falling 3 dB per octave, shaped in the frequency
    domain: a steady, fan- or traffic-like room noise). Deterministic for a seed."""
    if kind not in NOISE_KINDS:
        raise ValueError(f"noise kind {kind!r}: expected one of {', '.join(NOISE_KINDS)}")
    white = np.random.default_rng(seed).standard_normal(n)
    if kind == "pink" and n > 1:
        spectrum = np.fft.rfft(white)
        freqs = np.fft.rfftfreq(n)
        spectrum[1:] /= np.sqrt(freqs[1:] / freqs[1])
        spectrum[0] = 0.0
        white = np.fft.irfft(spectrum, n)
    rms = float(np.sqrt((white**2).mean())) or 1.0
    return (white / rms).astype(np.float32)


def add_noise(samples: np.ndarray, snr_db: float, kind: str = "pink", seed: int = 0,
              speech_dbfs: float = SPEECH_LEVEL_DBFS) -> np.ndarray:
    """`samples` with steady noise added over their whole length, `snr_db` below speech at `speech_dbfs` RMS.

    The noise runs through the silences too (a room does not go quiet between commands), so endpointing hears it.
    """
    noise_rms = 10 ** ((speech_dbfs - snr_db) / 20)
    return (samples + noise_rms * noise(samples.size, kind, seed)).astype(np.float32)
