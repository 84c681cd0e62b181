"""How many frames of a short word Silero VAD calls voiced, as the 32 ms frame boundaries move through it.

Short commands spoken by espeak-ng voices are laid out in one file (as the benches do), taken to 16 kHz, and run
through the browser's Silero model (silero-vad-v5-16k, onnxruntime in Python) eight times, the frame boundaries
moved by 64 samples each time. For each word it prints the voiced frames (p >= 0.5) of one stream, and of the larger
of two streams half a frame apart (the page's `vadOnsetPhases: 2`), at each of the eight offsets; a word the page
would not start a turn for at some offset has fewer voiced frames than `minSpeechSecs` asks (four).

    .venv/bin/python scripts/vad-onset-phases.py
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from voxline import paths
from voxline.bench import audio
from voxline.convert.silero_vad import OUTPUT_FILE

WORDS = ("back", "Stop!", "mute", "next", "hush", "Next!", "pause", "skip", "play", "louder")
VOICES = (("en-gb", 165), ("en-gb-x-rp", 190), ("en-us", 165), ("en-us+f3", 140))
FRAME, CONTEXT, RATE = 512, 64, 16000
OFFSETS = range(0, FRAME, 64)
NEEDED = 4  # voiced frames: settings.js minSpeechSecs (0.12 s)


def to_16k(samples: np.ndarray) -> np.ndarray:
    """48 kHz → 16 kHz: a windowed-sinc low-pass, then every third sample."""
    taps = np.arange(-96, 97)
    kernel = np.sinc(taps / 3) / 3 * np.blackman(taps.size)
    return np.convolve(samples, kernel, "same")[::3].astype(np.float32)


def probabilities(vad: ort.InferenceSession, samples: np.ndarray) -> np.ndarray:
    state, context, out = np.zeros((2, 1, 128), np.float32), np.zeros(CONTEXT, np.float32), []
    for start in range(0, samples.size - FRAME + 1, FRAME):
        frame = samples[start:start + FRAME]
        prob, state = vad.run(None, {"input": np.concatenate([context, frame])[None], "state": state})
        out.append(float(prob[0, 0]))
        context = frame[-CONTEXT:]
    return np.array(out)


def main() -> None:
    vad = ort.InferenceSession(str(paths.model_dir("silero-vad-v5-16k") / OUTPUT_FILE),
                               providers=["CPUExecutionProvider"])
    clips = [(f"{word} ({voice})", audio.espeak(word, voice, wpm)) for voice, wpm in VOICES for word in WORDS]
    composed, placed = audio.compose(clips, lead_s=1.0, gap_s=1.5)
    speech = to_16k(composed)
    counts = {p.text: ([], []) for p in placed}
    for offset in OFFSETS:
        shifted = np.concatenate([np.zeros(offset, np.float32), speech])
        one = probabilities(vad, shifted)
        # The second stream's frame k ends half a frame into the first stream's frame k.
        two = np.maximum(one, probabilities(vad, np.concatenate([np.zeros(FRAME // 2, np.float32), shifted]))[:one.size])
        for p in placed:
            first = int(((p.start_s - 0.1) * RATE + offset) / FRAME)
            last = int(((p.end_s + 0.15) * RATE + offset) / FRAME) + 1
            counts[p.text][0].append(int((one[first:last] >= 0.5).sum()))
            counts[p.text][1].append(int((two[first:last] >= 0.5).sum()))
    short = [0, 0]
    print(f"{'word (voice)':24s} {'one stream, by offset':32s} two streams, by offset")
    for text, (one, two) in counts.items():
        print(f"{text:24s} {str(one):32s} {two}")
        short[0] += sum(n < NEEDED for n in one)
        short[1] += sum(n < NEEDED for n in two)
    total = len(counts) * len(OFFSETS)
    print(f"fewer than {NEEDED} voiced frames: one stream {short[0]} of {total}, two streams {short[1]} of {total}")


if __name__ == "__main__":
    main()
