"""The browser runtimes come the way the models do: pinned npm tarballs, unpacked into the cache by
`voxline models fetch` (voxline/server/runtimes.py), each served file checked against its pin."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from voxline import paths
from voxline.config import REPO_ROOT
from voxline.errors import DigestMismatch, FetchError
from voxline.models import load_manifest
from voxline.models.supply import build_model
from voxline.server.runtimes import (RUNTIMES, RuntimePackage, fetch_runtimes, load_runtime_files, read_runtime_file,
                                     stored_zip)

REAL_DOWNLOADS = paths.downloads_dir()
FILES = {"rt.mjs": b"export const answer = 42;\n", "rt.wasm": b"\0asm" + bytes(range(200))}


def _tarball(folder: Path, files: dict[str, bytes], name: str = "fake-rt-1.0.0.tgz") -> Path:
    """An npm-style tarball: everything under `package/`, the served files under `package/dist/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        members = {"package/package.json": b"{}", **{f"package/dist/{k}": v for k, v in files.items()}}
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(buffer.getvalue())
    return path


def _package(tarball: Path, files: dict[str, bytes] = FILES) -> RuntimePackage:
    pins = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    return RuntimePackage("fake-rt", "1.0.0", "dist", pins, tarball=tarball.name,
                          tarball_sha256=hashlib.sha256(tarball.read_bytes()).hexdigest(), license="MIT")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_fetch_unpacks_only_the_pinned_files_once_and_the_server_reads_them(cache):
    package = _package(_tarball(paths.downloads_dir(), FILES))  # already downloaded: no npm, no network
    assert fetch_runtimes((package,), log_line=lambda line: None) == ["fake-rt"]
    folder = cache / "runtimes" / "fake-rt" / "1.0.0"
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert fetch_runtimes((package,), log_line=lambda line: None) == []  # all there and as pinned: skipped
    served = load_runtime_files(packages=(package,))["fake-rt"]
    assert {name: f.data for name, f in served.items()} == FILES
    # An altered file in the cache is restored from the tarball by the next fetch.
    (folder / "rt.wasm").write_bytes(b"altered")
    assert load_runtime_files(packages=(package,))["fake-rt"]["rt.wasm"].data is None
    assert fetch_runtimes((package,), log_line=lambda line: None) == ["fake-rt"]
    assert (folder / "rt.wasm").read_bytes() == FILES["rt.wasm"]


def test_a_tarball_whose_file_differs_from_its_pin_installs_nothing(cache):
    tarball = _tarball(paths.downloads_dir(), {**FILES, "rt.wasm": b"\0asm but another build"})
    package = _package(tarball)  # the tarball's own digest is pinned, its wasm's pin is the real one
    with pytest.raises(DigestMismatch, match="rt.wasm"):
        fetch_runtimes((package,), log_line=lambda line: None)
    assert list((cache / "runtimes" / "fake-rt").iterdir()) == []  # no folder, no partial one


def test_a_tarball_that_differs_from_its_pin_is_set_aside(cache):
    package = _package(_tarball(paths.downloads_dir(), FILES))
    tarball = _tarball(paths.downloads_dir(), {**FILES, "rt.mjs": b"export const answer = 41;\n"})
    with pytest.raises(DigestMismatch, match="pins"):
        fetch_runtimes((package,), log_line=lambda line: None)
    assert not tarball.exists() and tarball.with_name(tarball.name + ".rejected").exists()
    assert not (cache / "runtimes").exists()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def test_a_stored_zip_is_served_with_its_members_stored_and_pinned_both_ways(cache):
    members = {"os.py": b"import sys\n" * 400, "json/__init__.py": b"def loads(s): ...\n" * 300}
    shipped = _zip(members)
    stored = stored_zip(shipped)
    tarball = _tarball(paths.downloads_dir(), {**FILES, "lib.zip": shipped})
    pins = {**{n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()},
            "lib.zip": hashlib.sha256(stored).hexdigest()}
    package = RuntimePackage("fake-rt", "1.0.0", "dist", pins, tarball=tarball.name,
                             tarball_sha256=hashlib.sha256(tarball.read_bytes()).hexdigest(), license="MIT",
                             stored_zips={"lib.zip": hashlib.sha256(shipped).hexdigest()})
    assert fetch_runtimes((package,), log_line=lambda line: None) == ["fake-rt"]
    served = (cache / "runtimes" / "fake-rt" / "1.0.0" / "lib.zip").read_bytes()
    assert served == stored and stored_zip(shipped) == stored  # deterministic
    with zipfile.ZipFile(io.BytesIO(served)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        assert {i.filename: zf.read(i) for i in zf.infolist()} == members
    assert load_runtime_files(packages=(package,))["fake-rt"]["lib.zip"].data == stored
    # npm's copy (the tarball's, deflated) is read as served, so its pin is checked the same way.
    node_modules = cache / "node_modules"
    (node_modules / "fake-rt" / "dist").mkdir(parents=True)
    (node_modules / "fake-rt" / "dist" / "lib.zip").write_bytes(shipped)
    assert read_runtime_file(package, "lib.zip", node_modules).data == stored


def test_a_stored_zip_whose_shipped_copy_differs_installs_nothing(cache):
    shipped = _zip({"os.py": b"import sys\n"})
    tarball = _tarball(paths.downloads_dir(), {**FILES, "lib.zip": _zip({"os.py": b"import evil\n"})})
    pins = {**{n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()},
            "lib.zip": hashlib.sha256(stored_zip(shipped)).hexdigest()}
    package = RuntimePackage("fake-rt", "1.0.0", "dist", pins, tarball=tarball.name,
                             tarball_sha256=hashlib.sha256(tarball.read_bytes()).hexdigest(), license="MIT",
                             stored_zips={"lib.zip": hashlib.sha256(shipped).hexdigest()})
    with pytest.raises(DigestMismatch, match="lib.zip"):
        fetch_runtimes((package,), log_line=lambda line: None)
    assert list((cache / "runtimes" / "fake-rt").iterdir()) == []


@pytest.mark.parametrize("package", RUNTIMES, ids=lambda p: p.name)
def test_the_pinned_tarballs_are_the_ones_package_lock_installs(package):
    locked = json.loads((REPO_ROOT / "package-lock.json").read_text())["packages"][f"node_modules/{package.name}"]
    assert locked["version"] == package.version
    downloaded = REAL_DOWNLOADS / package.tarball
    if not downloaded.exists():
        pytest.skip(f"{downloaded} not downloaded yet (`voxline models fetch`)")
    digest = hashlib.sha512(downloaded.read_bytes()).digest()
    assert locked["integrity"] == "sha512-" + base64.b64encode(digest).decode()
    assert hashlib.sha256(downloaded.read_bytes()).hexdigest() == package.tarball_sha256


def test_building_a_model_without_the_convert_extra_says_which_extra(cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if `voxline[convert]` were not installed
    manifest = load_manifest()
    with pytest.raises(FetchError, match=r"pip install 'voxline\[convert\]'"):
        build_model(manifest, manifest.model("smart-turn-v3.2"), log=lambda line: None)
    assert not (cache / "models").exists()  # refused before anything was downloaded or made
