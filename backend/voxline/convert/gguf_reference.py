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

from pathlib import Path

import numpy as np

# GGML rope modes, as llama.cpp's llama_model_rope_type() assigns them.
_ROPE_MODE = {"llama": "normal", "qwen2": "neox"}


def _meta(reader, key: str, default=None):
    f = reader.get_field(key)
    return default if f is None else f.contents()


class ReferenceModel:
    """Weights of one GGUF dequantised to float32, plus an incremental forward pass with a KV cache.

    With ``keep_weights=False`` each layer's tensors are dequantised when used and dropped afterwards, which keeps
    memory low for a single forward over a prompt; ``True`` dequantises once for repeated decoding steps.
    """

    def __init__(self, gguf_path: Path, keep_weights: bool = True):
        from gguf import GGUFReader

        self.reader = GGUFReader(Path(gguf_path))
        self._tensors = {t.name: t for t in self.reader.tensors}
        self._keep = keep_weights
        self._cache: dict[str, np.ndarray] = {}
        arch = _meta(self.reader, "general.architecture")
        if arch not in _ROPE_MODE:
            raise ValueError(f"no reference forward for architecture {arch!r}")
        self.arch = arch
        self.n_layers = int(_meta(self.reader, f"{arch}.block_count"))
        n_embd = int(_meta(self.reader, f"{arch}.embedding_length"))
        self.n_head = int(_meta(self.reader, f"{arch}.attention.head_count"))
        self.n_head_kv = int(_meta(self.reader, f"{arch}.attention.head_count_kv", self.n_head))
        self.head_dim = int(_meta(self.reader, f"{arch}.attention.key_length", n_embd // self.n_head))
        self.rope_base = float(_meta(self.reader, f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(_meta(self.reader, f"{arch}.attention.layer_norm_rms_epsilon"))
        eos = _meta(self.reader, "tokenizer.ggml.eos_token_id")
        self.eos_id = None if eos is None else int(eos)

    def weight(self, name: str) -> np.ndarray | None:
        """Tensor `name` as float32 in [rows, cols] (GGML's ne1 x ne0), or None when the GGUF lacks it."""
        if name in self._cache:
            return self._cache[name]
        t = self._tensors.get(name)
        if t is None:
            return None
        from gguf.quants import dequantize

        array = dequantize(t.data, t.tensor_type).reshape(tuple(int(d) for d in reversed(t.shape)))
        array = np.array(array, dtype=np.float32)
        if self._keep:
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
