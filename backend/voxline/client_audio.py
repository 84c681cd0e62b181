"""Audio for the Python client: files, the microphone and the speaker (sounddevice), and a simple endpointer.

The browser has Silero VAD and smart-turn; the Python client makes do with an energy endpointer, which is enough
for a quiet room and a headset. There is no echo cancellation here, so the client does not listen while the reply
plays (half duplex): a loudspeaker would otherwise interrupt its own answer.
"""

from __future__ import annotations

import asyncio
import threading
import wave
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxline.errors import AudioDeviceError, AudioFileError, ClientError

UPLINK_RATE_HZ = 16_000
"""The protocol's PCM16 uplink rate (`voxline.server.protocol.PCM16_UPLINK_RATE_HZ`)."""
FRAME_MS = 20
"""Uplink and endpointing frame: the browser's Opus packets are 20 ms too."""
FRAME_SAMPLES = UPLINK_RATE_HZ * FRAME_MS // 1000

# Endpointing (units in the names, as in web/voxline/settings.js).
SPEECH_MIN_DBFS = -50.0
"""A frame quieter than this is never speech, however quiet the room."""
SPEECH_ABOVE_NOISE_DB = 12.0
"""A frame is speech when it is this much louder than the running noise floor."""
NOISE_FLOOR_START_DBFS = -60.0
NOISE_FLOOR_ADAPT = 0.05
"""Weight of each non-speech frame in the noise floor's moving average."""
START_VOICED_SECS = 0.15
"""Voiced audio in a row needed before a turn starts: a click is shorter, a one-word command longer."""
STOP_SILENCE_SECS = 0.8
"""Silence that ends a turn (pipecat's stop_secs; the browser decides sooner with smart-turn)."""
PRE_ROLL_SECS = 0.3
"""Audio kept from before the detected start, so the first phoneme is not clipped."""
MAX_TURN_SECS = 28.0
"""A turn is cut here: the server keeps at most 30 s (`max_turn_audio_s`)."""


# ------------------------------------------------------------------------------------------------------ files


def read_audio_file(path: Path) -> np.ndarray:
    """Any audio file FFmpeg reads, as mono PCM16 at `UPLINK_RATE_HZ` (PyAV resamples properly)."""
    import av

    if not Path(path).is_file():
        raise AudioFileError(f"{path}: no such file")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout="mono", rate=UPLINK_RATE_HZ)
            chunks = [f.to_ndarray().reshape(-1) for frame in container.decode(stream)
                      for f in resampler.resample(frame)]
            chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    except (av.FFmpegError, IndexError, ValueError) as exc:
        raise AudioFileError(f"{path}: not a readable audio file ({exc})") from None
    samples = np.concatenate(chunks).astype(np.int16) if chunks else np.zeros(0, np.int16)
    if samples.size == 0:
        raise AudioFileError(f"{path}: the file holds no audio")
    return samples


def write_wav(path: Path, pcm: bytes, rate: int) -> None:
    """Mono PCM16 to a WAV file."""
    try:
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(pcm)
    except OSError as exc:
        raise AudioFileError(f"{path}: cannot write the reply audio ({exc.strerror or exc})") from None


# ------------------------------------------------------------------------------------------------ endpointing


@dataclass(frozen=True)
class Endpoint:
    """What one frame changed: a turn started (with the pre-roll frames before it) or ended."""

    kind: str
    """"start" or "end"."""
    frames: tuple[bytes, ...] = ()
    """For "start": the frames of the turn so far, pre-roll included, to send at once."""
    reason: str = ""
    """For "end": "silence" or "max_turn"."""


class EnergyEndpointer:
    """Turns a stream of `FRAME_MS` PCM16 frames into turn starts and ends, by loudness over the noise floor."""

    def __init__(self) -> None:
        self.noise_dbfs = NOISE_FLOOR_START_DBFS
        self.in_turn = False
        self._recent: deque[bytes] = deque(maxlen=round((PRE_ROLL_SECS + START_VOICED_SECS) * 1000 / FRAME_MS))
        self._voiced_run = 0
        self._silent_run = 0
        self._turn_frames = 0

    def is_voiced(self, frame: bytes) -> bool:
        samples = np.frombuffer(frame, "<i2").astype(np.float32) / 32768.0
        dbfs = 10 * np.log10(float(np.mean(samples * samples)) + 1e-10)
        voiced = dbfs > max(SPEECH_MIN_DBFS, self.noise_dbfs + SPEECH_ABOVE_NOISE_DB)
        if not voiced:
            self.noise_dbfs += NOISE_FLOOR_ADAPT * (dbfs - self.noise_dbfs)
        return voiced

    def feed(self, frame: bytes) -> Endpoint | None:
        """One frame in; an `Endpoint` when a turn starts or ends on it."""
        voiced = self.is_voiced(frame)
        if not self.in_turn:
            self._recent.append(frame)
            self._voiced_run = self._voiced_run + 1 if voiced else 0
            if self._voiced_run * FRAME_MS < START_VOICED_SECS * 1000:
                return None
            self.in_turn, self._silent_run, self._voiced_run = True, 0, 0
            frames = tuple(self._recent)
            self._recent.clear()
            self._turn_frames = len(frames)
            return Endpoint("start", frames)
        self._turn_frames += 1
        self._silent_run = 0 if voiced else self._silent_run + 1
        if self._silent_run * FRAME_MS >= STOP_SILENCE_SECS * 1000:
            return self._end("silence")
        if self._turn_frames * FRAME_MS >= MAX_TURN_SECS * 1000:
            return self._end("max_turn")
        return None

    def _end(self, reason: str) -> Endpoint:
        self.in_turn = False
        self._silent_run = self._turn_frames = 0
        return Endpoint("end", reason=reason)


# ------------------------------------------------------------------------------------------------ devices


CLIENT_EXTRA = "pip install 'voxline[client]'"
_NO_CLIENT_EXTRA = (f"the microphone and the speaker need the `client` extra: {CLIENT_EXTRA} (or talk from a file "
                    "without them: --wav FILE with --no-play or --save-reply FILE.wav)")


class ClientExtraMissing(ClientError):
    """The microphone or the speaker was wanted, but the `client` extra (sounddevice) is not installed.

    Not an `AudioDeviceError`: a turn from a WAV file that would go on silently without a speaker stops instead,
    saying what to install, since nothing on this machine can play the reply until it is.
    """


def _sounddevice():
    try:
        import sounddevice
    except ImportError:  # a core install: PortAudio's binding is the `client` extra
        raise ClientExtraMissing(_NO_CLIENT_EXTRA) from None
    except OSError as exc:  # the module loads libportaudio when imported
        raise AudioDeviceError(f"PortAudio is not installed ({exc}): `apt-get install libportaudio2`") from None
    return sounddevice


_NO_DEVICE_HINT = "use --wav FILE instead of the microphone, and --save-reply FILE.wav instead of the speaker"


def list_devices() -> list[dict]:
    """Every audio device PortAudio sees; `AudioDeviceError` when there is none at all."""
    sd = _sounddevice()
    try:
        devices = list(sd.query_devices())
        default_in, default_out = sd.default.device
    except sd.PortAudioError as exc:
        raise AudioDeviceError(f"PortAudio could not list the audio devices ({exc})") from None
    if not devices:
        raise AudioDeviceError("no audio devices found: this machine has no microphone or speaker that PortAudio "
                               "can open (in a container, pass the sound device through); " + _NO_DEVICE_HINT)
    return [{"index": i, "name": d["name"], "inputs": d["max_input_channels"], "outputs": d["max_output_channels"],
             "default_rate": d["default_samplerate"], "default_input": i == default_in,
             "default_output": i == default_out} for i, d in enumerate(devices)]


def find_device(device: str | int | None, kind: str, sd=None) -> dict:
    """PortAudio's info on an "input" or "output" device (by index or name; None: the default one), or a clear
    `AudioDeviceError` when it does not exist."""
    sd = sd or _sounddevice()
    if isinstance(device, str) and device.isdigit():
        device = int(device)
    try:
        return sd.query_devices(device, kind=kind)
    except (sd.PortAudioError, ValueError) as exc:
        what = f"audio {kind} device {device!r}" if device is not None else f"default audio {kind} device"
        raise AudioDeviceError(f"no {what} ({exc}); {_NO_DEVICE_HINT} (`voxline talk --list-devices` shows what "
                               "PortAudio sees)") from None


class Microphone:
    """The input device as `FRAME_MS` PCM16 frames at `UPLINK_RATE_HZ`, delivered into an asyncio queue.

    Opened at 16 kHz when the device allows it, else at its own rate and resampled (PyAV, stateful, so the block
    edges stay clean)."""

    def __init__(self, device: str | int | None, loop: asyncio.AbstractEventLoop) -> None:
        self.sd = _sounddevice()
        self.info = find_device(device, "input", self.sd)
        self.device = self.info["index"]
        self.loop = loop
        self.frames: asyncio.Queue[bytes] = asyncio.Queue()
        self._pending = b""
        self._resampler = None
        self._stream = None

    def start(self) -> None:
        sd = self.sd
        try:
            self._stream = self._open(UPLINK_RATE_HZ)
        except sd.PortAudioError:
            rate = int(self.info["default_samplerate"])
            import av

            self._resampler = (av, av.AudioResampler(format="s16", layout="mono", rate=UPLINK_RATE_HZ), rate)
            try:
                self._stream = self._open(rate)
            except sd.PortAudioError as exc:
                raise AudioDeviceError(f"the microphone {self.info['name']!r} cannot be opened ({exc})") from None
        self._stream.start()

    def _open(self, rate: int):
        return self.sd.RawInputStream(samplerate=rate, channels=1, dtype="int16", device=self.device,
                                      blocksize=rate * FRAME_MS // 1000, callback=self._callback)

    def _callback(self, data, frames, time_info, status) -> None:  # PortAudio's thread
        pcm = bytes(data)
        if self._resampler is not None:
            av, resampler, rate = self._resampler
            frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, np.int16).reshape(1, -1), format="s16",
                                               layout="mono")
            frame.sample_rate = rate
            pcm = b"".join(bytes(f.to_ndarray().tobytes()) for f in resampler.resample(frame))
        self._pending += pcm
        size = FRAME_SAMPLES * 2
        while len(self._pending) >= size:
            frame_bytes, self._pending = self._pending[:size], self._pending[size:]
            self.loop.call_soon_threadsafe(self.frames.put_nowait, frame_bytes)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None


class Speaker:
    """Plays reply audio (PCM16 mono) as it arrives. `on_first_sample(turn_id)` fires (on the event loop) when a
    reply's first samples are handed to the device; `drained()` waits until everything queued has been played."""

    def __init__(self, device: str | int | None, rate: int, loop: asyncio.AbstractEventLoop,
                 on_first_sample: Callable[[int], None]) -> None:
        self.sd = _sounddevice()
        self.info = find_device(device, "output", self.sd)
        self.rate = rate
        self.loop = loop
        self.on_first_sample = on_first_sample
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._turn: int | None = None
        self._first_pending = False
        self._idle = asyncio.Event()
        self._idle.set()
        try:
            self._stream = self.sd.RawOutputStream(samplerate=rate, channels=1, dtype="int16",
                                                   device=self.info["index"], callback=self._callback)
            self._stream.start()  # running from the start: no device start-up delay on the first reply
        except self.sd.PortAudioError as exc:
            raise AudioDeviceError(f"the speaker {self.info['name']!r} cannot play {rate} Hz audio ({exc})") from None

    def push(self, turn_id: int, pcm: bytes) -> None:
        with self._lock:
            if turn_id != self._turn:
                self._turn, self._first_pending = turn_id, True
            self._buffer += pcm
            self._idle.clear()

    async def drained(self) -> None:
        await self._idle.wait()

    def _callback(self, out, frames, time_info, status) -> None:  # PortAudio's thread
        with self._lock:
            size = min(len(out), len(self._buffer))
            out[:size] = self._buffer[:size]
            del self._buffer[:size]
            first = self._first_pending and size > 0
            if first:
                self._first_pending = False
            empty = not self._buffer
        out[size:] = b"\x00" * (len(out) - size)
        if first:
            self.loop.call_soon_threadsafe(self.on_first_sample, self._turn)
        if empty and size == 0 and not self._idle.is_set():
            self.loop.call_soon_threadsafe(self._mark_idle)

    def _mark_idle(self) -> None:
        with self._lock:  # a push may have come in since the callback saw the buffer empty
            if not self._buffer:
                self._idle.set()

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()
