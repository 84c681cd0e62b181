"""Sentence embeddings: all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions, mean pooled, unit length), in numpy.

The model comes from a registry package as safetensors and a `tokenizers` file (README, "Models"); at ~22 M
parameters and a dozen tokens a sentence, a forward pass is a few dozen small matrix products, so numpy runs it in
tens of milliseconds and the server needs neither torch nor an ONNX conversion for it. The forward pass is BERT's, written out: embeddings
(word + position + token type 0) and LayerNorm; per layer, 12-head self-attention with the padding masked, a
residual LayerNorm, a GELU feed-forward and another residual LayerNorm; then the mean over the real tokens,
normalised to unit length (sentence-transformers' `Pooling` mean and `Normalize` modules).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

LAYERS = 6
HEADS = 12
HIDDEN = 384
LAYER_NORM_EPS = 1e-12
MAX_TOKENS = 128
"""Longer inputs are cut (the model was trained on 128-token pieces; commands are a dozen tokens)."""
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (an 8-byte header length, a JSON header of offsets, raw little-endian
    data)."""
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        # a copy: the offsets need not be aligned, and unaligned arrays miss BLAS (100× slower products)
        tensors[name] = np.frombuffer(body[begin:end], dtype=_DTYPES[spec["dtype"]]).reshape(spec["shape"]).copy()
    return tensors


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function to within 1.5e-7 (Abramowitz and Stegun 7.1.26): numpy has none, and BERT's GELU is
    the exact (erf) one."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


class SentenceEncoder:
    """all-MiniLM-L6-v2 from a folder holding `model.safetensors` and `tokenizer.json`."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.weights = read_safetensors(Path(folder) / WEIGHTS)
        self.tokenizer = Tokenizer.from_file(str(Path(folder) / TOKENIZER))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length embeddings, one row per text (cosine similarity is their dot product)."""
        if not texts:
            return np.zeros((0, HIDDEN), np.float32)
        from threadpoolctl import threadpool_limits

        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings])
        mask = np.array([e.attention_mask for e in encodings], np.float32)
        # One BLAS thread: the products are small, and OpenBLAS's spinning threads would fight the LLM's for the
        # cores (a one-sentence pass took 14 ms per product instead of 0.1 on a loaded 2-core machine).
        with threadpool_limits(limits=1, user_api="blas"):
            hidden = self._forward(ids, mask)
        pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1.0)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.weights
        batch, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        head = HIDDEN // HEADS
        blocked = (1.0 - mask)[:, None, None, :] * -1e9  # padding is never attended to
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."

            def heads(name: str) -> np.ndarray:
                return self._linear(x, p + name).reshape(batch, length, HEADS, head).transpose(0, 2, 1, 3)

            q, k, v = heads("attention.self.query"), heads("attention.self.key"), heads("attention.self.value")
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, HIDDEN)
            x = self._norm(x + self._linear(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inner = self._linear(x, p + "intermediate.dense")
            inner = 0.5 * inner * (1.0 + _erf(inner / np.sqrt(2.0)))
            x = self._norm(x + self._linear(inner, p + "output.dense"), p + "output.LayerNorm")
        return x

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # one 2-D product (a 3-D one is a loop of small products in numpy: ~6× slower)
        weight = self.weights[name + ".weight"]
        out = x.reshape(-1, x.shape[-1]) @ weight.T + self.weights[name + ".bias"]
        return out.reshape(*x.shape[:-1], weight.shape[0])

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        scaled = (x - mean) / np.sqrt(var + LAYER_NORM_EPS)
        return scaled * self.weights[name + ".weight"] + self.weights[name + ".bias"]
