"""Text to speech for replies: one clause in, 24 kHz mono float32 out, trimmed and at a steady loudness.

Every engine's raw output goes through `finish`: leading silence is cut (hibari starts each sentence with ~0.28 s
of it, which would add straight to the time to first audio), trailing silence is shortened to a natural pause
between clauses, and the level is brought to `TARGET_RMS_DBFS` with the peak kept under `PEAK_CEILING_DBFS`
(hibari speaks at about -6 dB peak, quieter than the page's other sounds).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from voxline.errors import ModelError, TTSError

SAMPLE_RATE_HZ = 24_000
"""Every synthesizer's output rate (hibari's native rate; the reply audio frames' rate)."""
TARGET_RMS_DBFS = -20.0
"""Speech level after normalisation; common for voice prompts, leaves headroom for peaks."""
PEAK_CEILING_DBFS = -1.0
"""Normalisation never raises a peak above this (no clipping after PCM16 conversion or resampling)."""
SILENCE_THRESHOLD_DB = -40.0
"""Relative to the clause's peak: quieter samples at the edges count as silence."""
LEAD_PAD_MS = 10.0
"""Kept before the first voiced sample, so the onset is not clicked off."""
TAIL_PAD_MS = 120.0
"""Kept after the last voiced sample: the pause between this clause and the next."""
SENTENCE_GAP_MS = 120.0
"""Pause between two sentences synthesized within one clause."""
ESPEAK_TIMEOUT_S = 30.0
"""espeak-ng says a clause in milliseconds; one that takes this long is stuck."""
HIBARI_FILE = "hibari.onnx"
"""The voice's file inside its model folder (see the manifest's `hibari-heart`)."""


@runtime_checkable
class Synthesizer(Protocol):
    """What the turn pipeline needs from a TTS engine."""

    name: str
    sample_rate: int

    def synthesize(self, text: str) -> np.ndarray:
        """Float32 mono samples at `sample_rate`, ready to play (trimmed, normalised); raises `TTSError`."""
        ...


def _db_to_gain(db: float) -> float:
    return 10.0 ** (db / 20.0)


def trim_silence(samples: np.ndarray, sample_rate: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Cut leading silence down to `LEAD_PAD_MS` and trailing silence down to `TAIL_PAD_MS`."""
    if samples.size == 0:
        return samples
    peak = float(np.max(np.abs(samples)))
    if peak == 0.0:
        return samples[:0]
    voiced = np.flatnonzero(np.abs(samples) > peak * _db_to_gain(SILENCE_THRESHOLD_DB))
    start = max(int(voiced[0]) - int(sample_rate * LEAD_PAD_MS / 1000), 0)
    end = min(int(voiced[-1]) + 1 + int(sample_rate * TAIL_PAD_MS / 1000), samples.size)
    return samples[start:end]


def normalize_loudness(samples: np.ndarray) -> np.ndarray:
    """Scale to `TARGET_RMS_DBFS`, unless that would put the peak over `PEAK_CEILING_DBFS`."""
    if samples.size == 0:
        return samples
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    peak = float(np.max(np.abs(samples)))
    if rms == 0.0:
        return samples
    gain = min(_db_to_gain(TARGET_RMS_DBFS) / rms, _db_to_gain(PEAK_CEILING_DBFS) / peak)
    return (samples * gain).astype(np.float32)


def finish(sentences: list[np.ndarray], sample_rate: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Trim each sentence, join them with a short gap, and normalise the clause as a whole."""
    gap = np.zeros(int(sample_rate * SENTENCE_GAP_MS / 1000), dtype=np.float32)
    parts: list[np.ndarray] = []
    for sentence in sentences:
        trimmed = trim_silence(np.asarray(sentence, dtype=np.float32), sample_rate)
        if trimmed.size:
            parts.extend([gap, trimmed] if parts else [trimmed])
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return normalize_loudness(np.concatenate(parts))


def to_pcm16(samples: np.ndarray) -> bytes:
    """Little-endian 16-bit PCM, as the reply audio frames carry it."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


class HibariSynth:
    """hibari-tts's int8 "heart" voice (distilled from Kokoro): natural, ~130x real time on one core."""

    name = "hibari"
    sample_rate = SAMPLE_RATE_HZ

    def __init__(self, model: Path, *, threads: int = 1, speed: float = 1.0) -> None:
        from hibari import Hibari

        try:
            self._voice = Hibari(voice="heart", model=str(model), threads=threads)
        except Exception as exc:  # onnxruntime and the G2P raise their own types
            raise ModelError(f"cannot load hibari from {model}: {exc}") from exc
        self.speed = speed
        # One onnxruntime session is not documented as safe for concurrent runs from several sessions' threads.
        self._lock = threading.Lock()
        self.synthesize("Ready.")  # the first run initialises onnxruntime (~0.3 s): pay it at load, not in a turn

    def synthesize(self, text: str) -> np.ndarray:
        try:
            with self._lock:
                sentences = list(self._voice.stream(text, speed=self.speed))
        except Exception as exc:
            raise TTSError(f"hibari could not say {text[:40]!r}: {exc}") from exc
        return finish(sentences)


class EspeakSynth:
    """Debian's espeak-ng: robotic but tiny and always there; the fallback when hibari is not wanted or fails."""

    name = "espeak"
    sample_rate = SAMPLE_RATE_HZ

    def __init__(self, voice: str = "en-us", *, words_per_minute: int = 175) -> None:
        self.binary = shutil.which("espeak-ng")
        if self.binary is None:
            raise ModelError("espeak-ng is not installed (apt-get install espeak-ng)")
        # espeak-ng falls back to its default voice, with exit status 0, when asked for one it lacks: check here.
        if voice.split("+")[0].lower() not in self._voices():
            raise ModelError(f"espeak-ng has no voice {voice!r} (see `espeak-ng --voices`)")
        self.voice = voice
        self.words_per_minute = words_per_minute

    def _voices(self) -> set[str]:
        """Language codes, names and file names of the installed voices, lowercased."""
        listing = subprocess.run([self.binary, "--voices"], capture_output=True, text=True, check=False).stdout
        names: set[str] = set()
        for row in listing.splitlines()[1:]:
            columns = row.split()
            if len(columns) >= 5:
                names.update({columns[1].lower(), columns[3].lower(), columns[4].lower(),
                              columns[4].rsplit("/", 1)[-1].lower()})
        return names

    def synthesize(self, text: str) -> np.ndarray:
        command = [self.binary, "--stdout", "-v", self.voice, "-s", str(self.words_per_minute), "--", text]
        try:
            done = subprocess.run(command, capture_output=True, timeout=ESPEAK_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TTSError(f"espeak-ng could not be run: {exc}") from exc
        if done.returncode != 0 or len(done.stdout) <= 44:
            reason = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
            raise TTSError(f"espeak-ng could not say {text[:40]!r}: {reason}")
        rate, samples = _read_wav_stream(done.stdout)
        return finish([_resample(samples, rate, self.sample_rate)])


def _read_wav_stream(data: bytes) -> tuple[int, np.ndarray]:
    """(rate, float32 samples) of a mono PCM16 WAV as espeak-ng writes it to a pipe.

    espeak-ng cannot seek a pipe, so its sizes are placeholders (0x7fffffff) and the `wave` module rejects them:
    read the `fmt ` chunk for the rate and take everything after the `data` header.
    """
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise TTSError("espeak-ng did not write a WAV stream")
    rate = int.from_bytes(data[24:28], "little")
    start = data.find(b"data", 12)
    if start < 0:
        raise TTSError("espeak-ng's WAV stream has no data chunk")
    payload = data[start + 8 :]
    payload = payload[: len(payload) - len(payload) % 2]
    return rate, np.frombuffer(payload, dtype="<i2").astype(np.float32) / 32768.0


def _resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling through FFmpeg's swresample (PyAV, already installed with faster-whisper)."""
    if rate_in == rate_out or samples.size == 0:
        return samples
    import av

    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = rate_in
    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate_out)
    out = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    out += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(out).astype(np.float32) if out else samples[:0]


def load_synthesizer(engine: str, hibari_dir: Path | None = None) -> Synthesizer:
    """The engine `Settings.tts_engine` names: "hibari" (needs its model folder) or "espeak"."""
    if engine == "hibari":
        if hibari_dir is None:
            raise ModelError("the hibari engine needs its model folder")
        return HibariSynth(Path(hibari_dir) / HIBARI_FILE)
    if engine == "espeak":
        return EspeakSynth()
    raise ModelError(f"unknown TTS engine {engine!r} (hibari or espeak)")
