"""Whisper's encoder with the silent tail of its window read from a cache instead of computed: what it costs in WER.

The page pads every utterance with zeros to an 8 s window (400 encoder positions), and the encoder's time is spent
on all 400 of them, though a command fills ~60-120. The positions after the speech and a short margin (the *tail*)
all hold the same log-mel value, the floor that the utterance's loudest frame sets. This script measures, in numpy
float32 from CTranslate2's weights (voxline.convert.ct2_reader; no quantisation), a cheaper encoder: only the
*head* (the audio's positions and `--margin` more) goes through the layers; at every layer its queries attend to its
own keys and values and to those of the tail taken from a run over a window that is all floor; the tail's outputs
(what the decoder attends to) are that run's too. Three readings of every clip, each decoded greedily by the built
int8 decoder (`OnnxWhisper.generate`), so that only the encoder differs:

- `exact`: the whole window through every layer, as the page does now (float32 here);
- `tail_per_utterance`: the tail from a run at this utterance's own floor (a cache per floor value);
- `tail_shared`: the audio first scaled so that its loudest log-mel frame is `--peak` (gain normalisation), so that
  every utterance has the same floor and one tail run serves all; against `exact_normalised`, the whole window of
  the same scaled audio.

    .venv/bin/python scripts/encoder-tail-ab.py --questions 20 --commands 40

Only the head's rows are computed, so the layers' work falls with `head_fraction` (projections, feed-forward and the
head's attention rows; attention still reads all 400 keys); wasm time is not measured here.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort

from voxline import paths
from voxline.bench.audio import espeak, hibari, to_16k
from voxline.bench.evalset import first_texts
from voxline.bench.wer import wer
from voxline.convert.ct2_reader import read_ct2_model
from voxline.convert.whisper_onnx import (
    ENCODER_FILE, SAMPLE_RATE, SAMPLES_PER_POSITION, OnnxWhisper, extract_frontend, read_dims,
)

WINDOW_S = 8.0
"""The page's decode window (whisper.js)."""
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


class NumpyEncoder:
    """Whisper's encoder in numpy (pre-norm layers, fused q|k|v as CTranslate2 stores them), and the decoder's
    cross-attention K/V of its output."""

    def __init__(self, ct2_dir: Path):
        self.model = read_ct2_model(ct2_dir / "model.bin")
        self.dims = read_dims(self.model)
        self.d = self.dims.d_model

    def w(self, name: str) -> np.ndarray:
        return np.asarray(self.model[name], dtype=np.float32)

    def linear(self, x: np.ndarray, scope: str, rows: slice = slice(None)) -> np.ndarray:
        y = x @ self.w(f"{scope}/weight")[rows].T
        return y + self.w(f"{scope}/bias")[rows] if f"{scope}/bias" in self.model else y

    def layer_norm(self, x: np.ndarray, scope: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * self.w(f"{scope}/gamma") + self.w(f"{scope}/beta")

    def split(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(x.shape[0], self.dims.heads, self.dims.head_dim).transpose(1, 0, 2)

    @staticmethod
    def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
        """Conv1d, kernel 3, padding 1: x [C, T], w [O, C, 3]."""
        padded = np.pad(x, ((0, 0), (1, 1)))
        steps = (padded.shape[1] - 3) // stride + 1
        cols = np.stack([padded[:, k: k + stride * (steps - 1) + 1: stride] for k in range(3)], axis=-1)
        return np.einsum("ctk,ock->ot", cols, w) + b[:, None]

    def stem(self, mel: np.ndarray) -> np.ndarray:
        x = gelu(self.conv(mel, self.w("encoder/conv1/weight"), self.w("encoder/conv1/bias"), 1))
        x = gelu(self.conv(x, self.w("encoder/conv2/weight"), self.w("encoder/conv2/bias"), 2)).T
        return x + self.w("encoder/position_encodings/encodings")[: x.shape[0]]

    def forward(self, mel: np.ndarray, head: int | None = None, tail: tuple | None = None):
        """(encoder output, each layer's (K, V)) of `mel` [n_mels, frames]; with `head` and `tail` (a run's
        output and K/V over the same window), only the first `head` positions are computed, the rest read from it."""
        x = self.stem(mel)
        if head is not None:
            x = x[:head]
        kvs = []
        for layer in range(self.dims.encoder_layers):
            scope = f"encoder/layer_{layer}/self_attention"
            h = self.layer_norm(x, f"{scope}/layer_norm")
            q = self.split(self.linear(h, f"{scope}/linear_0", slice(0, self.d))) / math.sqrt(self.dims.head_dim)
            k = self.split(self.linear(h, f"{scope}/linear_0", slice(self.d, 2 * self.d)))
            v = self.split(self.linear(h, f"{scope}/linear_0", slice(2 * self.d, 3 * self.d)))
            if tail is not None:
                k = np.concatenate([k, tail[1][layer][0][:, head:]], axis=1)
                v = np.concatenate([v, tail[1][layer][1][:, head:]], axis=1)
            kvs.append((k, v))
            scores = q @ k.transpose(0, 2, 1)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            context = (probs @ v).transpose(1, 0, 2).reshape(q.shape[1], self.d)
            x = x + self.linear(context, f"{scope}/linear_1")
            scope = f"encoder/layer_{layer}/ffn"
            f = gelu(self.linear(self.layer_norm(x, f"{scope}/layer_norm"), f"{scope}/linear_0"))
            x = x + self.linear(f, f"{scope}/linear_1")
        out = self.layer_norm(x, "encoder/layer_norm")
        if tail is not None:
            out = np.concatenate([out, tail[0][head:]], axis=0)
        return out, kvs

    def cross_kv(self, memory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stacked [decoder layers, 1, heads, positions, head_dim] K and V, as the built encoder outputs them."""
        ks, vs = [], []
        for layer in range(self.dims.decoder_layers):
            scope = f"decoder/layer_{layer}/attention/linear_1"
            ks.append(self.split(self.linear(memory, scope, slice(0, self.d)))[None])
            vs.append(self.split(self.linear(memory, scope, slice(self.d, 2 * self.d)))[None])
        return np.stack(ks).astype(np.float32), np.stack(vs).astype(np.float32)


def texts(questions: int, commands: int) -> list[str]:
    """Held-out questions, then held-out commands of set B."""
    return first_texts("questions-en.jsonl", questions) + first_texts("commands-b-en.jsonl", commands)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--commands", type=int, default=40)
    parser.add_argument("--margin", type=int, default=25, help="positions (20 ms each) computed after the audio")
    parser.add_argument("--peak", type=float, default=1.0, help="log10 mel peak of gain-normalised audio")
    args = parser.parse_args()
    encoder = NumpyEncoder(paths.model_dir("whisper-tiny-en-ct2"))
    whisper = OnnxWhisper(paths.model_dir("whisper-tiny-en-onnx"))
    frontend = ort.InferenceSession(extract_frontend(paths.model_dir("whisper-tiny-en-onnx") / ENCODER_FILE)
                                    .SerializeToString(), providers=["CPUExecutionProvider"])
    window = int(WINDOW_S * SAMPLE_RATE)
    positions = window // SAMPLES_PER_POSITION

    def log_mel(samples: np.ndarray) -> np.ndarray:
        padded = np.zeros((1, window), np.float32)
        padded[0, : samples.size] = samples
        zero = np.zeros([1], np.float32)  # the recipe's own features: no gain normalisation in the graph
        return frontend.run(None, {"samples": padded, "gain_normalise": zero, "level_offset": zero})[0][0]

    def heard(memory: np.ndarray) -> str:
        return whisper.decode(whisper.generate(*encoder.cross_kv(memory))[0])

    floor_runs: dict[float, tuple] = {}

    def floor_run(mel: np.ndarray) -> tuple:
        """The encoder over a window that is all of `mel`'s floor value (its last frame: always padding)."""
        floor = round(float(mel[0, -1]), 6)
        if floor not in floor_runs:
            floor_runs[floor] = encoder.forward(np.full_like(mel, floor))
        return floor_runs[floor]

    voices = {"hibari": lambda t: hibari(t, seed=1), "espeak-gb": lambda t: espeak(t, voice="en-gb")}
    kinds = ("exact", "tail_per_utterance", "exact_normalised", "tail_shared")
    refs, hyps, heads = [], {k: [] for k in kinds}, []
    for voice in voices.values():
        for text in texts(args.questions, args.commands):
            clip = to_16k(voice(text))[:window]
            head = min(positions, math.ceil(clip.size / SAMPLES_PER_POSITION) + args.margin)
            mel = log_mel(clip)
            # the normalised audio's loudest frame is `peak`: its floor, (peak - 8 + 4) / 4, is the same for every clip
            peak = 4.0 * float(mel[0, -1]) + 4.0
            mel_n = log_mel(clip * 10 ** ((args.peak - peak) / 2))
            refs.append(text)
            heads.append(head / positions)
            hyps["exact"].append(heard(encoder.forward(mel)[0]))
            hyps["tail_per_utterance"].append(heard(encoder.forward(mel, head, floor_run(mel))[0]))
            hyps["exact_normalised"].append(heard(encoder.forward(mel_n)[0]))
            hyps["tail_shared"].append(heard(encoder.forward(mel_n, head, floor_run(mel_n))[0]))
    same = {k: sum(a == b for a, b in zip(hyps["exact"], hyps[k])) for k in kinds[1:]}
    print(json.dumps({
        "clips": len(refs), "voices": list(voices), "margin_positions": args.margin, "peak": args.peak,
        "head_fraction": {"mean": round(float(np.mean(heads)), 3), "max": round(float(np.max(heads)), 3)},
        "identical_to_exact": same,
        "wer_percent": {k: round(100 * wer(refs, h), 2) for k, h in hyps.items()},
        "floor_runs": len(floor_runs),
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
