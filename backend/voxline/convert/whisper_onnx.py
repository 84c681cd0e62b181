"""Convert Whisper (CTranslate2 `model.bin`) to two int8 ONNX graphs for onnxruntime-web, with numpy + onnx only.

Outputs of `build(src_dir, out_dir)`:

* `encoder.int8.onnx`: `samples` float32 [1, N] (16 kHz mono, N <= 480000, padded by the caller) ->
  `cross_k`, `cross_v` float32 [layers, 1, heads, frames, head_dim] with frames = ceil((N // 160) / 2).
  The log-mel front end is inside the graph and reproduces faster-whisper's `FeatureExtractor` on the
  same samples (its 160 trailing zeros, reflect padding, periodic Hann, Slaney mel, log10 clamp,
  max-8 floor, (x+4)/4), then keeps the first N // 160 frames, as faster-whisper does when it
  trims the features of a 30 s window to 3000 frames. Its other inputs (`gain_normalise`, `level_offset`,
  `tail_k`, `tail_v`, `tail_cross_k`, `tail_cross_v`; `plain_encoder_feeds` gives the ones that leave it as
  described) and outputs (`self_k`, `self_v`) let a window's silent tail be read from a cache and only its head be
  computed (`encoder_graph`).
* `decoder.int8.onnx`: `tokens` int64 [1, T], `past_k`/`past_v` float32 [layers, 1, heads, P, head_dim]
  (P = 0 on the first call), `cross_k`/`cross_v`, `logits_from` int64 [1] -> `logits` float32 [T - F, vocab]
  of the input positions from F = `logits_from` on (-1: the last position alone, as a plain step needs; 0: every
  position, as a run that checks drafted tokens needs), `new_k`/`new_v` [layers, 1, heads, P + T, head_dim].
  Positions start at P, read from `past_k`'s shape.
  The token embedding is stored once, as int8 with one scale per token, and is reused (through
  MatMulInteger) as the tied output projection.
* `tokens.json`: id -> token strings (GPT-2 byte-level alphabet), special ids, decoding prompt,
  suppression lists and model dims; with the GPT-2 byte decoder this is all a browser needs.

`OnnxWhisper` is a small Python reference runtime for those files (greedy decoding with the KV cache,
token suppression as faster-whisper applies it), used by the tests and as the model for the JS port.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from voxline.convert.ct2_reader import CT2FormatError, CT2Model, read_ct2_model
from voxline.convert.onnx_graph import GraphBuilder

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
MAX_SAMPLES = 30 * SAMPLE_RATE
LAYER_NORM_EPS = 1e-5
MASK_VALUE = -1e9  # finite so that a fully masked row could never turn into NaN
MAX_NEW_TOKENS = 224  # CTranslate2's cap for Whisper: half the 448-token text context
LAST_POSITION = np.array([-1], dtype=np.int64)  # the decoder's `logits_from` for a plain step

ENCODER_FILE = "encoder.int8.onnx"
DECODER_FILE = "decoder.int8.onnx"
TOKENS_FILE = "tokens.json"

Log = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------------------
# Model dimensions and tokenizer facts
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhisperDims:
    """Sizes read from the checkpoint (nothing is assumed about which Whisper size it is)."""

    n_mels: int
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    n_audio_ctx: int
    n_text_ctx: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def _count_layers(model: CT2Model, prefix: str) -> int:
    n = 0
    while f"{prefix}/layer_{n}/ffn/linear_0/weight" in model:
        n += 1
    return n


def read_dims(model: CT2Model) -> WhisperDims:
    """Derive the dimensions from the variable shapes and check the spec is a Whisper one this code maps."""
    if model.spec_name != "WhisperSpec" or model.spec_revision != 3:
        raise CT2FormatError(
            f"expected a WhisperSpec revision 3 model, got {model.spec_name} revision {model.spec_revision}"
        )
    heads = int(model.scalar("encoder/num_heads"))
    if int(model.scalar("decoder/num_heads")) != heads:
        raise CT2FormatError("encoder and decoder head counts differ; not a standard Whisper model")
    n_audio_ctx, d_model = model["encoder/position_encodings/encodings"].shape
    n_text_ctx = model["decoder/position_encodings/encodings"].shape[0]
    if d_model % heads:
        raise CT2FormatError(f"d_model {d_model} is not a multiple of {heads} heads")
    return WhisperDims(
        n_mels=model["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        heads=heads,
        encoder_layers=_count_layers(model, "encoder"),
        decoder_layers=_count_layers(model, "decoder"),
        n_audio_ctx=n_audio_ctx,
        n_text_ctx=n_text_ctx,
        vocab=model["decoder/embeddings/weight"].shape[0],
    )


# Whisper's list of symbols that mark non-speech annotations ("[MUSIC]", "(laughs)", "♪"); faster-whisper
# suppresses the tokens that spell them when called with suppress_tokens=[-1].
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC_SIGNS = "♩♪♫♬♭♮♯"


def non_speech_token_ids(tokenizer_json: Path) -> list[int]:
    """The token ids faster-whisper's `Tokenizer.non_speech_tokens` yields for this tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    # A leading hyphen or apostrophe is a speaker/annotation marker; inside words they stay allowed.
    ids = {enc(" -")[0], enc(" '")[0]}
    for symbol in _NON_SPEECH_SYMBOLS + list(_MUSIC_SIGNS):
        for variant in (symbol, " " + symbol):
            encoded = enc(variant)
            # Music signs share their first UTF-8 bytes, so suppressing the first token is safe for them.
            if len(encoded) == 1 or symbol in _MUSIC_SIGNS:
                ids.add(encoded[0])
    return sorted(ids)


def _special_ids(vocab: list[str]) -> dict[str, int | None]:
    index = {token: i for i, token in enumerate(vocab) if token.startswith("<|") and token.endswith("|>")}
    names = {
        "eot": "<|endoftext|>",
        "sot": "<|startoftranscript|>",
        "translate": "<|translate|>",
        "transcribe": "<|transcribe|>",
        "startoflm": "<|startoflm|>",
        "startofprev": "<|startofprev|>",
        "nocaptions": "<|nocaptions|>",
        "nospeech": "<|nospeech|>",
        "notimestamps": "<|notimestamps|>",
        "en": "<|en|>",
    }
    special: dict[str, int | None] = {key: index.get(token) for key, token in names.items()}
    if None in (special["eot"], special["sot"], special["notimestamps"]):
        raise CT2FormatError("vocabulary lacks <|endoftext|>, <|startoftranscript|> or <|notimestamps|>")
    # Older checkpoints call the no-speech token <|nocaptions|>; expose one name for the runtime.
    special["no_speech"] = special["nospeech"] if special["nospeech"] is not None else special["nocaptions"]
    special["timestamp_begin"] = special["notimestamps"] + 1
    return special


def _is_multilingual(vocab_size: int) -> bool:
    # Same rule as openai-whisper and faster-whisper: multilingual checkpoints have 51865+ tokens.
    return vocab_size >= 51865


def read_vocabulary(src_dir: Path) -> list[str]:
    """CTranslate2's id -> token list: `vocabulary.json` (newer converters) or `vocabulary.txt` (one per line)."""
    if (src_dir / "vocabulary.json").is_file():
        return list(json.loads((src_dir / "vocabulary.json").read_text(encoding="utf-8")))
    # split("\n"), not splitlines(): a token could in principle hold another Unicode line separator.
    vocab = (src_dir / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    return vocab


def tokens_table(src_dir: Path, dims: WhisperDims, config: dict) -> dict:
    """Everything the browser decoder needs besides the two graphs, as a JSON-ready dict."""
    vocab = read_vocabulary(src_dir)
    if len(vocab) != dims.vocab:
        raise CT2FormatError(f"the vocabulary has {len(vocab)} tokens, the model {dims.vocab}")
    special = _special_ids(vocab)
    multilingual = _is_multilingual(dims.vocab)
    sot_sequence = [special["sot"]]
    if multilingual:
        sot_sequence += [special["en"], special["transcribe"]]
    always = [special[k] for k in ("transcribe", "translate", "sot", "startofprev", "startoflm", "no_speech")]
    suppress = sorted(set(non_speech_token_ids(src_dir / "tokenizer.json")) | {i for i in always if i is not None})
    return {
        "format": 1,
        "multilingual": multilingual,
        "dims": {
            "n_mels": dims.n_mels,
            "d_model": dims.d_model,
            "layers": dims.decoder_layers,
            "encoder_layers": dims.encoder_layers,
            "heads": dims.heads,
            "head_dim": dims.head_dim,
            "vocab": dims.vocab,
            "n_audio_ctx": dims.n_audio_ctx,
            "n_text_ctx": dims.n_text_ctx,
            "sample_rate": SAMPLE_RATE,
            "hop_length": HOP_LENGTH,
            "max_samples": MAX_SAMPLES,
            "max_new_tokens": MAX_NEW_TOKENS,
        },
        "special": special,
        "prompt": sot_sequence + [special["notimestamps"]],
        "suppress_ids": suppress,
        "suppress_ids_begin": list(config.get("suppress_ids_begin") or [special["eot"]]),
        "tokens": vocab,
    }


# ---------------------------------------------------------------------------------------------------------------
# Log-mel front end, computed in numpy at build time
# ---------------------------------------------------------------------------------------------------------------


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above (librosa's htk=False)."""
    hz = np.asarray(hz, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    logstep = math.log(6.4) / 27.0
    linear = hz / f_sp
    log = min_log_hz / f_sp + np.log(np.maximum(hz, min_log_hz) / min_log_hz) / logstep
    return np.where(hz >= min_log_hz, log, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    linear = f_sp * mel
    log = min_log_hz * np.exp(logstep * (mel - min_log_mel))
    return np.where(mel >= min_log_mel, log, linear)


def mel_filters(n_mels: int, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-normalised triangular mel filters [n_mels, n_fft // 2 + 1], as librosa.filters.mel(sr, n_fft, n_mels)."""
    fft_hz = np.fft.rfftfreq(n_fft, 1.0 / sr)
    edges = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(sr / 2)), n_mels + 2))
    widths = np.diff(edges)
    dist = edges[:, None] - fft_hz[None, :]
    rising = -dist[:-2] / widths[:-1, None]
    falling = dist[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per band
    return weights.astype(np.float32)


def dft_basis(n_fft: int = N_FFT) -> np.ndarray:
    """Conv1d weights [2 * (n_fft // 2 + 1), 1, n_fft]: periodic-Hann-windowed cosines then sines (the table that
    `dft_basis_node` computes in the graph; its test's reference)."""
    window = np.hanning(n_fft + 1)[:-1]
    n = np.arange(n_fft)
    k = np.arange(n_fft // 2 + 1)[:, None]
    angle = 2.0 * np.pi * k * n / n_fft
    basis = np.concatenate([np.cos(angle), -np.sin(angle)]) * window
    return basis[:, None, :].astype(np.float32)


def dft_basis_node(g: GraphBuilder, scope: str, n_fft: int = N_FFT) -> str:
    """`dft_basis()` computed in the graph from two ranges and the window (1.6 kB instead of its 643 kB table; the
    nodes have constant inputs only, so onnxruntime folds them once when the session is created). k·n is reduced
    mod n_fft in integers before the float angle, so every angle is below 2π and float32 loses nothing there."""
    window = g.weight(f"{scope}/hann_window", np.hanning(n_fft + 1)[:-1].astype(np.float32))
    n = g.op("Range", [g.const(0), g.const(n_fft), g.const(1)], name=f"{scope}/n")
    k = g.op("Unsqueeze", [g.op("Range", [g.const(0), g.const(n_fft // 2 + 1), g.const(1)], name=f"{scope}/k"),
                           g.const([1])], name=f"{scope}/k_column")
    turns = g.op("Mod", [g.op("Mul", [k, n], name=f"{scope}/kn"), g.const(n_fft)], name=f"{scope}/kn_mod")
    angle = g.op("Mul", [g.op("Cast", [turns], to=TensorProto.FLOAT, name=f"{scope}/kn_float"),
                         g.const(2.0 * math.pi / n_fft, np.float32)], name=f"{scope}/angle")
    cos = g.op("Cos", [angle], name=f"{scope}/cos")
    sin = g.op("Neg", [g.op("Sin", [angle], name=f"{scope}/sin")], name=f"{scope}/minus_sin")
    basis = g.op("Mul", [g.op("Concat", [cos, sin], axis=0, name=f"{scope}/cos_sin"), window], name=f"{scope}/windowed")
    return g.op("Unsqueeze", [basis, g.const([1])], name=f"{scope}/dft_basis")


# ---------------------------------------------------------------------------------------------------------------
# A minimal ONNX graph builder: deterministic names, so two builds serialise to the same bytes
# ---------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------
# Transformer building blocks
# ---------------------------------------------------------------------------------------------------------------


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _linear(
    g: GraphBuilder, x: str, model: CT2Model, scope: str, rows: slice = slice(None), scale: float = 1.0, tag: str = ""
) -> str:
    """x @ (scale * W[rows]).T + scale * b[rows].

    W is stored transposed so that quantize_dynamic sees a constant MatMul B input. `rows` and `tag` split
    CTranslate2's fused projections (q|k|v, k|v) into separate weights with distinct names.
    """
    prefix = f"{scope}/{tag}" if tag else scope
    w = _f32(model[f"{scope}/weight"])[rows] * scale
    y = g.op("MatMul", [x, g.weight(f"{prefix}/weight_t", w.T)], name=f"{prefix}/matmul")
    if f"{scope}/bias" in model:
        b = _f32(model[f"{scope}/bias"])[rows] * scale
        if np.any(b):  # Whisper's key projections have no bias: skip a useless Add.
            y = g.op("Add", [y, g.weight(f"{prefix}/bias", b)], name=f"{prefix}/add")
    return y


def _layer_norm(g: GraphBuilder, x: str, model: CT2Model, scope: str) -> str:
    gamma = g.weight(f"{scope}/gamma", _f32(model[f"{scope}/gamma"]))
    beta = g.weight(f"{scope}/beta", _f32(model[f"{scope}/beta"]))
    return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=LAYER_NORM_EPS, name=f"{scope}/ln")


def _gelu(g: GraphBuilder, x: str) -> str:
    """Exact (erf) GELU as Whisper uses; onnxruntime fuses this pattern into one Gelu kernel."""
    inner = g.op("Erf", [g.op("Mul", [x, g.const(1.0 / math.sqrt(2.0), np.float32)])])
    return g.op("Mul", [g.op("Mul", [x, g.const(0.5, np.float32)]), g.op("Add", [inner, g.const(1.0, np.float32)])])


def _split_heads(g: GraphBuilder, x: str, dims: WhisperDims) -> str:
    """[B, T, d_model] -> [B, heads, T, head_dim]."""
    x = g.op("Reshape", [x, g.const([0, 0, dims.heads, dims.head_dim])])
    return g.op("Transpose", [x], perm=[0, 2, 1, 3])


def _merge_heads(g: GraphBuilder, x: str, dims: WhisperDims) -> str:
    x = g.op("Transpose", [x], perm=[0, 2, 1, 3])
    return g.op("Reshape", [x, g.const([0, 0, dims.d_model])])


def _attend(g: GraphBuilder, q: str, k: str, v: str, scope: str, mask: str | None = None) -> str:
    """softmax(q k^T [+ mask]) v on [B, H, *, D] tensors; q is pre-scaled by 1/sqrt(D) in its weights."""
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])], name=f"{scope}/scores")
    if mask is not None:
        scores = g.op("Add", [scores, mask])
    probs = g.op("Softmax", [scores], axis=-1)
    return g.op("MatMul", [probs, v], name=f"{scope}/context")


def _self_attention_qkv(g: GraphBuilder, x: str, model: CT2Model, scope: str, dims: WhisperDims):
    """CTranslate2's fused q/k/v projection (rows q, k, v) as three MatMuls, q pre-scaled by 1/sqrt(head_dim)."""
    d = dims.d_model
    scope = f"{scope}/linear_0"
    q = _linear(g, x, model, scope, slice(0, d), 1.0 / math.sqrt(dims.head_dim), tag="q")
    k = _linear(g, x, model, scope, slice(d, 2 * d), tag="k")
    v = _linear(g, x, model, scope, slice(2 * d, 3 * d), tag="v")
    return _split_heads(g, q, dims), _split_heads(g, k, dims), _split_heads(g, v, dims)


def _ffn(g: GraphBuilder, x: str, model: CT2Model, scope: str) -> str:
    h = _layer_norm(g, x, model, f"{scope}/layer_norm")
    h = _gelu(g, _linear(g, h, model, f"{scope}/linear_0"))
    return g.op("Add", [x, _linear(g, h, model, f"{scope}/linear_1")])


# ---------------------------------------------------------------------------------------------------------------
# Encoder graph
# ---------------------------------------------------------------------------------------------------------------

FRONTEND_OUTPUT = "log_mel"


def _log_mel(g: GraphBuilder, samples: str, n_mels: int, gain_normalise: str | None = None,
             level_offset: str | None = None) -> str:
    """samples [1, N] -> log-mel [1, n_mels, N // 160], the exact recipe of faster-whisper's FeatureExtractor.

    With `gain_normalise` (a [1] input, 0 or 1) the log-mel is shifted by gain_normalise * (ENCODER_PEAK - its
    loudest frame) and then by `level_offset`, before the floor: at 1 the audio is read as if scaled so that its
    loudest frame is `ENCODER_PEAK`, whatever its gain, and every window's silent frames sit at the same floor
    (`ENCODER_PEAK - 8`), which is what lets one cached tail serve every utterance (`encoder_graph`). At 0 (and an
    offset of 0) every value is the recipe's, bit for bit (x + 0 is x)."""
    n_freq = N_FFT // 2 + 1
    x = g.op("Pad", [samples, g.const([0, 0, 0, HOP_LENGTH])], name="frontend/pad_zeros")
    x = g.op("Pad", [x, g.const([0, N_FFT // 2, 0, N_FFT // 2])], mode="reflect", name="frontend/pad_reflect")
    x = g.op("Unsqueeze", [x, g.const([1])], name="frontend/unsqueeze")
    spec = g.op("Conv", [x, dft_basis_node(g, "frontend")], strides=[HOP_LENGTH], name="frontend/stft")
    power = g.op("Mul", [spec, spec], name="frontend/square")
    re2 = g.op("Slice", [power, g.const([0]), g.const([n_freq]), g.const([1])], name="frontend/re2")
    im2 = g.op("Slice", [power, g.const([n_freq]), g.const([2 * n_freq]), g.const([1])], name="frontend/im2")
    # faster-whisper drops the last STFT frame before the mel projection.
    power = g.op("Slice", [g.op("Add", [re2, im2], name="frontend/power"), g.const([0]), g.const([-1]), g.const([2])],
                 name="frontend/drop_last")
    mel = g.op("MatMul", [g.weight("frontend/mel_filters", mel_filters(n_mels)), power], name="frontend/mel")
    log = g.op("Log", [g.op("Max", [mel, g.const(1e-10, np.float32)], name="frontend/clamp")], name="frontend/log")
    log10 = g.op("Mul", [log, g.const(1.0 / math.log(10.0), np.float32)], name="frontend/log10")
    top = g.op("ReduceMax", [log10], keepdims=1, name="frontend/max")
    if gain_normalise is not None:
        shift = g.op("Mul", [gain_normalise, g.op("Sub", [g.const(ENCODER_PEAK, np.float32), top])],
                     name="frontend/gain_shift")
        top = g.op("Add", [top, shift], name="frontend/normalised_max")
        log10 = g.op("Add", [g.op("Add", [log10, shift], name="frontend/gain"), level_offset],
                     name="frontend/level_offset")
    floor = g.op("Sub", [top, g.const(8.0, np.float32)], name="frontend/floor")
    norm = g.op("Max", [log10, floor], name="frontend/floored")
    norm = g.op("Mul", [g.op("Add", [norm, g.const(4.0, np.float32)], name="frontend/shift"),
                        g.const(0.25, np.float32)], name="frontend/scale")
    # Its extra frame (the zeros appended above) took part in the max; the encoder sees N // 160 frames.
    return g.op("Slice", [norm, g.const([0]), g.const([-1]), g.const([2])], name=FRONTEND_OUTPUT)


def _encoder_stem(g: GraphBuilder, mel: str, model: CT2Model) -> str:
    """Two GELU convolutions (the second halves the frame rate), then the sinusoid table sliced to length.

    The convolutions and the table stay float32 in the graph but are stored as the float16 they are in CTranslate2's
    model (`half_weight`): the same values in a file 2.2 MB smaller (~0.1 MB less once brotli'd, as served)."""
    x = mel
    for name, stride in (("conv1", 1), ("conv2", 2)):
        w = g.half_weight(f"encoder/{name}/weight", model[f"encoder/{name}/weight"])
        b = g.half_weight(f"encoder/{name}/bias", model[f"encoder/{name}/bias"])
        x = _gelu(g, g.op("Conv", [x, w, b], pads=[1, 1], strides=[stride], name=f"encoder/{name}"))
    x = g.op("Transpose", [x], perm=[0, 2, 1])
    frames = g.op("Shape", [x], start=1, end=2)
    pos = g.half_weight("encoder/position_encodings", model["encoder/position_encodings/encodings"])
    pos = g.op("Slice", [pos, g.const([0]), frames, g.const([0])], name="encoder/positions")
    return g.op("Add", [x, pos])


def _encoder_layer(g: GraphBuilder, x: str, model: CT2Model, scope: str, dims: WhisperDims,
                   tail: tuple[str, str]) -> tuple[str, str, str]:
    """One layer over the window's first positions `x`, whose queries attend to their own keys and values and then
    to `tail`'s (this layer's K and V of the positions after them, [1, heads, positions, head_dim]; none when the
    window is all in `x`). Returns the layer's output and its own K and V."""
    h = _layer_norm(g, x, model, f"{scope}/self_attention/layer_norm")
    q, k, v = _self_attention_qkv(g, h, model, f"{scope}/self_attention", dims)
    keys = g.op("Concat", [k, tail[0]], axis=2, name=f"{scope}/self_attention/keys")
    values = g.op("Concat", [v, tail[1]], axis=2, name=f"{scope}/self_attention/values")
    ctx = _merge_heads(g, _attend(g, q, keys, values, f"{scope}/self_attention"), dims)
    x = g.op("Add", [x, _linear(g, ctx, model, f"{scope}/self_attention/linear_1")])
    return _ffn(g, x, model, f"{scope}/ffn"), k, v


def _cross_kv(g: GraphBuilder, memory: str, model: CT2Model, dims: WhisperDims, names=("cross_k", "cross_v")
              ) -> tuple[str, str]:
    """Every decoder layer's cross-attention K and V of the encoder output, stacked on a new leading axis."""
    d = dims.d_model
    ks, vs = [], []
    for layer in range(dims.decoder_layers):
        scope = f"decoder/layer_{layer}/attention/linear_1"
        for tag, rows, out in (("k", slice(0, d), ks), ("v", slice(d, 2 * d), vs)):
            heads = _split_heads(g, _linear(g, memory, model, scope, rows, tag=tag), dims)
            out.append(g.op("Unsqueeze", [heads, g.const([0])]))
    return g.op("Concat", ks, axis=0, name=names[0]), g.op("Concat", vs, axis=0, name=names[1])


ENCODER_PEAK = 1.0
"""The loudest log-mel frame (log10 power) of gain-normalised audio (`_log_mel`): a level speech reaches anyway
(measured by scripts/encoder-tail-ab.py, whose `--peak` it is)."""
ENCODER_TAIL_INPUTS = ("tail_k", "tail_v", "tail_cross_k", "tail_cross_v")
FLOOR_ONLY = -1e4
"""`level_offset` that turns any window into its floor (the tail cache's run)."""
SAMPLES_PER_POSITION = 2 * HOP_LENGTH
"""Samples per encoder position (two log-mel frames; the second convolution halves the rate)."""
TAIL_MARGIN_POSITIONS = 100
"""Positions after the audio that a head computes (2 s, the page's `encoderTailMarginSecs`): the positions just after
speech attend to it most."""


def encoder_graph(model: CT2Model, dims: WhisperDims) -> onnx.ModelProto:
    """The float32 encoder: raw samples in, stacked cross-attention K/V out.

    Fed `samples` with `plain_encoder_feeds` it is Whisper's encoder over that window. Its other inputs let a
    window whose end is silence be computed only as far as the speech goes (the *head*): the
    positions after it (the *tail*) are read from a cache. With `gain_normalise` 1 (`_log_mel`) every window's
    silent frames have the same log-mel value, so one run over a window of nothing but that floor (`level_offset`
    -1e4 turns any samples into it) gives every layer's K and V of every tail position (outputs `self_k`,
    `self_v`) and the decoder's cross K/V of them (`cross_k`, `cross_v`); fed back as `tail_k`, `tail_v`,
    `tail_cross_k`, `tail_cross_v` with a head's samples, the positions from the head's length on are taken from
    them: the head's queries attend to its own keys and to the tail's, and the decoder attends to both. What the
    tail's own positions would have attended to in the head is what this leaves out (the head's speech does not
    reach them); scripts/encoder-tail-ab.py measured what that costs in WER."""
    g = GraphBuilder()
    x = _encoder_stem(g, _log_mel(g, "samples", dims.n_mels, "gain_normalise", "level_offset"), model)
    # the tail's positions: from the head's length to the end of the cached window
    head = g.op("Shape", [x], start=1, end=2, name="encoder/head_positions")
    after_head = {name: g.op("Slice", [name, head, g.const([2**62]), g.const([3])], name=f"encoder/{name}")
                  for name in ENCODER_TAIL_INPUTS}
    own_k, own_v = [], []
    for layer in range(dims.encoder_layers):
        tail = tuple(g.op("Gather", [after_head[name], g.const(layer)], axis=0, name=f"encoder/layer_{layer}/{name}")
                     for name in ("tail_k", "tail_v"))
        x, k, v = _encoder_layer(g, x, model, f"encoder/layer_{layer}", dims, tail)
        own_k.append(g.op("Unsqueeze", [k, g.const([0])]))
        own_v.append(g.op("Unsqueeze", [v, g.const([0])]))
    g.op("Concat", own_k, axis=0, name="self_k")
    g.op("Concat", own_v, axis=0, name="self_v")
    memory = _layer_norm(g, x, model, "encoder/layer_norm")
    head_k, head_v = _cross_kv(g, memory, model, dims, names=("head_cross_k", "head_cross_v"))
    g.op("Concat", [head_k, after_head["tail_cross_k"]], axis=3, name="cross_k")
    g.op("Concat", [head_v, after_head["tail_cross_v"]], axis=3, name="cross_v")
    kv_shape = [dims.decoder_layers, 1, dims.heads, "frames", dims.head_dim]
    self_shape = [dims.encoder_layers, 1, dims.heads, "head_frames", dims.head_dim]
    tail_shape = [dims.encoder_layers, 1, dims.heads, "tail_frames", dims.head_dim]
    tail_cross_shape = [dims.decoder_layers, 1, dims.heads, "tail_frames", dims.head_dim]
    return g.model(
        [helper.make_tensor_value_info("samples", TensorProto.FLOAT, [1, "n_samples"]),
         helper.make_tensor_value_info("gain_normalise", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("level_offset", TensorProto.FLOAT, [1]),
         *(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                         tail_shape if name in ("tail_k", "tail_v") else tail_cross_shape)
           for name in ENCODER_TAIL_INPUTS)],
        [*(helper.make_tensor_value_info(n, TensorProto.FLOAT, kv_shape) for n in ("cross_k", "cross_v")),
         *(helper.make_tensor_value_info(n, TensorProto.FLOAT, self_shape) for n in ("self_k", "self_v"))],
        "Whisper encoder with log-mel front end: 16 kHz samples [1, N<=480000] -> cross-attention K/V per layer "
        "(and, for a window's silent tail, a cache of it: see voxline.convert.whisper_onnx.encoder_graph)",
    )


# ---------------------------------------------------------------------------------------------------------------
# Decoder graph
# ---------------------------------------------------------------------------------------------------------------


def quantize_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: weight ~= q * scale[:, None]; an all-zero row keeps scale 1 to avoid 0/0."""
    amax = np.abs(weight).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def _scalar_dim(g: GraphBuilder, tensor: str, axis: int) -> str:
    """One dimension of a tensor's runtime shape as an int64 scalar."""
    return g.op("Squeeze", [g.op("Shape", [tensor], start=axis, end=axis + 1)])


def _embed_tokens(g: GraphBuilder, tokens: str, emb_q: str, emb_scale: str, model: CT2Model, past_len: str) -> str:
    """Dequantised token rows plus the learned positions P .. P+T-1."""
    rows = g.op("Gather", [emb_q, tokens], axis=1, name="decoder/embed_gather")  # [d, 1, T] int8
    rows = g.op("Transpose", [g.op("Cast", [rows], to=TensorProto.FLOAT)], perm=[1, 2, 0])
    scale = g.op("Unsqueeze", [g.op("Gather", [emb_scale, tokens], axis=0), g.const([2])])
    x = g.op("Mul", [rows, scale], name="decoder/embed")
    steps = g.op("Shape", [tokens], start=1, end=2)
    pos = g.half_weight("decoder/position_encodings", model["decoder/position_encodings/encodings"])
    start = g.op("Unsqueeze", [past_len, g.const([0])])
    pos = g.op("Slice", [pos, start, g.op("Add", [start, steps]), g.const([0])], name="decoder/positions")
    return g.op("Add", [x, pos])


def _causal_mask(g: GraphBuilder, past_len: str, steps: str) -> str:
    """[T, P+T] additive mask: query i (absolute position P+i) may not see keys after P+i."""
    total = g.op("Add", [past_len, steps])
    query_pos = g.op("Unsqueeze", [g.op("Range", [past_len, total, g.const(1)]), g.const([1])])
    key_pos = g.op("Range", [g.const(0), total, g.const(1)])
    future = g.op("Greater", [key_pos, query_pos])
    return g.op("Where", [future, g.const(MASK_VALUE, np.float32), g.const(0.0, np.float32)], name="decoder/mask")


def _decoder_layer(g: GraphBuilder, x: str, layer: int, model: CT2Model, dims: WhisperDims, mask: str, caches: dict):
    """One pre-norm decoder layer; appends this layer's full self-attention K/V to caches['k'], caches['v']."""
    scope = f"decoder/layer_{layer}"
    index = g.const(layer)
    h = _layer_norm(g, x, model, f"{scope}/self_attention/layer_norm")
    q, k, v = _self_attention_qkv(g, h, model, f"{scope}/self_attention", dims)
    k = g.op("Concat", [g.op("Gather", [caches["past_k"], index], axis=0), k], axis=2)
    v = g.op("Concat", [g.op("Gather", [caches["past_v"], index], axis=0), v], axis=2)
    caches["k"].append(g.op("Unsqueeze", [k, g.const([0])]))
    caches["v"].append(g.op("Unsqueeze", [v, g.const([0])]))
    ctx = _merge_heads(g, _attend(g, q, k, v, f"{scope}/self_attention", mask), dims)
    x = g.op("Add", [x, _linear(g, ctx, model, f"{scope}/self_attention/linear_1")])

    h = _layer_norm(g, x, model, f"{scope}/attention/layer_norm")
    q = _linear(g, h, model, f"{scope}/attention/linear_0", scale=1.0 / math.sqrt(dims.head_dim))
    q = _split_heads(g, q, dims)
    ck = g.op("Gather", ["cross_k", index], axis=0)
    cv = g.op("Gather", ["cross_v", index], axis=0)
    ctx = _merge_heads(g, _attend(g, q, ck, cv, f"{scope}/attention"), dims)
    x = g.op("Add", [x, _linear(g, ctx, model, f"{scope}/attention/linear_2")])
    return _ffn(g, x, model, f"{scope}/ffn")


def _tied_logits(g: GraphBuilder, h: str, emb_q: str, emb_scale: str) -> str:
    """h [n, d] @ embedding^T with the int8 table: dynamic uint8 activations (one scale over the n rows), int32
    accumulate, then rescale."""
    hq, h_scale, h_zero = g.op("DynamicQuantizeLinear", [h], n_out=3, name="decoder/logits_quant")
    acc = g.op("MatMulInteger", [hq, emb_q, h_zero], name="decoder/logits_matmul")
    logits = g.op("Mul", [g.op("Cast", [acc], to=TensorProto.FLOAT), h_scale])
    return g.op("Mul", [logits, emb_scale], name="logits")


def decoder_graph(model: CT2Model, dims: WhisperDims) -> onnx.ModelProto:
    """The float32 decoder (apart from the int8 tied embedding): one step or a whole prompt with a KV cache."""
    g = GraphBuilder()
    emb_rows, emb_scale = quantize_rows(_f32(model["decoder/embeddings/weight"]))
    emb_q = g.weight("decoder/embeddings/weight_int8_t", emb_rows.T)  # [d, vocab]: MatMulInteger's B layout
    emb_scale = g.weight("decoder/embeddings/row_scale", emb_scale)
    past_len = _scalar_dim(g, "past_k", 3)
    steps = _scalar_dim(g, "tokens", 1)
    x = _embed_tokens(g, "tokens", emb_q, emb_scale, model, past_len)
    mask = _causal_mask(g, past_len, steps)
    caches = {"past_k": "past_k", "past_v": "past_v", "k": [], "v": []}
    for layer in range(dims.decoder_layers):
        x = _decoder_layer(g, x, layer, model, dims, mask, caches)
    x = _layer_norm(g, x, model, "decoder/layer_norm")
    # Only the positions whose next token is wanted go through the output projection, the step's largest matmul.
    wanted = g.op("Slice", [x, "logits_from", g.const([2**62]), g.const([1])], name="decoder/logit_positions")
    _tied_logits(g, g.op("Squeeze", [wanted, g.const([0])]), emb_q, emb_scale)
    g.op("Concat", caches["k"], axis=0, name="new_k")
    g.op("Concat", caches["v"], axis=0, name="new_v")
    return g.model(_decoder_inputs(dims), _decoder_outputs(dims), "Whisper decoder step with self-attention KV cache")


def _decoder_inputs(dims: WhisperDims) -> list:
    kv = lambda length: [dims.decoder_layers, 1, dims.heads, length, dims.head_dim]  # noqa: E731
    return [
        helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "tokens"]),
        helper.make_tensor_value_info("past_k", TensorProto.FLOAT, kv("past")),
        helper.make_tensor_value_info("past_v", TensorProto.FLOAT, kv("past")),
        helper.make_tensor_value_info("cross_k", TensorProto.FLOAT, kv("frames")),
        helper.make_tensor_value_info("cross_v", TensorProto.FLOAT, kv("frames")),
        helper.make_tensor_value_info("logits_from", TensorProto.INT64, [1]),
    ]


def _decoder_outputs(dims: WhisperDims) -> list:
    kv = [dims.decoder_layers, 1, dims.heads, "total", dims.head_dim]
    return [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["positions", dims.vocab]),
        helper.make_tensor_value_info("new_k", TensorProto.FLOAT, kv),
        helper.make_tensor_value_info("new_v", TensorProto.FLOAT, kv),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Quantisation and the build entry point
# ---------------------------------------------------------------------------------------------------------------


def _weight_matmuls(model: onnx.ModelProto) -> list[str]:
    """MatMul nodes whose B is a float initializer: the only ones worth int8 (activation x activation stays fp32)."""
    floats = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in floats]


class _DropPreprocessHint(logging.Filter):
    """quantize_dynamic logs a generic 'run pre-processing' hint on the root logger; it does not apply here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def quantize(fp32: onnx.ModelProto, work: Path, out_path: Path) -> None:
    """Dynamic int8 (MatMulInteger + DynamicQuantizeLinear, which onnxruntime-web's wasm backend runs)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = work / (out_path.stem + ".fp32.onnx")
    onnx.save(fp32, src)
    hint_filter = _DropPreprocessHint()
    logging.getLogger().addFilter(hint_filter)
    try:
        quantize_dynamic(
            src,
            out_path,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=_weight_matmuls(fp32),
            weight_type=QuantType.QInt8,
            per_channel=False,
        )
    finally:
        logging.getLogger().removeFilter(hint_filter)


def build(src_dir: Path, out_dir: Path, log: Log = print) -> list[Path]:
    """Convert the CTranslate2 Whisper folder `src_dir` into `out_dir`; returns the written files."""
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    t0 = time.perf_counter()
    log(f"reading {src_dir / 'model.bin'}")
    model = read_ct2_model(src_dir / "model.bin")
    dims = read_dims(model)
    log(f"whisper: {dims}")
    config = json.loads((src_dir / "config.json").read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="voxline-whisper-") as tmp:
        for file_name, make in ((ENCODER_FILE, encoder_graph), (DECODER_FILE, decoder_graph)):
            log(f"building and quantising {file_name}")
            quantize(make(model, dims), Path(tmp), out_dir / file_name)
            written.append(out_dir / file_name)
            log(f"{file_name}: {written[-1].stat().st_size / 1e6:.1f} MB ({time.perf_counter() - t0:.1f} s)")
    table = tokens_table(src_dir, dims, config)
    tokens_path = out_dir / TOKENS_FILE
    tokens_path.write_text(json.dumps(table, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    written.append(tokens_path)
    log(f"done in {time.perf_counter() - t0:.1f} s")
    return written


def extract_frontend(encoder_path: Path) -> onnx.ModelProto:
    """The `samples, gain_normalise, level_offset -> log_mel` part of a built encoder, as a model of its own (to
    check it against numpy)."""
    model = onnx.load(str(encoder_path))
    return onnx.utils.Extractor(model).extract_model(["samples", "gain_normalise", "level_offset"],
                                                     [FRONTEND_OUTPUT])


def plain_encoder_feeds(samples: np.ndarray, encoder_layers: int, decoder_layers: int, heads: int, head_dim: int
                        ) -> dict[str, np.ndarray]:
    """The encoder's inputs for Whisper's own encoder over the window `samples` [1, N]: no gain normalisation, no
    cached tail (`encoder_graph`)."""
    return {"samples": samples, "gain_normalise": np.zeros([1], np.float32),
            "level_offset": np.zeros([1], np.float32),
            **{name: np.zeros([encoder_layers if name in ("tail_k", "tail_v") else decoder_layers, 1, heads, 0,
                               head_dim], np.float32) for name in ENCODER_TAIL_INPUTS}}


# ---------------------------------------------------------------------------------------------------------------
# Reference runtime
# ---------------------------------------------------------------------------------------------------------------


def gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable character map used by the byte-level BPE token strings."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            # Bytes without a visible glyph are shifted past 255, in byte order.
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class OnnxWhisper:
    """Greedy Whisper decoding over the built ONNX files, mirroring faster-whisper's settings
    (beam_size=1, temperature 0, without_timestamps, suppress_tokens=[-1], suppress_blank)."""

    def __init__(self, model_dir: Path, threads: int = 2):
        import onnxruntime as ort

        model_dir = Path(model_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(str(model_dir / ENCODER_FILE), options, providers=providers)
        self.decoder = ort.InferenceSession(str(model_dir / DECODER_FILE), options, providers=providers)
        self.table = json.loads((model_dir / TOKENS_FILE).read_text(encoding="utf-8"))
        self._byte_decoder = gpt2_byte_decoder()
        vocab = self.table["dims"]["vocab"]
        self._suppress = np.zeros(vocab, dtype=bool)
        self._suppress[self.table["suppress_ids"]] = True
        self._suppress_begin = self._suppress.copy()
        self._suppress_begin[self.table["suppress_ids_begin"]] = True

    def encode(self, samples: np.ndarray, window_s: float = 30.0, tail: dict[str, np.ndarray] | None = None,
               margin_positions: int = TAIL_MARGIN_POSITIONS) -> tuple[np.ndarray, np.ndarray]:
        """Zero-pad `samples` to the window and run the encoder; returns (cross_k, cross_v). With `tail` (from
        `tail_cache` of the same window) only the audio and `margin_positions` more go through the encoder, the
        rest of the window is read from the cache, and the audio is gain-normalised (`encoder_graph`)."""
        window = int(round(window_s * SAMPLE_RATE))
        if not 0 < window <= MAX_SAMPLES:
            raise ValueError(f"window_s must be in (0, 30], got {window_s}")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if samples.size > window:
            raise ValueError(f"{samples.size / SAMPLE_RATE:.2f} s of audio does not fit a {window_s} s window")
        if tail is not None:
            positions = tail["tail_k"].shape[3]
            if positions * SAMPLES_PER_POSITION != window:
                raise ValueError(f"the tail cache is of a {positions * SAMPLES_PER_POSITION / SAMPLE_RATE} s window")
            window = min(window, (-(-samples.size // SAMPLES_PER_POSITION) + margin_positions) * SAMPLES_PER_POSITION)
        padded = np.zeros((1, window), dtype=np.float32)
        padded[0, : samples.size] = samples
        dims = self.table["dims"]
        feeds = plain_encoder_feeds(padded, dims["encoder_layers"], dims["layers"], dims["heads"], dims["head_dim"])
        if tail is not None:
            feeds |= tail | {"gain_normalise": np.ones([1], np.float32)}
        return tuple(self.encoder.run(["cross_k", "cross_v"], feeds))

    def tail_cache(self, window_s: float) -> dict[str, np.ndarray]:
        """The cached tail of a `window_s` window (`encoder_graph`): one run over a window of nothing but the
        gain-normalised floor."""
        dims = self.table["dims"]
        feeds = plain_encoder_feeds(np.zeros((1, int(round(window_s * SAMPLE_RATE))), np.float32),
                                    dims["encoder_layers"], dims["layers"], dims["heads"], dims["head_dim"])
        feeds |= {"gain_normalise": np.ones([1], np.float32), "level_offset": np.full([1], FLOOR_ONLY, np.float32)}
        cross_k, cross_v, self_k, self_v = self.encoder.run(["cross_k", "cross_v", "self_k", "self_v"], feeds)
        return {"tail_k": self_k, "tail_v": self_v, "tail_cross_k": cross_k, "tail_cross_v": cross_v}

    def generate(self, cross_k: np.ndarray, cross_v: np.ndarray, max_new_tokens: int = MAX_NEW_TOKENS):
        """Greedy decoding; returns (text token ids without eot, log-probability of each of them)."""
        eot = self.table["special"]["eot"]
        past_k, past_v = self._empty_past(), self._empty_past()
        tokens = self.table["prompt"]
        ids: list[int] = []
        logprobs: list[float] = []
        for step in range(max_new_tokens):
            scores, past_k, past_v = self._step(tokens, past_k, past_v, cross_k, cross_v, first=step == 0)
            best = int(np.argmax(scores))
            if best == eot:
                break
            ids.append(best)
            logprobs.append(float(scores[best]))
            tokens = [best]
        return ids, logprobs

    def score(self, cross_k: np.ndarray, cross_v: np.ndarray, ids: Sequence[int]) -> float:
        """Log-probability of the text tokens `ids` and then end of text, fed to the decoder one by one after the
        usual prompt (teacher forcing), with greedy decoding's suppression."""
        past_k, past_v = self._empty_past(), self._empty_past()
        tokens = self.table["prompt"]
        total = 0.0
        for step, target in enumerate([*ids, self.table["special"]["eot"]]):
            scores, past_k, past_v = self._step(tokens, past_k, past_v, cross_k, cross_v, first=step == 0)
            total += float(scores[target])
            tokens = [target]
        return total

    def _empty_past(self) -> np.ndarray:
        """A self-attention cache of length 0: the first step's past."""
        dims = self.table["dims"]
        return np.zeros((dims["layers"], 1, dims["heads"], 0, dims["head_dim"]), dtype=np.float32)

    def _step(self, tokens: Sequence[int], past_k, past_v, cross_k, cross_v, first: bool):
        """Feed `tokens` to the decoder; returns the next token's log-probabilities (suppression applied; at the
        `first` step the tokens never first too) and the grown cache."""
        logits, past_k, past_v = self.decoder.run(None, {
            "tokens": np.asarray([tokens], dtype=np.int64), "past_k": past_k, "past_v": past_v,
            "cross_k": cross_k, "cross_v": cross_v, "logits_from": LAST_POSITION})
        return self._log_softmax(logits[-1], self._suppress_begin if first else self._suppress), past_k, past_v

    @staticmethod
    def _log_softmax(logits: np.ndarray, suppressed: np.ndarray) -> np.ndarray:
        logits = np.where(suppressed, -np.inf, logits.astype(np.float64))
        top = logits.max()
        return logits - top - math.log(np.exp(logits - top).sum())

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> text through the byte decoder, as faster-whisper does (specials dropped, then strip)."""
        eot = self.table["special"]["eot"]
        table = self.table["tokens"]
        data = bytes(self._byte_decoder[c] for i in ids if i < eot for c in table[i])
        return data.decode("utf-8", errors="replace").strip()

    def transcribe(self, samples: np.ndarray, window_s: float = 30.0) -> tuple[str, list[float]]:
        """Transcribe one utterance (<= window_s seconds); returns (text, log-probability per text token)."""
        ids, logprobs = self.generate(*self.encode(samples, window_s))
        return self.decode(ids), logprobs
