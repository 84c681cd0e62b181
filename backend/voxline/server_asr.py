"""Server re-recognition: the turn's uplink audio (Opus packets or PCM16) decoded and transcribed by Whisper base.

The browser's Whisper tiny.en is fast but English-only and errs more; below the confidence gate the page sends its
buffered audio and the server's multilingual Whisper base (CTranslate2, through faster-whisper) decides what was
said, in the session's language.

Opus packets are decoded with PyAV (FFmpeg's libopus), which faster-whisper already depends on: raw packets as
WebCodecs emits them need no container, only the channel count (and the `OpusHead` description when the encoder
gave one), and any Opus stream can be decoded at any rate, so the decoder is asked for 16 kHz directly.

Guards (the browser's have the same aims): faster-whisper's temperature fallback re-decodes a segment whose
output is too repetitive (`COMPRESSION_RATIO_MAX`) or too unlikely (`AVG_LOGPROB_MIN`) at a higher temperature;
a segment it judges silent (`NO_SPEECH_PROB_MAX`) is dropped; and a transcript that still repeats one word or
phrase (`REPEAT_MAX_RUN`) is cut to its first occurrence and marked garbled. `Transcription.confidence` is the
probability of the transcript's tokens, exp of their mean log-probability, times the chance it is speech at
all; `Transcription.reliable` says whether it may be acted on (`CONFIDENCE_MIN`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxline.errors import ASRError, ModelError

ASR_RATE_HZ = 16_000
"""Whisper's input rate."""
SILENCE_PEAK = 1e-3
"""Audio whose peak stays below this is not transcribed: Whisper invents "Thank you." on silence."""
BEAM_SIZE = 1
"""Greedy decoding: on short commands and questions beam search changed little and cost ~2x the time."""
TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""Greedy first; a segment that fails the checks below is decoded again at the next temperature (faster-whisper's
fallback, which a single temperature of 0 turns off)."""
COMPRESSION_RATIO_MAX = 2.4
"""A segment whose text gzip-compresses better than this is repetitive: decoded again (Whisper's own default)."""
AVG_LOGPROB_MIN = -1.0
"""A segment whose tokens average a log-probability below this is decoded again (Whisper's own default)."""
NO_SPEECH_PROB_MAX = 0.6
"""A segment Whisper thinks is silence with more than this probability (and unlikely text) is dropped."""
REPEAT_MAX_RUN = 3
"""A word or phrase (up to `REPEAT_MAX_NGRAM` words) said more than this many times in a row is a decoding loop."""
REPEAT_MAX_NGRAM = 4
CONFIDENCE_MIN = 0.08
"""Below this `confidence` a server transcript is not acted on (no command, no LLM): the user is asked again.
Seen with Whisper base on espeak-ng (en-us, en-gb+f3): sentences 0.33-0.88 (right or wrong alike), one-word
commands heard right only 0.13-0.26 (few tokens, and the final "." and end token are unsure), noise: no text.
So it is set low: it catches a transcript the decoder itself did not believe, not a plausible mishearing."""


@dataclass(frozen=True)
class Transcription:
    """What the server heard."""

    text: str
    language: str
    audio_s: float
    elapsed_s: float
    confidence: float = 1.0
    """0..1: exp(mean token log-probability) × (1 − no-speech probability), over the kept segments."""
    garbled: bool = False
    """The decoder looped (a phrase repeated past `REPEAT_MAX_RUN`): `text` is cut to its first occurrence."""

    @property
    def reliable(self) -> bool:
        """Whether the transcript may be acted on as a command or sent to the LLM as what was said."""
        return bool(self.text) and not self.garbled and self.confidence >= CONFIDENCE_MIN


def collapse_repeats(
    text: str, *, max_run: int = REPEAT_MAX_RUN, max_ngram: int = REPEAT_MAX_NGRAM
) -> tuple[str, bool]:
    """(`text` with any phrase repeated more than `max_run` times in a row kept once, whether that happened).

    Pure and word-based ("no no no" stays: three is a run people say; "stop stop stop stop" becomes "stop")."""
    words = text.split()
    looped = False
    for size in range(1, max_ngram + 1):
        out: list[str] = []
        i = 0
        while i < len(words):
            phrase = words[i:i + size]
            key = [w.strip(".,!?;:").lower() for w in phrase]
            run = 1
            while len(phrase) == size and [w.strip(".,!?;:").lower() for w in
                                           words[i + run * size:i + (run + 1) * size]] == key:
                run += 1
            if run > max_run:
                out.extend(phrase)
                i += run * size
                looped = True
            else:
                out.append(words[i])
                i += 1
        words = out
    return " ".join(words), looped


def segment_confidence(segments: Sequence[tuple[float, float, int]]) -> float:
    """Confidence of a transcript from its segments' (avg_logprob, no_speech_prob, token count): the token-weighted
    mean log-probability, exponentiated, times the token-weighted chance that it is speech. 0 with no tokens."""
    tokens = sum(max(n, 1) for _, _, n in segments)
    if not segments or tokens == 0:
        return 0.0
    mean_logprob = sum(lp * max(n, 1) for lp, _, n in segments) / tokens
    speech = sum((1.0 - ns) * max(n, 1) for _, ns, n in segments) / tokens
    return float(min(1.0, max(0.0, math.exp(mean_logprob) * speech)))


def decode_opus(
    packets: Sequence[bytes], *, channels: int = 1, description: bytes | None = None
) -> np.ndarray:
    """Float32 mono samples at `ASR_RATE_HZ` from raw Opus packets; raises `ASRError` on corrupt data."""
    import av

    try:
        decoder = av.CodecContext.create("libopus", "r")
        decoder.sample_rate = ASR_RATE_HZ
        decoder.layout = "stereo" if channels == 2 else "mono"
        if description:
            decoder.extradata = description
        resampler = av.AudioResampler(format="flt", layout="mono", rate=ASR_RATE_HZ)
        chunks = []
        for packet in packets:
            for frame in decoder.decode(av.Packet(packet)):
                chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
        for frame in decoder.decode(None):
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
        chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    except (av.FFmpegError, ValueError) as exc:
        raise ASRError(f"the turn's Opus audio could not be decoded ({exc}): send each packet as WebCodecs' "
                       "AudioEncoder emits it, one per binary frame, with its decoderConfig in turn.start") from exc
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)


def encode_opus(samples: np.ndarray, rate: int, *, bit_rate: int = 24_000) -> tuple[list[bytes], bytes]:
    """(raw 20 ms Opus packets, `OpusHead` description) of mono float32 audio: what a WebCodecs `AudioEncoder`
    sends, for the Python client and the tests. `rate` must be one Opus accepts (8, 12, 16, 24 or 48 kHz)."""
    import fractions

    import av

    encoder = av.CodecContext.create("libopus", "w")
    encoder.sample_rate, encoder.layout, encoder.format, encoder.bit_rate = rate, "mono", "s16", bit_rate
    encoder.time_base = fractions.Fraction(1, rate)
    encoder.open()
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
    packets: list[bytes] = []
    for start in range(0, pcm.size, encoder.frame_size):
        chunk = pcm[start:start + encoder.frame_size]
        chunk = np.pad(chunk, (0, encoder.frame_size - chunk.size))  # libopus takes whole frames only
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts = rate, start
        packets += [bytes(packet) for packet in encoder.encode(frame)]
    packets += [bytes(packet) for packet in encoder.encode(None)]
    return packets, bytes(encoder.extradata or b"")


def decode_pcm16(chunks: Sequence[bytes]) -> np.ndarray:
    """Float32 samples from little-endian PCM16 chunks (already at `ASR_RATE_HZ`, per the protocol)."""
    data = b"".join(chunks)
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def whisper_language(lang: str) -> str:
    """Whisper's language code for a BCP 47 tag ("en-US" → "en", "zh-Hans-CN" → "zh")."""
    return lang.split("-")[0].lower()


class ServerASR:
    """faster-whisper over a local CTranslate2 Whisper folder; loaded on first use (most turns never need it)."""

    def __init__(self, folder: Path, *, device: str | None = None, threads: int = 0,
                 on_loaded: Callable[[], None] = lambda: None) -> None:
        self.folder = Path(folder)
        self.device = device
        self.threads = threads
        self._on_loaded = on_loaded
        self._model = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model now (idempotent, thread-safe)."""
        with self._lock:
            if self._model is not None:
                return
            from faster_whisper import WhisperModel

            from voxline.llm import default_device

            device, compute_type = default_device()
            device = self.device or device
            try:
                self._model = WhisperModel(
                    str(self.folder), device=device, compute_type=compute_type if device == "cuda" else "int8",
                    cpu_threads=self.threads, local_files_only=True,
                )
            except (OSError, RuntimeError, ValueError) as exc:
                raise ModelError(f"cannot load Whisper from {self.folder}: {exc}") from exc
        self._on_loaded()

    def transcribe(self, samples: np.ndarray, lang: str) -> Transcription:
        """Transcribe 16 kHz float32 audio in `lang`; raises `ASRError` if Whisper fails."""
        started = time.perf_counter()
        language = whisper_language(lang)
        audio_s = samples.size / ASR_RATE_HZ
        if samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK:
            return Transcription("", language, audio_s, time.perf_counter() - started)
        self.load()
        try:
            segments, _info = self._model.transcribe(
                samples, language=language, beam_size=BEAM_SIZE, temperature=list(TEMPERATURES),
                compression_ratio_threshold=COMPRESSION_RATIO_MAX, log_prob_threshold=AVG_LOGPROB_MIN,
                no_speech_threshold=NO_SPEECH_PROB_MAX, condition_on_previous_text=False,
                without_timestamps=True, vad_filter=False,
            )
            segments = list(segments)
        except (RuntimeError, ValueError) as exc:
            raise ASRError(f"Whisper failed on the turn's audio: {exc}") from exc
        text, garbled = collapse_repeats(" ".join(s.text.strip() for s in segments).strip())
        confidence = segment_confidence([(s.avg_logprob, s.no_speech_prob, len(s.tokens)) for s in segments])
        return Transcription(text, language, audio_s, time.perf_counter() - started, confidence if text else 0.0,
                             garbled)
