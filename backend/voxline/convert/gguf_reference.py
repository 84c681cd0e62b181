"""A plain numpy forward pass over a GGUF's own weights: the yardstick the converted CTranslate2 models are tested on.

It deliberately shares nothing with :mod:`voxline.convert.gguf_ct2` except dequantisation (``gguf.quants``): the
weights stay in llama.cpp's layout and RoPE is applied the way llama.cpp applies it to each architecture:

* ``llama``: GGML "normal" RoPE, rotating *adjacent* pairs ``(x[2i], x[2i+1])`` of the (permuted) Q/K rows;
* ``qwen2``: GGML NEOX RoPE, rotating ``(x[i], x[i + d/2])`` (halves).

So a converter that forgets to undo llama.cpp's Q/K row permutation (or undoes it for qwen2) disagrees with it.
Everything runs in float32: RMSNorm, grouped-query attention with a causal mask, SwiGLU FFN, Q/K/V biases where the
GGUF has them, tied output embeddings when ``output.weight`` is absent.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

# GGML rope modes, as llama.cpp's llama_model_rope_type() assigns them.
_ROPE_MODE = {"llama": "normal", "qwen2": "neox"}

# GGUF metadata value types: scalar struct formats by type id; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class GGUFFile:
    """A minimal GGUF (v2/v3) reader: metadata as Python values, tensors as raw memory-mapped bytes.

    Written separately from gguf.GGUFReader, which the converter uses, so that a misreading of the format by either
    shows up as a disagreement; it is also much faster on the 150k-entry vocabularies.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = self._map
        self._pos = 0
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"{self.path} is not a GGUF file")
        self._pos = 4
        version = self._unpack("I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        n_tensors, n_kv = self._unpack("Q"), self._unpack("Q")
        self.metadata: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._unpack("I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._unpack("Q") for _ in range(self._unpack("I"))]
            infos.append((name, dims, self._unpack("I"), self._unpack("Q")))
        align = int(self.metadata.get("general.alignment", 32))
        data_start = -(-self._pos // align) * align
        self.tensors = {name: (dims, qtype, data_start + offset) for name, dims, qtype, offset in infos}

    def _unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        (value,) = struct.unpack_from("<" + fmt, self._map, self._pos)
        self._pos += size
        return value

    def _string(self) -> str:
        n = self._unpack("Q")
        text = bytes(self._map[self._pos : self._pos + n]).decode("utf-8")
        self._pos += n
        return text

    def _value(self, vtype: int):
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            etype, count = self._unpack("I"), self._unpack("Q")
            if etype in _SCALARS and etype != 7:
                dtype = np.dtype("<" + _SCALARS[etype])
                values = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).tolist()
                self._pos += dtype.itemsize * count
                return values
            return [self._value(etype) for _ in range(count)]
        return self._unpack(_SCALARS[vtype])

    def tensor(self, name: str) -> np.ndarray | None:
        """Tensor `name` dequantised to float32, shaped [ne1, ne0] (rows of ne0 values), or None if absent."""
        if name not in self.tensors:
            return None
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import dequantize

        dims, qtype, start = self.tensors[name]
        qtype = GGMLQuantizationType(qtype)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        row_bytes = dims[0] // block * block_bytes
        rows = int(np.prod(dims[1:], dtype=np.int64)) if len(dims) > 1 else 1
        raw = self._map[start : start + rows * row_bytes].reshape(rows, row_bytes)
        values = np.array(dequantize(raw, qtype), dtype=np.float32)
        return values.reshape(tuple(reversed(dims)))


class ReferenceModel:
    """Weights of one GGUF dequantised to float32, plus an incremental forward pass with a KV cache.

    With ``keep_weights=False`` each layer's tensors are dequantised when used and dropped afterwards, which keeps
    memory low for a single forward over a prompt; ``True`` dequantises once for repeated decoding steps.
    """

    def __init__(self, gguf_path: Path, keep_weights: bool = True):
        self.gguf = GGUFFile(gguf_path)
        meta = self.gguf.metadata
        self._keep = keep_weights
        self._cache: dict[str, np.ndarray] = {}
        arch = meta["general.architecture"]
        if arch not in _ROPE_MODE:
            raise ValueError(f"no reference forward for architecture {arch!r}")
        self.arch = arch
        self.n_layers = int(meta[f"{arch}.block_count"])
        n_embd = int(meta[f"{arch}.embedding_length"])
        self.n_head = int(meta[f"{arch}.attention.head_count"])
        self.n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv", self.n_head))
        self.head_dim = int(meta.get(f"{arch}.attention.key_length", n_embd // self.n_head))
        self.rope_base = float(meta.get(f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(meta[f"{arch}.attention.layer_norm_rms_epsilon"])
        eos = meta.get("tokenizer.ggml.eos_token_id")
        self.eos_id = None if eos is None else int(eos)

    @property
    def tokens(self) -> list[str]:
        """The GGUF vocabulary (`tokenizer.ggml.tokens`), indexed by token id."""
        return self.gguf.metadata["tokenizer.ggml.tokens"]

    def weight(self, name: str) -> np.ndarray | None:
        """Tensor `name` as float32 [rows, cols] (GGML's ne1 x ne0), or None when the GGUF lacks it."""
        if name in self._cache:
            return self._cache[name]
        array = self.gguf.tensor(name)
        if self._keep and array is not None:
            self._cache[name] = array
        return array

    def _rms(self, x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)) * gamma

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Rotate x of shape [T, heads, head_dim] at the given positions, in this arch's GGML rope mode."""
        d = self.head_dim
        inv_freq = self.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, d/2]
        cos = np.cos(angles).astype(np.float32)[:, None, :]
        sin = np.sin(angles).astype(np.float32)[:, None, :]
        out = np.empty_like(x)
        if _ROPE_MODE[self.arch] == "normal":
            a, b = x[..., 0::2], x[..., 1::2]
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
        else:
            a, b = x[..., : d // 2], x[..., d // 2 :]
            out[..., : d // 2] = a * cos - b * sin
            out[..., d // 2 :] = a * sin + b * cos
        return out

    @staticmethod
    def _proj(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        y = x @ w.T
        return y if b is None else y + b

    def forward(self, ids: list[int], kv: list | None = None) -> tuple[np.ndarray, list]:
        """Run `ids` after the tokens already in `kv`; return (logits [len(ids), vocab], updated kv)."""
        if kv is None:
            kv = [None] * self.n_layers
        past = 0 if kv[0] is None else kv[0][0].shape[0]
        t = len(ids)
        positions = np.arange(past, past + t)
        x = self.weight("token_embd.weight")[np.asarray(ids)].astype(np.float32)
        group = self.n_head // self.n_head_kv
        scale = np.float32(1.0 / np.sqrt(self.head_dim))
        # Query i (absolute position past+i) may see keys 0..past+i.
        mask = np.triu(np.full((t, past + t), -np.inf, dtype=np.float32), k=past + 1)

        for i in range(self.n_layers):
            p = f"blk.{i}."
            w = self.weight
            h = self._rms(x, w(p + "attn_norm.weight"))
            q = self._proj(h, w(p + "attn_q.weight"), w(p + "attn_q.bias")).reshape(t, self.n_head, self.head_dim)
            k = self._proj(h, w(p + "attn_k.weight"), w(p + "attn_k.bias")).reshape(t, self.n_head_kv, self.head_dim)
            v = self._proj(h, w(p + "attn_v.weight"), w(p + "attn_v.bias")).reshape(t, self.n_head_kv, self.head_dim)
            q, k = self._rope(q, positions), self._rope(k, positions)
            if kv[i] is not None:
                k = np.concatenate([kv[i][0], k])
                v = np.concatenate([kv[i][1], v])
            kv[i] = (k, v)

            heads = []
            for hq in range(self.n_head):
                hk = hq // group
                scores = (q[:, hq, :] @ k[:, hk, :].T) * scale + mask
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                scores /= scores.sum(axis=-1, keepdims=True)
                heads.append(scores @ v[:, hk, :])
            attn = np.concatenate(heads, axis=-1)
            x = x + self._proj(attn, w(p + "attn_output.weight"), w(p + "attn_output.bias"))

            h = self._rms(x, w(p + "ffn_norm.weight"))
            gate = h @ w(p + "ffn_gate.weight").T
            up = h @ w(p + "ffn_up.weight").T
            x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w(p + "ffn_down.weight").T

        x = self._rms(x, self.weight("output_norm.weight"))
        out = self.weight("output.weight")
        if out is None:
            out = self.weight("token_embd.weight")
        return (x @ out.T).astype(np.float32), kv

    def greedy(self, prompt_ids: list[int], n_tokens: int, stop_at_eos: bool = True) -> list[int]:
        """Greedy continuation of `prompt_ids`: up to `n_tokens` ids, ending early after eos if `stop_at_eos`."""
        logits, kv = self.forward(list(prompt_ids))
        generated: list[int] = []
        while len(generated) < n_tokens:
            nxt = int(np.argmax(logits[-1]))
            generated.append(nxt)
            if stop_at_eos and nxt == self.eos_id:
                break
            logits, kv = self.forward([nxt], kv)
        return generated


def logits(gguf_path: Path, ids: list[int]) -> np.ndarray:
    """Logits [len(ids), vocab] of one forward pass over `ids`, dequantising layer by layer to save memory."""
    return ReferenceModel(gguf_path, keep_weights=False).forward(list(ids))[0]


def greedy(gguf_path: Path, prompt_ids: list[int], n_tokens: int) -> list[int]:
    """Greedy continuation of `prompt_ids` by the GGUF model (stops after eos), `n_tokens` ids at most."""
    return ReferenceModel(gguf_path).greedy(prompt_ids, n_tokens)
