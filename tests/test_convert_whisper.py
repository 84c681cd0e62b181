"""The CTranslate2 -> ONNX Whisper conversion: reader robustness, front end, decoder cache, and transcript parity.

Parity is checked against faster-whisper on the same weights and the same audio (espeak-ng speech zero-padded to
the 30 s window, so both sides see identical samples). espeak-ng is a synthetic stand-in for real speakers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from voxline.bench.wer import normalise
from voxline.convert import whisper_onnx
from voxline.convert.ct2_reader import CT2FormatError, read_ct2_model
from voxline.models import supply
from voxline.models.manifest import load_manifest

SR = whisper_onnx.SAMPLE_RATE
PHRASES = (
    "pause the music",
    "turn the volume down",
    "set a timer for ten minutes",
    "open the front door",
    "call my sister",
    "what is the weather like in Paris today",
)


# --- fixtures -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_dir(model_dir) -> Path:
    return model_dir("whisper-tiny-en-onnx")


@pytest.fixture(scope="module")
def ct2_dir(model_dir) -> Path:
    return model_dir("whisper-tiny-en-ct2")


@pytest.fixture(scope="module")
def onnx_model(onnx_dir):
    return whisper_onnx.OnnxWhisper(onnx_dir, threads=2)


def _read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (SR, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def _speak(text: str, folder: Path, index: int) -> np.ndarray:
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is required to synthesise test speech (apt-get install {tool})")
    raw, out = folder / f"raw{index}.wav", folder / f"clip{index}.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True, capture_output=True)
    subprocess.run(["sox", str(raw), "-r", str(SR), "-c", "1", "-b", "16", str(out)], check=True, capture_output=True)
    return _read_wav(out)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, np.ndarray]:
    folder = tmp_path_factory.mktemp("speech")
    return {text: _speak(text, folder, i) for i, text in enumerate(PHRASES)}


def _pad(samples: np.ndarray, seconds: float) -> np.ndarray:
    out = np.zeros(int(seconds * SR), dtype=np.float32)
    out[: samples.size] = samples
    return out


# --- CTranslate2 reader -------------------------------------------------------------------------------------------


def _ct2_bytes(variables: dict[str, np.ndarray], aliases: dict[str, str], version: int = 6) -> bytes:
    """A tiny model.bin in CTranslate2's layout, to exercise the reader without the real 75 MB file."""

    def text(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    dtype_ids = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4}
    out = struct.pack("<I", version) + text("WhisperSpec") + struct.pack("<I", 3)
    out += struct.pack("<I", len(variables))
    for name, value in variables.items():
        out += text(name) + struct.pack("<B", value.ndim) + b"".join(struct.pack("<I", d) for d in value.shape)
        out += struct.pack("<B", dtype_ids[value.dtype.name]) + struct.pack("<I", value.nbytes) + value.tobytes()
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases.items():
        out += text(alias) + text(target)
    return out


def test_reader_round_trip_and_aliases(tmp_path):
    weight = np.arange(12, dtype=np.float16).reshape(3, 4)
    heads = np.array(6, dtype=np.int16)
    path = tmp_path / "model.bin"
    path.write_bytes(_ct2_bytes({"a/weight": weight, "a/num_heads": heads}, {"b/weight": "a/weight"}))
    model = read_ct2_model(path)
    assert (model.spec_name, model.spec_revision, model.binary_version) == ("WhisperSpec", 3, 6)
    np.testing.assert_array_equal(model["a/weight"], weight)
    assert model["b/weight"] is model["a/weight"]
    assert model.scalar("a/num_heads") == 6


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: struct.pack("<I", 7) + b[4:], "binary version 7"),
        (lambda b: b + b"\0\0", "trailing bytes"),
        (lambda b: b[:4] + b"\xff\xff" + b[6:], "truncated"),
    ],
    ids=["truncated", "wrong-version", "trailing-garbage", "bad-string-length"],
)
def test_reader_refuses_corrupted_file(tmp_path, damage, message):
    good = _ct2_bytes({"w": np.ones((2, 2), np.float32)}, {"v": "w"})
    path = tmp_path / "model.bin"
    path.write_bytes(damage(good))
    with pytest.raises(CT2FormatError, match=message):
        read_ct2_model(path)


def test_build_refuses_corrupted_model_bin(ct2_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(ct2_dir / name, src / name)
    with open(ct2_dir / "model.bin", "rb") as f:
        (src / "model.bin").write_bytes(f.read(1_000_000))  # a cut-off download
    with pytest.raises(CT2FormatError, match="truncated or corrupted"):
        whisper_onnx.build(src, tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out" / whisper_onnx.ENCODER_FILE).exists()


def test_reader_reads_the_real_checkpoint(ct2_dir):
    model = read_ct2_model(ct2_dir / "model.bin")
    dims = whisper_onnx.read_dims(model)
    assert (dims.d_model, dims.heads, dims.encoder_layers, dims.decoder_layers) == (384, 6, 4, 4)
    assert (dims.n_mels, dims.vocab, dims.n_audio_ctx, dims.n_text_ctx) == (80, 51864, 1500, 448)
    assert model["decoder/projection/weight"] is model["decoder/embeddings/weight"]  # tied, stored once


# --- build outputs ------------------------------------------------------------------------------------------------


def test_build_is_deterministic(ct2_dir, onnx_dir, tmp_path):  # ct2_dir: the source, built into the cache
    def digests(folder: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}

    # As `voxline models fetch` builds it: the converter, then onnxruntime's optimizer (convert/optimize.py).
    manifest = load_manifest()
    spec = manifest.model("whisper-tiny-en-onnx")
    assert spec.graph_optimization == "extended"
    (tmp_path / "again").mkdir()
    supply.build_files(manifest, spec, tmp_path / "again", log=lambda _: None)
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(
        [whisper_onnx.ENCODER_FILE, whisper_onnx.DECODER_FILE, whisper_onnx.TOKENS_FILE]
    )
    assert digests(tmp_path / "again") == digests(onnx_dir)


def test_graph_signatures(onnx_dir):
    import onnx

    def signature(name: str) -> dict[str, list]:
        graph = onnx.load(str(onnx_dir / name), load_external_data=False).graph
        return {
            v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
            for v in list(graph.input) + list(graph.output)
        }

    assert signature(whisper_onnx.ENCODER_FILE) == {
        "samples": [1, "n_samples"],
        "gain_normalise": [1],
        "level_offset": [1],
        **{name: [4, 1, 6, "tail_frames", 64] for name in whisper_onnx.ENCODER_TAIL_INPUTS},
        "cross_k": [4, 1, 6, "frames", 64],
        "cross_v": [4, 1, 6, "frames", 64],
        "self_k": [4, 1, 6, "head_frames", 64],
        "self_v": [4, 1, 6, "head_frames", 64],
    }
    dec = signature(whisper_onnx.DECODER_FILE)
    assert dec["tokens"] == [1, "tokens"] and dec["logits"] == ["positions", 51864] and dec["logits_from"] == [1]
    assert dec["past_k"] == dec["past_v"] == [4, 1, 6, "past", 64]
    assert dec["new_k"] == dec["new_v"] == [4, 1, 6, "total", 64]
    assert 9e6 < (onnx_dir / whisper_onnx.ENCODER_FILE).stat().st_size < 12e6  # float16 stem, computed DFT basis
    assert 25e6 < (onnx_dir / whisper_onnx.DECODER_FILE).stat().st_size < 32e6


def test_the_dft_basis_computed_in_the_graph_is_the_table():
    """The front end builds its STFT basis from ranges (1.6 kB stored) instead of storing the 643 kB table."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from voxline.convert.onnx_graph import GraphBuilder

    g = GraphBuilder()
    out = g.op("Identity", [whisper_onnx.dft_basis_node(g, "probe")], name="basis")
    model = g.model([], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [402, 1, 400])], "dft basis")
    (basis,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    table = whisper_onnx.dft_basis()
    assert basis.shape == table.shape == (2 * (whisper_onnx.N_FFT // 2 + 1), 1, whisper_onnx.N_FFT)
    assert np.abs(basis - table).max() < 2e-6
    assert sum(t.ByteSize() for t in model.graph.initializer) < 4_000


def test_half_weights_keep_their_values_and_refuse_what_float16_cannot_hold():
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from voxline.convert.onnx_graph import GraphBuilder

    exact = np.array([[0.5, -1.25, 3.0e-3], [65504.0, 0.0, -2.0]], dtype=np.float16).astype(np.float32)
    g = GraphBuilder()
    out = g.op("Identity", [g.half_weight("w", exact)], name="out")
    model = g.model([], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])], "half weight")
    assert [t.data_type for t in model.graph.initializer] == [TensorProto.FLOAT16]
    (value,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    assert value.dtype == np.float32 and np.array_equal(value, exact)
    with pytest.raises(ValueError, match="not exactly representable"):
        GraphBuilder().half_weight("w", np.array([0.1], dtype=np.float32))


def test_tokens_json_matches_faster_whisper(onnx_dir, ct2_dir):
    import tokenizers
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    table = json.loads((onnx_dir / whisper_onnx.TOKENS_FILE).read_text(encoding="utf-8"))
    hf = tokenizers.Tokenizer.from_file(str(ct2_dir / "tokenizer.json"))
    fw = Tokenizer(hf, multilingual=False)
    assert table["prompt"] == fw.sot_sequence + [fw.no_timestamps] == [50257, 50362]
    assert table["suppress_ids"] == list(get_suppressed_tokens(fw, [-1]))
    assert table["suppress_ids_begin"] == [220, fw.eot]
    special = table["special"]
    assert (special["eot"], special["sot"], special["startofprev"]) == (fw.eot, fw.sot, fw.sot_prev)
    assert (special["no_speech"], special["timestamp_begin"]) == (fw.no_speech, fw.timestamp_begin)
    assert len(table["tokens"]) == table["dims"]["vocab"] == 51864
    for token, index in hf.get_vocab(with_added_tokens=True).items():
        assert table["tokens"][index] == token


# --- front end ----------------------------------------------------------------------------------------------------


def test_front_end_matches_faster_whisper(onnx_dir, clips):
    import onnxruntime as ort
    from faster_whisper.feature_extractor import FeatureExtractor

    frontend = whisper_onnx.extract_frontend(onnx_dir / whisper_onnx.ENCODER_FILE)
    session = ort.InferenceSession(frontend.SerializeToString())
    extractor = FeatureExtractor()
    noise = np.random.default_rng(0).normal(0, 0.1, 54_321).astype(np.float32)  # not a multiple of the hop
    inputs = [_pad(clips[PHRASES[0]], 30.0), _pad(clips[PHRASES[-1]], 8.0), noise]
    zero = np.zeros([1], np.float32)
    for samples in inputs:
        (got,) = session.run(None, {"samples": samples[None], "gain_normalise": zero, "level_offset": zero})
        # faster-whisper keeps the first N // 160 frames when it trims a window's features for the encoder.
        want = extractor(samples)[:, : samples.size // whisper_onnx.HOP_LENGTH]
        assert got.shape == (1, *want.shape)
        assert np.abs(got[0] - want).max() < 1e-4


# --- decoder ------------------------------------------------------------------------------------------------------


def test_prompt_step_equals_token_by_token(ct2_dir, onnx_model, clips):
    """The causal mask and position offset: one T=4 call gives the same logits and cache as four T=1 calls, the
    last position's alone (`logits_from` -1) or those from a position on (what checking drafted tokens needs).

    Checked on the float32 decoder graph: in the int8 one, dynamic quantisation takes one scale over all T rows,
    which legitimately moves a T=4 call away from four T=1 calls.
    """
    import onnxruntime as ort

    model = read_ct2_model(ct2_dir / "model.bin")
    graph = whisper_onnx.decoder_graph(model, whisper_onnx.read_dims(model))
    decoder = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    cross_k, cross_v = onnx_model.encode(clips[PHRASES[1]], window_s=8.0)
    dims = onnx_model.table["dims"]
    empty = np.zeros((dims["layers"], 1, dims["heads"], 0, dims["head_dim"]), dtype=np.float32)
    tokens = [50257, 50362, 8477, 262]
    feeds = {"cross_k": cross_k, "cross_v": cross_v}

    last = {"logits_from": whisper_onnx.LAST_POSITION}
    whole = decoder.run(None, {"tokens": np.array([tokens]), "past_k": empty, "past_v": empty, **feeds, **last})
    # Every position's but the first (start of transcript: a decode never asks for that row, whisper.js).
    every = decoder.run(None, {"tokens": np.array([tokens]), "past_k": empty, "past_v": empty, **feeds,
                               "logits_from": np.array([1], dtype=np.int64)})[0]
    past_k, past_v = empty, empty
    steps = []
    for token in tokens:
        logits, past_k, past_v = decoder.run(
            None, {"tokens": np.array([[token]]), "past_k": past_k, "past_v": past_v, **feeds, **last}
        )
        steps.append(logits[0])
    assert whole[0].shape == (1, 51864) and every.shape == (3, 51864)
    # The rows share one int8 scale for the tied projection's input (DynamicQuantizeLinear is per tensor), set by
    # the largest of them: a row's logits move by up to a few tenths (seen: 0.25), not its choice. The cache
    # checks below are exact.
    np.testing.assert_allclose(every, np.stack(steps[1:]), atol=0.5)
    assert [int(row.argmax()) for row in every] == [int(row.argmax()) for row in steps[1:]]
    assert whole[1].shape == (4, 1, 6, 4, 64)
    np.testing.assert_allclose(whole[1], past_k, atol=1e-4)
    np.testing.assert_allclose(whole[2], past_v, atol=1e-4)
    # The logits go through the int8 tied embedding, whose input (the last hidden state) is quantised dynamically:
    # float sums that differ in their last bits between a T=4 and a T=1 call (and between thread layouts under
    # load) may round one element of it to the next int8 step, which moves logits by ~0.01-0.02 (seen: 0.017, in
    # 1 of 3 runs). A wrong mask or position offset moves them by far more, and changes the cache above.
    np.testing.assert_allclose(whole[0], logits, atol=0.05)
    assert int(whole[0].argmax()) == int(logits.argmax())


# --- transcripts --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faster_whisper_model(ct2_dir):
    from faster_whisper import WhisperModel

    return WhisperModel(str(ct2_dir), device="cpu", compute_type="int8", cpu_threads=2)


def _faster_whisper_text(model, samples: np.ndarray) -> str:
    segments, _ = model.transcribe(
        samples,
        beam_size=1,
        temperature=0.0,
        without_timestamps=True,
        condition_on_previous_text=False,
        vad_filter=False,
    )
    return "".join(s.text for s in segments).strip()


def test_transcripts_match_faster_whisper(onnx_model, faster_whisper_model, ct2_dir, clips):
    """Same weights, same greedy settings: the same text as faster-whisper in int8 or, where int8 rounding tips a
    borderline token (seen: "set a timer" → "Santa"/"Center"), as faster-whisper in float32."""
    from faster_whisper import WhisperModel

    float_model = None
    mismatches = []
    for text, samples in clips.items():
        ours, logprobs = onnx_model.transcribe(samples, window_s=30.0)
        assert ours, f"empty transcript for {text!r}"
        assert len(logprobs) > 0 and all(lp <= 0.0 for lp in logprobs)
        theirs = {_faster_whisper_text(faster_whisper_model, _pad(samples, 30.0))}
        if ours not in theirs:
            float_model = float_model or WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=2)
            theirs.add(_faster_whisper_text(float_model, _pad(samples, 30.0)))
        if ours not in theirs:
            mismatches.append((text, ours, sorted(theirs)))
    # int8 kernels differ by CPU (and by thread timing), and a borderline token tips three ways ("Since October" /
    # "Center timer" / "Santa timer" on an AMD EPYC); greedy decoding then goes its own way after it. So a phrase may
    # part from faster-whisper only at a token our own model found nearly tied with another, and only one phrase.
    assert len(mismatches) <= 1, f"ONNX vs faster-whisper int8/float32 (phrase, ours, theirs): {mismatches}"
    for text, ours, theirs in mismatches:
        margin = _margin_where_greedy_parts(onnx_model, clips[text], theirs)
        assert margin < NEAR_TIE_NATS, (f"{text!r}: ours {ours!r} parts from {theirs} at a token it preferred by "
                                        f"{margin:.2f} nats: not a rounding tip")


NEAR_TIE_NATS = 1.0
"""A token our model prefers to the runner-up by less than this can tip on int8 rounding (int8 vs float32 moves
whisper-tiny's log-probabilities by a few tenths)."""


def _margin_where_greedy_parts(model, samples: np.ndarray, theirs: list[str], window_s: float = 30.0) -> float:
    """Our greedy decode again, step by step: at the first token after which our text is no longer the start of any
    of `theirs` (normalised), how much its score exceeded the runner-up's (nats)."""
    cross_k, cross_v = model.encode(samples, window_s)
    dims, eot = model.table["dims"], model.table["special"]["eot"]
    past = np.zeros((dims["layers"], 1, dims["heads"], 0, dims["head_dim"]), dtype=np.float32)
    past_k, past_v, tokens, ids = past, past, np.asarray([model.table["prompt"]], dtype=np.int64), []
    words = lambda text: " ".join(normalise(text))  # noqa: E731
    targets = [words(t) for t in theirs]
    for step in range(whisper_onnx.MAX_NEW_TOKENS):
        logits, past_k, past_v = model.decoder.run(
            None, {"tokens": tokens, "past_k": past_k, "past_v": past_v, "cross_k": cross_k, "cross_v": cross_v,
                   "logits_from": whisper_onnx.LAST_POSITION})
        scores = model._log_softmax(logits[-1], model._suppress_begin if step == 0 else model._suppress)
        runner_up, best = np.argsort(scores)[-2:]
        ids.append(int(best))
        said = words(model.decode(ids))
        if best == eot and said in targets:
            return 0.0  # the same words: case and punctuation apart
        if best == eot or not any(t.startswith(said) for t in targets):
            return float(scores[best] - scores[runner_up])
        tokens = np.asarray([[best]], dtype=np.int64)
    return 0.0


REPEAT_NGRAM = 3
"""web/voxline/whisper.js `REPEAT_NGRAM`: the page stops a decode whose last token 3-gram came before."""


def _as_the_page_stops(ids: list[int], n: int = REPEAT_NGRAM) -> list[int]:
    """`ids` cut where the page's repeat guard (whisper.js `repeatStart`) stops the decode: at the first token whose
    trailing n-gram repeats an earlier one, less that restarted n-gram."""
    for end in range(2 * n, len(ids) + 1):
        tail = ids[end - n:end]
        if any(ids[i:i + n] == tail for i in range(end - 2 * n + 1)):
            return ids[:end - n]
    return ids


def test_the_repeat_cut_is_the_page_s():
    assert _as_the_page_stops([1, 2, 3, 4, 1, 2, 3, 4, 1]) == [1, 2, 3, 4]
    assert _as_the_page_stops([1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]
    assert _as_the_page_stops([7, 7, 7, 7, 7, 7]) == [7, 7, 7]


def test_short_window_transcribes_commands(onnx_model, clips):
    """8 s windows are the speed path for commands; the words must survive it (case and punctuation aside), as the
    page decodes: greedy, stopped by its repeat guard. On int8 and this CPU the end-of-text after "open the front
    door" is sometimes nearly tied, and plain greedy decoding then says the command over and over (a CI run); and
    in another CI run "pause" came out as "pass" (the same machine and build; both int8 kernels' and thread timing's
    rounding, as in the parity test above). So one command may part from its words, and only at a token our model
    found nearly tied with the right one."""

    def words(s: str) -> list[str]:
        return "".join(c for c in s.lower() if c.isalnum() or c == " ").split()

    parted = []
    for text in ("pause the music", "turn the volume down", "open the front door"):
        ids, _ = onnx_model.generate(*onnx_model.encode(clips[text], window_s=8.0))
        said = onnx_model.decode(_as_the_page_stops(ids))
        if words(said) != text.split():
            parted.append((text, said, _margin_where_greedy_parts(onnx_model, clips[text], [text], window_s=8.0)))
    assert len(parted) <= 1, f"commands that lost their words in the 8 s window (text, heard, margin): {parted}"
    for text, said, margin in parted:
        assert margin < NEAR_TIE_NATS, f"{text!r} heard as {said!r} at a token preferred by {margin:.2f} nats"


def test_rejects_audio_longer_than_the_window(onnx_model):
    with pytest.raises(ValueError, match="does not fit"):
        onnx_model.transcribe(np.zeros(9 * SR, dtype=np.float32), window_s=8.0)


# --- the encoder's silent tail ------------------------------------------------------------------------------------


def test_gain_normalised_front_end_is_the_same_features_shifted(onnx_dir, clips):
    """Gain normalisation reads the audio as if scaled so that its loudest frame is ENCODER_PEAK: the same log-mel,
    shifted, and the floor at ENCODER_PEAK - 8 whatever the gain; `level_offset` FLOOR_ONLY makes any window its
    floor (the tail cache's run)."""
    import onnxruntime as ort

    session = ort.InferenceSession(whisper_onnx.extract_frontend(onnx_dir / whisper_onnx.ENCODER_FILE)
                                   .SerializeToString())
    zero, one = np.zeros([1], np.float32), np.ones([1], np.float32)
    samples = _pad(clips[PHRASES[-1]], 8.0)[None]

    def features(audio, gain, offset=zero):
        return session.run(None, {"samples": audio, "gain_normalise": gain, "level_offset": offset})[0]

    plain, normalised = features(samples, zero), features(samples, one)
    floor = (whisper_onnx.ENCODER_PEAK - 8.0 + 4.0) / 4.0
    assert np.isclose(normalised.max(), (whisper_onnx.ENCODER_PEAK + 4.0) / 4.0, atol=1e-5)
    assert np.isclose(normalised.min(), floor, atol=1e-5)
    assert np.allclose(normalised - normalised.max(), plain - plain.max(), atol=1e-4)
    assert np.allclose(features(samples * 0.1, one), normalised, atol=2e-3)  # 20 dB quieter: the same features
    assert np.allclose(features(samples, one, np.full([1], whisper_onnx.FLOOR_ONLY, np.float32)), floor)


def test_a_head_whose_window_is_all_head_is_the_whole_window(onnx_model, clips):
    """The cached tail is read only from the head's length on: a head as long as the window reads none of it and
    is the gain-normalised encoder over the whole window."""
    tail = onnx_model.tail_cache(8.0)
    assert tail["tail_k"].shape == (4, 1, 6, 400, 64) and tail["tail_cross_k"].shape == (4, 1, 6, 400, 64)
    audio = clips[PHRASES[-1]]
    whole = onnx_model.encode(audio, 8.0, tail=tail, margin_positions=400)
    dims = onnx_model.table["dims"]
    feeds = whisper_onnx.plain_encoder_feeds(_pad(audio, 8.0)[None], 4, 4, dims["heads"], dims["head_dim"])
    feeds["gain_normalise"] = np.ones([1], np.float32)
    want = onnx_model.encoder.run(["cross_k", "cross_v"], feeds)
    for got, expected in zip(whole, want):
        assert got.shape == expected.shape == (4, 1, 6, 400, 64)
        assert np.array_equal(got, expected)


def test_commands_survive_the_cached_tail(onnx_model, clips):
    """With the head computed and the tail cached, commands in the 8 s window keep their words, as in the whole
    window (`test_short_window_transcribes_commands`; the same allowance of one near tie)."""
    tail = onnx_model.tail_cache(8.0)

    def words(s: str) -> list[str]:
        return "".join(c for c in s.lower() if c.isalnum() or c == " ").split()

    parted = []
    for text in ("pause the music", "turn the volume down", "open the front door"):
        cross_k, cross_v = onnx_model.encode(clips[text], window_s=8.0, tail=tail)
        assert cross_k.shape[3] == 400  # the decoder still attends to the whole window
        said = onnx_model.decode(_as_the_page_stops(onnx_model.generate(cross_k, cross_v)[0]))
        if words(said) != text.split():
            parted.append((text, said))
    assert len(parted) <= 1, f"commands that lost their words with the cached tail: {parted}"
