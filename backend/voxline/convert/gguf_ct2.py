"""Convert a llama.cpp GGUF chat model straight into a CTranslate2 int8 model, without torch or transformers.

Supported architectures are the two Voxline ships: ``llama`` (SmolLM2) and ``qwen2`` (Qwen2.5). The GGUF is read
with :class:`gguf.GGUFReader` (memory-mapped), every tensor is dequantised to float32 on its own with
:func:`gguf.quants.dequantize`, placed into a :class:`ctranslate2.specs.TransformerDecoderModelSpec`, and the spec is
quantised and saved by CTranslate2 itself.

The trap: llama.cpp's ``convert_hf_to_gguf.py`` reorders the rows of the Q and K projections of ``llama``-arch
models so that its "normal" RoPE (which rotates *adjacent* pairs ``(2i, 2i+1)``) reproduces Hugging Face's
rotate-half RoPE (which pairs ``i`` with ``i + head_dim/2``). It does not do this for ``qwen2``, which llama.cpp runs
with NEOX (rotate-half) RoPE directly. Here the rows are put back into Hugging Face order and CTranslate2 runs
rotate-half RoPE (``rotary_interleave=False``) for both architectures, so the output matches what the upstream
transformers route would produce.

Besides ``model.bin``/``config.json``/``vocabulary.json`` (CTranslate2), the output folder holds a Hugging Face
``tokenizer.json`` rebuilt from the GGUF vocabulary and a ``voxline.json`` describing how to prompt the model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

SUPPORTED_ARCHS = ("llama", "qwen2")
QUANTIZATIONS = ("int8", "float32")

# Split regexes of the byte-level BPE pre-tokenizers, keyed by GGUF `tokenizer.ggml.pre`. They mirror the
# `regex_exprs` that llama.cpp's llama-vocab.cpp applies for each pre-tokenizer type, applied in order, each one
# splitting every piece left by the previous one (HF `Split` with behaviour "Isolated" keeps unmatched text as
# pieces too, as llama.cpp's unicode_regex_split does).
#   smollm (StarCoder family): digits one by one, then the GPT-2 regex.
#   qwen2: the regex of Qwen2's own tokenizer.json; its case-insensitive contraction group is what llama.cpp
#          spells out as '[sS]|'[tT]|... because std::regex lacks (?i:); the Oniguruma engine of `tokenizers`
#          understands (?i:) natively.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS: dict[str, tuple[str, ...]] = {
    "smollm": (r"\p{N}", _GPT2_SPLIT),
    "qwen2": (_QWEN2_SPLIT,),
}
# Qwen2's upstream tokenizer.json NFC-normalises input; llama.cpp skips it, but NFC text (the common case) is
# unaffected, and following upstream keeps decomposed accents from turning into unseen byte sequences.
_NFC_PRE = frozenset({"qwen2"})

# GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
_TT_NORMAL, _TT_UNKNOWN, _TT_CONTROL, _TT_USER_DEFINED, _TT_UNUSED, _TT_BYTE = 1, 2, 3, 4, 5, 6

# Stop tokens a ChatML model may emit at the end of a turn, besides its own eos.
_CHATML_STOPS = ("<|im_end|>", "<|endoftext|>")

_LAYERS_PER_LOG = 6


@dataclass(frozen=True)
class Hparams:
    """Architecture hyper-parameters read from a GGUF's metadata."""

    arch: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_base: float
    rms_eps: float
    context_length: int


_MISSING = object()


def field(reader, key: str, default=_MISSING):
    """Return the decoded value of metadata `key` (str, number, bool or list), or `default` when absent."""
    f = reader.get_field(key)
    if f is None:
        if default is _MISSING:
            raise KeyError(f"GGUF has no metadata key {key!r}")
        return default
    return f.contents()


def read_hparams(reader) -> Hparams:
    """Read and sanity-check the hyper-parameters; raise ValueError for anything this converter cannot express."""
    arch = field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported GGUF architecture {arch!r}: this converter handles {', '.join(SUPPORTED_ARCHS)}")
    n_embd = int(field(reader, f"{arch}.embedding_length"))
    n_head = int(field(reader, f"{arch}.attention.head_count"))
    head_dim = int(field(reader, f"{arch}.attention.key_length", n_embd // n_head))
    rope_dim = int(field(reader, f"{arch}.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ValueError(f"partial rotary embeddings ({rope_dim} of {head_dim} dims) are not supported")
    scaling = field(reader, f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", ""):
        raise ValueError(f"RoPE scaling {scaling!r} is not supported")
    return Hparams(
        arch=arch,
        n_layers=int(field(reader, f"{arch}.block_count")),
        n_embd=n_embd,
        n_ff=int(field(reader, f"{arch}.feed_forward_length")),
        n_head=n_head,
        n_head_kv=int(field(reader, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        rope_base=float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        context_length=int(field(reader, f"{arch}.context_length", 0)),
    )


class TensorSource:
    """Dequantises named GGUF tensors one at a time into float32 arrays in PyTorch layout ([out, in])."""

    def __init__(self, reader):
        self._tensors = {t.name: t for t in reader.tensors}

    def has(self, name: str) -> bool:
        """Whether the GGUF holds tensor `name`."""
        return name in self._tensors

    def get(self, name: str) -> np.ndarray:
        """Dequantise tensor `name` into a fresh, contiguous float32 array."""
        from gguf.quants import dequantize

        t = self._tensors.get(name)
        if t is None:
            raise KeyError(f"GGUF has no tensor {name!r}")
        # GGML lists dimensions fastest-first; numpy wants them slowest-first.
        shape = tuple(int(d) for d in reversed(t.shape))
        array = dequantize(t.data, t.tensor_type).reshape(shape)
        # Always a copy: F32 tensors come back as views into the memory-mapped file, which must not leak into the spec.
        return np.array(array, dtype=np.float32, order="C")


def unpermute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation for `llama`-arch models, back to Hugging Face's rotate-half order.

    Within each head of size D, llama.cpp moved HF row ``s*D/2 + i`` (half ``s``, index ``i``) to row ``2*i + s``,
    so rows ``2i`` and ``2i+1`` form the pair its adjacent-pair RoPE rotates. Reading each head as (D/2, 2) and
    transposing to (2, D/2) restores HF order. Works for weights ([rows, in]) and biases ([rows]).
    """
    rows = weight.shape[0]
    head_dim = rows // n_heads
    if head_dim * n_heads != rows or head_dim % 2:
        raise ValueError(f"cannot split {rows} rows into {n_heads} heads of even size")
    rest = weight.shape[1:]
    return weight.reshape(n_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape).copy()


def _linear(spec, weight: np.ndarray, bias: np.ndarray | None = None) -> None:
    """Set a CT2 LinearSpec; without a bias the spec keeps its OPTIONAL marker."""
    spec.weight = weight
    if bias is not None:
        spec.bias = bias


def build_spec(reader, hp: Hparams, log: Callable[[str], None] = print, *, _skip_unpermute: bool = False):
    """Fill a CTranslate2 decoder spec from the GGUF's tensors (float32, not yet quantised).

    `_skip_unpermute` exists only so tests can prove that omitting the RoPE row fix is detected.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    spec = transformer_spec.TransformerDecoderModelSpec.from_config(
        hp.n_layers,
        hp.n_head,
        pre_norm=True,
        activation=common_spec.Activation.SWISH,
        ffn_glu=True,
        rms_norm=True,
        rotary_dim=0,
        rotary_interleave=False,
        rotary_base=hp.rope_base,
        num_heads_kv=hp.n_head_kv if hp.n_head_kv != hp.n_head else None,
        head_dim=hp.head_dim if hp.head_dim * hp.n_head != hp.n_embd else None,
    )
    src = TensorSource(reader)
    unpermute = hp.arch == "llama" and not _skip_unpermute

    dec = spec.decoder
    dec.scale_embeddings = False
    dec.embeddings.weight = src.get("token_embd.weight")
    dec.layer_norm.gamma = src.get("output_norm.weight")
    # Tied embeddings: llama.cpp omits output.weight and reuses token_embd (CT2 then aliases the two on save).
    output_name = "output.weight" if src.has("output.weight") else "token_embd.weight"
    dec.projection.weight = dec.embeddings.weight if output_name == "token_embd.weight" else src.get(output_name)

    started = time.monotonic()
    for i, layer in enumerate(dec.layer):
        p = f"blk.{i}."

        def opt(name: str) -> np.ndarray | None:
            return src.get(p + name) if src.has(p + name) else None

        q_w, q_b = src.get(p + "attn_q.weight"), opt("attn_q.bias")
        k_w, k_b = src.get(p + "attn_k.weight"), opt("attn_k.bias")
        v_w, v_b = src.get(p + "attn_v.weight"), opt("attn_v.bias")
        if unpermute:
            q_w = unpermute_rope_rows(q_w, hp.n_head)
            k_w = unpermute_rope_rows(k_w, hp.n_head_kv)
            q_b = None if q_b is None else unpermute_rope_rows(q_b, hp.n_head)
            k_b = None if k_b is None else unpermute_rope_rows(k_b, hp.n_head_kv)

        attn = layer.self_attention
        attn.layer_norm.gamma = src.get(p + "attn_norm.weight")
        # CT2 runs self-attention as one fused QKV projection; a missing bias becomes zeros.
        qkv_bias = None
        if any(b is not None for b in (q_b, k_b, v_b)):
            pairs = ((q_w, q_b), (k_w, k_b), (v_w, v_b))
            qkv_bias = np.concatenate([b if b is not None else np.zeros(w.shape[0], np.float32) for w, b in pairs])
        _linear(attn.linear[0], np.concatenate([q_w, k_w, v_w]), qkv_bias)
        _linear(attn.linear[1], src.get(p + "attn_output.weight"), opt("attn_output.bias"))

        ffn = layer.ffn
        ffn.layer_norm.gamma = src.get(p + "ffn_norm.weight")
        _linear(ffn.linear_0, src.get(p + "ffn_gate.weight"))
        _linear(ffn.linear_0_noact, src.get(p + "ffn_up.weight"))
        _linear(ffn.linear_1, src.get(p + "ffn_down.weight"))

        if (i + 1) % _LAYERS_PER_LOG == 0 or i + 1 == hp.n_layers:
            log(f"  layers {i + 1}/{hp.n_layers} dequantised ({time.monotonic() - started:.1f} s)")
    return spec


def _tokens(reader) -> tuple[list[str], list[int]]:
    tokens = [str(t) for t in field(reader, "tokenizer.ggml.tokens")]
    types = [int(t) for t in field(reader, "tokenizer.ggml.token_type", [_TT_NORMAL] * len(tokens))]
    if len(types) != len(tokens):
        raise ValueError("tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length")
    return tokens, types


def tokenizer_json(reader) -> dict:
    """Build a Hugging Face `tokenizers` definition (byte-level BPE) from the GGUF's vocabulary and merges.

    Control tokens become special added tokens and user-defined ones plain added tokens, so both are matched
    whole in input text (``<|im_start|>`` → one id) as llama.cpp does with ``parse_special``.
    """
    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"only byte-level BPE tokenizers (ggml model 'gpt2') are supported, not {model!r}")
    pre = field(reader, "tokenizer.ggml.pre", "default")
    splits = PRE_TOKENIZER_SPLITS.get(pre)
    if splits is None:
        raise ValueError(f"unknown pre-tokenizer {pre!r}: known are {', '.join(sorted(PRE_TOKENIZER_SPLITS))}")
    tokens, types = _tokens(reader)
    if len(set(tokens)) != len(tokens):
        raise ValueError("GGUF vocabulary has duplicate tokens")

    merges = []
    for m in field(reader, "tokenizer.ggml.merges"):
        left, sep, right = str(m).partition(" ")
        if not sep or not left or not right:
            raise ValueError(f"malformed BPE merge {m!r}")
        merges.append([left, right])

    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": kind == _TT_CONTROL,
        }
        for i, (tok, kind) in enumerate(zip(tokens, types))
        if kind in (_TT_CONTROL, _TT_USER_DEFINED)
    ]
    pre_tokenizers = [
        {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False} for rx in splits
    ]
    pre_tokenizers.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if pre in _NFC_PRE else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }


def _special(reader, tokens: list[str], key: str) -> str | None:
    idx = field(reader, f"tokenizer.ggml.{key}_token_id", None)
    return tokens[int(idx)] if idx is not None and 0 <= int(idx) < len(tokens) else None


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _write_json(path: Path, data) -> None:
    # Fixed key order, separators and trailing newline keep repeated builds byte-identical.
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def build(
    gguf_path: Path,
    out_dir: Path,
    quantization: str = "int8",
    log: Callable[[str], None] = print,
    *,
    _skip_unpermute: bool = False,
) -> list[Path]:
    """Convert `gguf_path` into a CTranslate2 model folder `out_dir`; return the files written, sorted.

    `quantization` is "int8" (what Voxline ships) or "float32" (for exact comparisons in tests). The folder is
    assembled next to `out_dir` and moved into place only when complete, replacing any previous build.
    `_skip_unpermute` deliberately produces a broken model; it exists for the test that proves the check works.
    """
    from gguf import GGUFReader

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, not {quantization!r}")
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    started = time.monotonic()

    reader = GGUFReader(gguf_path)
    hp = read_hparams(reader)
    tokens, _ = _tokens(reader)
    log(
        f"{gguf_path.name}: {hp.arch}, {hp.n_layers} layers, d={hp.n_embd}, heads {hp.n_head}/{hp.n_head_kv}, "
        f"vocab {len(tokens)}"
    )

    spec = build_spec(reader, hp, log, _skip_unpermute=_skip_unpermute)
    if spec.decoder.embeddings.weight.shape[0] != len(tokens):
        raise ValueError(f"embedding rows {spec.decoder.embeddings.weight.shape[0]} != vocabulary size {len(tokens)}")
    spec.register_vocabulary(tokens)
    bos, eos, unk = (_special(reader, tokens, k) for k in ("bos", "eos", "unknown"))
    if eos is None:
        raise ValueError("GGUF declares no eos token")
    spec.config.bos_token = bos or eos
    spec.config.eos_token = eos
    spec.config.unk_token = unk or ""
    spec.config.layer_norm_epsilon = hp.rms_eps

    template = field(reader, "tokenizer.chat_template", "")
    stops = [eos] + [t for t in _CHATML_STOPS if t in tokens and t != eos]
    manifest = {
        "format": 1,
        "name": field(reader, "general.name", gguf_path.stem),
        "arch": hp.arch,
        "quantization": quantization,
        "context_length": hp.context_length,
        "chat_template": "chatml" if "<|im_start|>" in template else None,
        "bos_token": bos,
        "eos_token": eos,
        "stop_tokens": stops,
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "source": {"file": gguf_path.name, "size": gguf_path.stat().st_size, "sha256": sha256_file(gguf_path)},
        "converter": "voxline.convert.gguf_ct2",
        "chat_template_jinja": template,
    }
    if manifest["chat_template"] is None:
        log("  warning: the GGUF chat template is not ChatML")

    staging = out_dir.parent / f".{out_dir.name}.building"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        log(f"  quantising to {quantization} and saving")
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(staging))
        del spec
        _write_json(staging / "tokenizer.json", tokenizer_json(reader))
        _write_json(staging / "voxline.json", manifest)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

    files = sorted(p for p in out_dir.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    log(f"  wrote {out_dir} ({total / 2**20:.1f} MiB) in {time.monotonic() - started:.1f} s")
    return files
