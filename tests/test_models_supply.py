"""The model supply chain: pinned digests are enforced on downloads, inputs and built artifacts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from voxline import paths
from voxline.errors import DigestMismatch
from voxline.models import load_manifest
from voxline.models.manifest import MANIFEST_PATH
from voxline.models.supply import fetch, is_current, sha256_file, verify_model

REAL_CACHE = paths.cache_dir()
SMALL_MODEL = "silero-vad-v5"  # 2.3 MB, built by copying one member out of one npm tarball


def _flip_byte(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def scratch_cache(tmp_path, monkeypatch):
    """An empty cache holding only copies of the real downloads, so no test here touches the network."""
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    downloads = paths.downloads_dir()
    downloads.mkdir(parents=True)
    for name in ("ricky0123-vad-web-0.0.31.tgz", "pipecat_ai-1.14.0-py3-none-any.whl"):
        source = REAL_CACHE / "downloads" / name
        if not source.exists():
            pytest.fail(f"{source} missing: run `voxline models fetch` first")
        shutil.copyfile(source, downloads / name)
    return tmp_path / "cache"


def _manifest_with(tmp_path: Path, edit) -> Path:
    raw = json.loads(MANIFEST_PATH.read_text())
    edit(raw)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(raw))
    return path


def test_every_model_has_pinned_artifacts():
    manifest = load_manifest()
    unpinned = [m.name for m in manifest.models if not m.artifacts]
    assert unpinned == []
    for pkg in manifest.packages.values():
        assert len(pkg.sha256) == 64, pkg.name


def test_build_order_puts_sources_first():
    order = [m.name for m in load_manifest().in_build_order(["whisper-tiny-en-onnx"])]
    assert order == ["whisper-tiny-en-ct2", "whisper-tiny-en-onnx"]


def test_fetch_builds_and_then_skips(scratch_cache):
    manifest = load_manifest()
    assert list(fetch(manifest, [SMALL_MODEL])) == [SMALL_MODEL]
    assert verify_model(manifest.model(SMALL_MODEL)) == []
    assert fetch(manifest, [SMALL_MODEL]) == {}


def test_download_with_wrong_pin_is_refused_naming_both_digests(scratch_cache, tmp_path):
    wrong = "0" * 64
    manifest = load_manifest(_manifest_with(
        tmp_path, lambda raw: raw["packages"]["@ricky0123/vad-web"].update(sha256=wrong)))
    with pytest.raises(DigestMismatch) as caught:
        fetch(manifest, [SMALL_MODEL])
    message = str(caught.value)
    assert "@ricky0123/vad-web@0.0.31" in message
    assert wrong in message
    assert sha256_file(scratch_cache / "downloads" / "ricky0123-vad-web-0.0.31.tgz.rejected") in message
    assert not paths.model_dir(SMALL_MODEL).exists()


def test_tampered_download_is_refused(scratch_cache):
    _flip_byte(scratch_cache / "downloads" / "ricky0123-vad-web-0.0.31.tgz")
    with pytest.raises(DigestMismatch, match="vad-web"):
        fetch(load_manifest(), [SMALL_MODEL])


def test_input_pin_is_checked(scratch_cache, tmp_path):
    def edit(raw):
        model = next(m for m in raw["models"] if m["name"] == "smart-turn-v3.2")
        model["inputs"]["smart-turn-v3.2-cpu.onnx"]["sha256"] = "f" * 64

    with pytest.raises(DigestMismatch, match="smart-turn-v3.2-cpu.onnx"):
        fetch(load_manifest(_manifest_with(tmp_path, edit)), ["smart-turn-v3.2"])


def test_build_differing_from_pin_is_not_installed(scratch_cache, tmp_path):
    def edit(raw):
        next(m for m in raw["models"] if m["name"] == SMALL_MODEL)["artifacts"]["silero_vad_v5.onnx"] = "a" * 64

    with pytest.raises(DigestMismatch, match="differ from the manifest"):
        fetch(load_manifest(_manifest_with(tmp_path, edit)), [SMALL_MODEL])
    assert not paths.model_dir(SMALL_MODEL).exists()


def test_verify_finds_altered_missing_and_unexpected_files(scratch_cache):
    manifest = load_manifest()
    spec = manifest.model(SMALL_MODEL)
    fetch(manifest, [SMALL_MODEL])
    artifact = paths.model_dir(SMALL_MODEL) / "silero_vad_v5.onnx"

    _flip_byte(artifact)
    (paths.model_dir(SMALL_MODEL) / "stray.bin").write_bytes(b"x")
    problems = [str(p) for p in verify_model(spec)]
    assert any("silero_vad_v5.onnx" in p and "altered" in p for p in problems)
    assert any("stray.bin" in p and "unexpected" in p for p in problems)
    assert not is_current(spec)

    artifact.unlink()
    assert any("missing" in str(p) for p in verify_model(spec))


def test_fetch_repairs_an_altered_model(scratch_cache):
    manifest = load_manifest()
    fetch(manifest, [SMALL_MODEL])
    _flip_byte(paths.model_dir(SMALL_MODEL) / "silero_vad_v5.onnx")
    assert list(fetch(manifest, [SMALL_MODEL])) == [SMALL_MODEL]
    assert verify_model(manifest.model(SMALL_MODEL)) == []


def _voxline(*args: str, env_cache: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if env_cache is not None:
        import os

        env = {**os.environ, paths.CACHE_ENV: str(env_cache)}
    return subprocess.run([sys.executable, "-m", "voxline.cli", *args], capture_output=True, text=True, env=env)


def test_cli_verify_passes_on_the_real_cache():
    result = _voxline("models", "verify")
    assert result.returncode == 0, result.stderr


def test_cli_verify_fails_with_the_fix_on_an_empty_cache(tmp_path):
    result = _voxline("models", "verify", env_cache=tmp_path)
    assert result.returncode == 1
    assert "not built" in result.stderr
    assert "voxline models fetch" in result.stderr


def test_cli_list_shows_every_model():
    result = _voxline("models", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    for spec in load_manifest().models:
        assert rows[spec.name]["size_bytes"] > 0, spec.name
        assert rows[spec.name]["source"]
    assert rows["espeak-ng"]["source"] == "debian:espeak-ng"
