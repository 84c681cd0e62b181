"""Two builds of the browser's Whisper tiny ONNX side by side: WER and identical transcripts on the same clips.

For a change to the converter (voxline/convert/whisper_onnx.py) that should not change what the page hears. Both
builds run in onnxruntime (CPU) on the page's 8 s window, greedy (`OnnxWhisper.transcribe`), on held-out questions
and commands from backend/voxline/bench/sets, spoken by hibari and espeak-ng (en-gb).

    git worktree add /tmp/base <commit> && VOXLINE_CACHE=/tmp/basecache PYTHONPATH=/tmp/base/backend \\
        .venv/bin/python -m voxline.cli models fetch whisper-tiny-en-onnx
    .venv/bin/python scripts/whisper-onnx-ab.py --baseline /tmp/basecache/models/whisper-tiny-en-onnx

Or one build, its cached silent tail (whisper.js, "The encoder's silent tail") beside the whole window:

    .venv/bin/python scripts/whisper-onnx-ab.py --tail
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from voxline import paths
from voxline.bench.audio import espeak, hibari, to_16k
from voxline.bench.evalset import first_texts
from voxline.bench.stats import summary
from voxline.bench.wer import wer
from voxline.convert.whisper_onnx import OnnxWhisper

WINDOW_S = 8.0
"""The page's decode window (whisper.js)."""


def texts(questions: int, commands: int) -> list[str]:
    """Held-out questions, then held-out commands of set B."""
    return first_texts("questions-en.jsonl", questions) + first_texts("commands-b-en.jsonl", commands)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="folder of the other build (default: this one, whole window)")
    parser.add_argument("--tail", action="store_true", help="the model side reads its window's silent tail cached")
    parser.add_argument("--model", type=Path, default=paths.model_dir("whisper-tiny-en-onnx"))
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--commands", type=int, default=60)
    args = parser.parse_args()
    model = OnnxWhisper(args.model, threads=1)
    builds = {"baseline": OnnxWhisper(args.baseline, threads=1) if args.baseline else model, "model": model}
    tails = {"baseline": None, "model": model.tail_cache(WINDOW_S) if args.tail else None}
    voices = {"hibari": lambda t: hibari(t, seed=1), "espeak-gb": lambda t: espeak(t, voice="en-gb")}
    refs, hyps, same, encode_ms = [], {k: [] for k in builds}, 0, {k: [] for k in builds}
    for voice in voices.values():
        for text in texts(args.questions, args.commands):
            clip = to_16k(voice(text))
            heard = {}
            for k, m in builds.items():  # alternating, clip by clip
                started = time.perf_counter()
                cross = m.encode(clip, WINDOW_S, tail=tails[k])
                encode_ms[k].append(1000 * (time.perf_counter() - started))
                heard[k] = m.decode(m.generate(*cross)[0])
            refs.append(text)
            for k, h in heard.items():
                hyps[k].append(h)
            same += heard["baseline"] == heard["model"]
    print(json.dumps({"clips": len(refs), "voices": list(voices), "identical_transcripts": same,
                      "tail": args.tail, "wer_percent": {k: round(100 * wer(refs, h), 2) for k, h in hyps.items()},
                      "encode_ms": {k: summary(v) for k, v in encode_ms.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
